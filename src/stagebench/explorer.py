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

from stagebench.runs import Run, ranked_ids

TEXTS_FILE = "texts.json"
#: documents shown per stage, and the characters of a title kept (the report stays small)
TOP = 10
TITLE_CHARS = 60
UP, DOWN = "\u2191", "\u2193"


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


def build(stages: Sequence[dict], runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]],
          per_query: Mapping[str, Mapping[str, Mapping[str, float]]], metric: str, queries: Sequence[str], rel: int,
          texts: Mapping) -> list[QueryView]:  # fmt: skip
    """One :class:`QueryView` per scored query, in ``queries`` order (each stage's run is ranked once
    per query; ranks are looked up only in the runs that are some stage's input)."""
    qtexts = texts.get("queries", {})
    inputs_of = {i for s in stages for i in s["inputs"]}
    out = []
    for q in queries:
        judged = qrels.get(q, {})
        relevant = {d for d, g in judged.items() if g >= rel}
        order = {s["name"]: ranked_ids(runs[s["name"]].get(q, {})) for s in stages}
        rank = {name: {d: i for i, d in enumerate(order[name], start=1)} for name in inputs_of}
        views = []
        for s in stages:
            name, inputs = s["name"], list(s["inputs"])
            value = per_query[name][metric][q]
            change = value - per_query[inputs[0]][metric][q] if inputs else None
            top = [Shown(d, judged.get(d), [rank[i].get(d) for i in inputs]) for d in order[name][:TOP]]
            depth = int(s["candidate_depth"]) if s.get("reorders_input") and inputs else None
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


def as_json(views: Sequence[QueryView], stages: Sequence[dict], metric: str, label_names: Mapping[int, str],
            texts: Mapping) -> dict:  # fmt: skip
    """The explorer's data for report.html, compact: documents are indices into one table of
    (id, title), each shown document is ``[doc, grade or null, ranks in the inputs]``."""
    index: dict[str, int] = {}
    titles = texts.get("docs", {})

    def doc(d: str) -> int:
        if d not in index:
            index[d] = len(index)
        return index[d]

    queries = []
    for v in views:
        queries.append({
            "id": v.qid, "text": v.text, "judged": v.judged, "relevant": v.relevant,
            "values": [round(s.value, 4) for s in v.stages],
            "changes": [None if s.change is None else round(s.change, 4) for s in v.stages],
            "top": [[[doc(x.doc), x.grade, x.came_from] for x in s.top] for s in v.stages],
            "lost": [[[doc(d), g] for d, g in s.lost] for s in v.stages],
        })  # fmt: skip
    return {
        "metric": metric,
        "stages": [{"name": s["name"], "inputs": list(s["inputs"]),
                    "depth": int(s["candidate_depth"]) if s.get("reorders_input") and s["inputs"] else None}
                   for s in stages],  # fmt: skip
        "labels": {str(g): name for g, name in label_names.items()},
        "docs": [[d, titles.get(d, "")] for d in index],
        "queries": queries,
    }


def _grade(g: int | None, labels: Mapping[int, str]) -> str:
    return "?" if g is None else labels.get(g, str(g))


def _moved(rank: int, came_from: list[int | None]) -> str:
    if not came_from:
        return ""
    first = came_from[0]
    if first is None:
        return "new" if len(came_from) == 1 else "from " + "/".join("-" if r is None else str(r) for r in came_from)
    if len(came_from) > 1:
        return "from " + "/".join("-" if r is None else str(r) for r in came_from)
    if first == rank:
        return "="
    arrow = UP if first > rank else DOWN
    return f"{arrow}{abs(first - rank)} (was {first})"


def render_text(v: QueryView, metric: str, labels: Mapping[int, str], titles: Mapping[str, str]) -> str:
    """``stagebench show``: each stage's top 10 with grades and moves, then what was lost."""
    lines = [f"query {v.qid}: {v.text or '(no text saved)'}",
             f"{v.judged} judged, {v.relevant} relevant; grades: "
             + ", ".join(f"{name}={g}" for g, name in sorted(labels.items(), reverse=True)) + ", ? = unjudged", ""]  # fmt: skip
    for s in v.stages:
        change = "" if s.change is None else f" ({s.change:+.4f} vs {s.inputs[0]})"
        moves = "" if not s.inputs else f"; moves against {', '.join(s.inputs)}"
        lines.append(f"{s.name}: {metric} {s.value:.4f}{change}{moves}")
        id_w = max((len(x.doc) for x in s.top), default=0)
        for i, x in enumerate(s.top, start=1):
            lines.append(f"  {i:>2}  {_grade(x.grade, labels):>2}  {_moved(i, x.came_from):<14} {x.doc:<{id_w}}  "
                         f"{titles.get(x.doc, '')}".rstrip())  # fmt: skip
        if not s.top:
            lines.append("  (no documents)")
        if s.depth is not None:
            if s.lost:
                lines.append(f"  lost at retrieval: {len(s.lost)} relevant not in the top {s.depth} of {s.inputs[0]}: "
                             + ", ".join(f"{d} ({_grade(g, labels)})" for d, g in s.lost))
            else:
                lines.append(f"  lost at retrieval: none (every relevant document was in the top {s.depth} of {s.inputs[0]})")
        lines.append("")
    return "\n".join(lines)


__all__ = ["QueryView", "StageView", "TEXTS_FILE", "as_json", "build", "primary_measure", "read_texts",
           "render_text", "texts_for", "wins_and_losses"]
