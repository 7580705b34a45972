"""What the stage table is for: recall ceilings, oracle headroom, labels and losses.

For a stage that **reorders** an input run (a reranker) with candidate depth ``N``:

* ``pool_recall`` - R@N of the input: the share of relevant documents that reached the
  candidate pool, the most any reordering can reach;
* ``oracle`` - the ceiling measure (``evaluation.ceiling``, nDCG@10 by default) of the ideal
  reordering of exactly those N candidates (pool sorted by the measure's worth of each document -
  its gain for nDCG, its grade for the others, :func:`stagebench.metrics.ideal_key` - ties in input
  order, then the unreranked tail in input order);
* ``input`` / ``achieved`` - the ceiling measure of the input run and of the stage's output;
* ``headroom_captured`` - (achieved - input) / (oracle - input), on the means; ``None`` when
  the room (oracle - input) is below :data:`MIN_ROOM`, the tables' display resolution, where
  a percentage would divide by noise (the tables then say "no room" and show the change).

For every stage: R@k for k in 10, 100, 1000 (up to the run's depth), the share of E/S/C/I
and unjudged documents in the top 10, and ``lost`` - the queries none of whose relevant
documents is among the stage's candidates (the whole run for retrievers and fusers, the
N-deep pool for rerankers): no later reordering can recover them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from stagebench.metrics import Measure, compute, ideal_key, per_query_value
from stagebench.runs import Run, ranked_ids

RECALL_DEPTHS = (10, 100, 1000)
#: below this oracle - input gap (the 4-decimal display resolution) headroom is "no room"
MIN_ROOM = 1e-4


def oracle_ranking(ranking: Sequence[str], judgments: Mapping[str, int], depth: int, measure: Measure,
                   gain: object) -> list[str]:  # fmt: skip
    """The reordering of the top ``depth`` of ``ranking`` that ``measure`` values most; the tail stays as it is."""
    pool, tail = list(ranking[:depth]), list(ranking[depth:])
    worth = ideal_key(measure, judgments, gain)
    pool.sort(key=lambda d: -worth(d))  # stable: ties keep input order
    return pool + tail


@dataclass
class Ceiling:
    depth: int
    pool_recall: float
    input: float
    achieved: float
    oracle: float
    per_query_oracle: dict[str, float] = field(default_factory=dict)

    @property
    def headroom_captured(self) -> float | None:
        room = self.oracle - self.input
        return None if room < MIN_ROOM else (self.achieved - self.input) / room


def ceiling(input_run: Run, output_run: Run, qrels: Mapping[str, Mapping[str, int]], queries: Sequence[str],
            depth: int, rel: int, gain: object, measure: Measure) -> Ceiling:  # fmt: skip
    """A reranker's ceiling at candidate depth ``depth`` in ``measure`` (one that
    :attr:`~stagebench.metrics.Supports.ceiling`: its ideal order is its maximum), on the means."""
    n = len(queries) or 1
    pool_recall = inp = ach = orc = 0.0
    per_q = {}
    for q in queries:
        j = qrels[q]
        in_rank = ranked_ids(input_run.get(q, {}))
        out_rank = ranked_ids(output_run.get(q, {}))
        pool_recall += compute.recall(in_rank, j, depth, rel)
        inp += per_query_value(measure, in_rank, j, rel, gain)
        ach += per_query_value(measure, out_rank, j, rel, gain)
        per_q[q] = per_query_value(measure, oracle_ranking(in_rank, j, depth, measure, gain), j, rel, gain)
        orc += per_q[q]
    return Ceiling(depth, pool_recall / n, inp / n, ach / n, orc / n, per_q)


def recall_at(run: Run, qrels, queries: Sequence[str], rel: int, depths: Sequence[int] = RECALL_DEPTHS) -> dict[str, float]:
    deepest = max((len(v) for v in run.values()), default=0)
    n = len(queries) or 1
    out = {}
    for k in depths:
        if k > deepest and k != depths[0]:
            break
        out[f"R@{k}"] = sum(compute.recall(ranked_ids(run.get(q, {})), qrels[q], k, rel) for q in queries) / n
    return out


def recall_curve(run: Run, qrels, queries: Sequence[str], rel: int, max_k: int) -> list[float]:
    """Mean R@k for k = 1..max_k (one pass per query)."""

    acc = np.zeros(max_k)
    for q in queries:
        j = qrels[q]
        n_rel = sum(1 for g in j.values() if g >= rel)
        if not n_rel:
            continue
        hits = np.array([1.0 if j.get(d, -1) >= rel else 0.0 for d in ranked_ids(run.get(q, {}))[:max_k]])
        cum = np.cumsum(hits) / n_rel
        row = np.full(max_k, cum[-1] if cum.size else 0.0)
        row[: cum.size] = cum
        acc += row
    return (acc / max(len(queries), 1)).tolist()


def top_labels(run: Run, qrels, queries: Sequence[str], label_names: Mapping[int, str] | None, k: int = 10) -> dict[str, float]:
    """Share of the top-k positions held by each label (and by unjudged documents)."""
    names = dict(label_names or {})
    counts: dict[str, int] = {names.get(g, str(g)): 0 for g in sorted(names, reverse=True)}
    counts["unjudged"] = 0
    total = 0
    for q in queries:
        j = qrels[q]
        for d in ranked_ids(run.get(q, {}))[:k]:
            g = j.get(d)
            key = "unjudged" if g is None else names.get(g, str(g))
            counts[key] = counts.get(key, 0) + 1
            total += 1
    return {key: (c / total if total else 0.0) for key, c in counts.items()}


def lost(candidates: Run, qrels, queries: Sequence[str], rel: int, depth: int | None = None) -> int:
    """Queries none of whose relevant documents is among the candidates (top ``depth``)."""
    n = 0
    for q in queries:
        relevant = {d for d, g in qrels[q].items() if g >= rel}
        cands = ranked_ids(candidates.get(q, {}))
        if depth is not None:
            cands = cands[:depth]
        if relevant.isdisjoint(cands):
            n += 1
    return n
