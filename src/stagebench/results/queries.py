"""What each stage did, query by query: the data behind report.html's per-query explorer and
``stagebench show RUN_DIR QUERY_ID``.

For every scored query: its text, how many documents are judged and relevant, each stage's value
of the primary measure (nDCG@10 when the evaluation has it) and its change against the stage's
input, each stage's top 10 (document, grade, and where the stage found it: its rank in each
input), and the relevant documents each reranker never saw ("lost at retrieval": not among the
top ``N`` candidates it was given). Texts come from ``texts.json``, which a run writes next to its
runs (query texts, and document titles rendered from the dataset's text template, shortened);
without it, ids stand in for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stagebench.record import StageRecord
from stagebench.runs import Run, ranked_ids


TEXTS_FILE = "texts.json"

#: documents shown per stage, and the characters of a title kept (the report stays small)
TOP = 10
TITLE_CHARS = 60


@dataclass
class Shown:
    """One document in a stage's top 10."""

    doc: str
    grade: int | None  # None: unjudged
    came_from: list[int | None]  # its 1-based rank in each input run (None: absent); [] for a retriever


@dataclass
class StageView:
    name: str
    inputs: list[str]
    value: float  # the primary measure
    change: float | None  # against the first input (None: a retriever)
    top: list[Shown]
    lost: list[tuple[str, int]] = field(default_factory=list)  # (doc, grade): relevant, not among the candidates
    depth: int | None = None  # a reranker's candidate depth


@dataclass
class QueryView:
    qid: str
    text: str
    judged: int
    relevant: int
    stages: list[StageView]


def primary_measure(metrics: Sequence[str]) -> str:
    return "nDCG@10" if "nDCG@10" in metrics else metrics[0]


def shorten(text: str, n: int = TITLE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "\u2026"


def texts_for(runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]], queries: Mapping[str, str],
              doc_text: Mapping[str, str], rel: int) -> dict:  # fmt: skip
    """What ``texts.json`` holds: every query's text, and a short title of each document the
    explorer can show (any stage's top 10, and every relevant judged document)."""
    docs: set[str] = set()
    for run in runs.values():
        for ranking in run.values():
            docs.update(ranked_ids(ranking)[:TOP])
    docs.update(d for judged in qrels.values() for d, g in judged.items() if g >= rel)
    return {"queries": dict(queries), "docs": {d: shorten(doc_text.get(d, "")) for d in sorted(docs) if d in doc_text}}


def read_texts(path: Path) -> dict:
    """``texts.json`` as written by :func:`texts_for` (the caller verified the file)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def build(stages: Sequence[StageRecord], runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]],
          per_query: Mapping[str, Mapping[str, Mapping[str, float]]], metric: str, queries: Sequence[str], rel: int,
          texts: Mapping) -> list[QueryView]:  # fmt: skip
    """One :class:`QueryView` per scored query, in ``queries`` order (each stage's run is ranked once
    per query; ranks are looked up only in the runs that are some stage's input)."""
    qtexts = texts.get("queries", {})
    inputs_of = {i for s in stages for i in s.inputs}
    out = []
    for q in queries:
        judged = qrels.get(q, {})
        relevant = {d for d, g in judged.items() if g >= rel}
        order = {s.name: ranked_ids(runs[s.name].get(q, {})) for s in stages}
        rank = {name: {d: i for i, d in enumerate(order[name], start=1)} for name in inputs_of}
        views = []
        for s in stages:
            name, inputs = s.name, list(s.inputs)
            value = per_query[name][metric][q]
            change = value - per_query[inputs[0]][metric][q] if inputs else None
            top = [Shown(d, judged.get(d), [rank[i].get(d) for i in inputs]) for d in order[name][:TOP]]
            depth = int(s.candidate_depth or 0) if s.is_reranker else None
            lost = []
            if depth is not None:
                pool = set(order[inputs[0]][:depth])
                lost = [(d, judged[d]) for d in sorted(relevant - pool, key=lambda d: (-judged[d], d))]
            views.append(StageView(name, inputs, value, change, top, lost, depth))
        out.append(QueryView(q, qtexts.get(q, ""), len(judged), len(relevant), views))
    return out


def wins_and_losses(views: Sequence[QueryView], n: int = 5) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Per stage with an input: the ``n`` queries it improved most and hurt most (change of the
    primary measure against its input), as (query id, change)."""
    out: dict[str, dict[str, list[tuple[str, float]]]] = {}
    if not views:
        return out
    for j, s in enumerate(views[0].stages):
        if s.change is None:
            continue
        changes = [(v.qid, v.stages[j].change) for v in views]
        wins = sorted((c for c in changes if c[1] > 0), key=lambda c: (-c[1], c[0]))[:n]
        losses = sorted((c for c in changes if c[1] < 0), key=lambda c: (c[1], c[0]))[:n]
        out[s.name] = {"wins": wins, "losses": losses}  # type: ignore[dict-item]
    return out
