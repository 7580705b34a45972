"""The per-query explorer rendered: its data for report.html (:func:`explorer_json`) and one
query in text (:func:`query_text`, ``stagebench show``); the views are :mod:`stagebench.results.queries`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stagebench.record import StageRecord
from stagebench.results.queries import QueryView

UP, DOWN = "\u2191", "\u2193"


def explorer_json(views: Sequence[QueryView], stages: Sequence[StageRecord], metric: str, label_names: Mapping[int, str],
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
        "stages": [{"name": s.name, "inputs": list(s.inputs),
                    "depth": int(s.candidate_depth or 0) if s.is_reranker else None}
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


def query_text(v: QueryView, metric: str, labels: Mapping[int, str], titles: Mapping[str, str]) -> str:
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
