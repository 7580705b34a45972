"""The head/tail merge every reranker shares.

A reranker reorders the top ``top_n`` of each query (the head) and returns **every** candidate
of its input: the head in the reranker's order, then the tail in its input order with scores
strictly below the lowest head score whatever their sign (``tail_j = min(head) - 1 - j``).
"""

from __future__ import annotations

import numpy as np

from stagebench.runs import Run, ranked, ranked_ids


def merge_head_tail(head: dict[str, float], tail: list[str]) -> dict[str, float]:
    """Head scores as given; tail documents strictly below, in the given order."""
    out = dict(head)
    if not tail:
        return out
    base = min(head.values()) if head else 0.0
    scores = [base - 1.0 - j for j in range(len(tail))]
    if len(set(scores)) < len(scores) or scores[0] >= base:  # float precision ran out (|base| ~ 1e16)
        ordered = [d for d, _ in ranked(head)] + tail
        return {d: float(len(ordered) - i) for i, d in enumerate(ordered)}
    out.update(zip(tail, scores))
    return out


def split_head(run: Run, top_n: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each query's ranked doc ids split into the head a reranker reorders (the top ``top_n``)
    and the tail it keeps in order below."""
    heads: dict[str, list[str]] = {}
    tails: dict[str, list[str]] = {}
    for qid, docs in run.items():
        order = ranked_ids(docs)
        heads[qid], tails[qid] = order[:top_n], order[top_n:]
    return heads, tails


def sigmoid_keeping_order(logits: np.ndarray) -> np.ndarray:
    """sigmoid(logits), except where it saturates: two different logits whose sigmoids round
    to the same float (1.0 for every logit above about 37) would become a false tie that the
    tie rule then breaks by doc id. There the lower one is moved down by the smallest step a
    float allows, so the order is exactly the logits' order; equal logits stay tied."""
    x = np.asarray(logits, dtype=np.float64)
    out = 1.0 / (1.0 + np.exp(-x))
    order = np.argsort(-x, kind="stable")
    for a, b in zip(order[:-1], order[1:]):
        if x[b] < x[a] and out[b] >= out[a]:
            out[b] = np.nextafter(out[a], -np.inf)
        elif x[b] == x[a]:
            out[b] = out[a]
    return out
