"""The stage table: one row per stage in pipeline order, rendered as text, Markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from stagebench.metrics import Evaluation


def stage_rows(stages: Sequence[dict], evals: dict[str, Evaluation]) -> list[dict]:
    """``stages``: dicts with name/type/inputs/seconds. Returns the JSON rows of the table."""
    rows = []
    for s in stages:
        ev = evals[s["name"]]
        row = {"stage": s["name"], "type": s["type"], "inputs": list(s["inputs"])}
        row.update({k: round(v, 6) for k, v in ev.means.items()})
        row["queries"] = len(ev.scored_queries)
        row["queries_without_results"] = len(ev.missing_queries)
        row["seconds"] = round(s["seconds"], 3)
        rows.append(row)
    return rows


def _metric_names(rows: Sequence[dict]) -> list[str]:
    fixed = {"stage", "type", "inputs", "queries", "queries_without_results", "seconds"}
    return [k for k in rows[0] if k not in fixed] if rows else []


def conventions_line(relevance_threshold: int, gain: str) -> str:
    g = "linear gain (grade, as trec_eval)" if gain == "linear" else "exponential gain (2^grade - 1)"
    return f"nDCG: {g}; binary measures: relevant = grade >= {relevance_threshold}; ties: score desc, docid desc"


def render_markdown(rows: Sequence[dict], title: str, notes: Sequence[str] = ()) -> str:
    metrics = _metric_names(rows)
    head = ["stage", "type", "inputs", *metrics, "queries", "time (s)"]
    out = [f"### {title}", ""]
    out += [f"{n}  " for n in notes]
    out += ["", "| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
    for r in rows:
        cells = [r["stage"], r["type"], ", ".join(r["inputs"]) or "-"]
        cells += [f"{r[m]:.4f}" for m in metrics]
        cells += [str(r["queries"]), f"{r['seconds']:.1f}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def render_text(rows: Sequence[dict], title: str, notes: Sequence[str] = ()) -> str:
    metrics = _metric_names(rows)
    head = ["stage", "type", "inputs", *metrics, "queries", "time(s)"]
    body = [
        [r["stage"], r["type"], ",".join(r["inputs"]) or "-", *[f"{r[m]:.4f}" for m in metrics],
         str(r["queries"]), f"{r['seconds']:.1f}"]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [title, *notes, fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)]
    return "\n".join(lines) + "\n"


def render_csv(rows: Sequence[dict]) -> str:
    metrics = _metric_names(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["stage", "type", "inputs", *metrics, "queries", "queries_without_results", "seconds"])
    for r in rows:
        w.writerow([r["stage"], r["type"], " ".join(r["inputs"]), *[f"{r[m]:.6f}" for m in metrics],
                    r["queries"], r["queries_without_results"], r["seconds"]])  # fmt: skip
    return buf.getvalue()


def render_json(rows: Sequence[dict]) -> str:
    return json.dumps(list(rows), indent=2) + "\n"


def per_query_csv(stage_order: Sequence[str], evals: dict[str, Evaluation]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = [m.name for m in evals[stage_order[0]].measures]
    w.writerow(["stage", "qid", *names])
    for s in stage_order:
        ev = evals[s]
        for q in ev.scored_queries:
            w.writerow([s, q, *[f"{ev.per_query[n][q]:.6f}" for n in names]])
    return buf.getvalue()
