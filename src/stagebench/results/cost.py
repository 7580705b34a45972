"""Quality against cost, as data: each stage's nDCG@10 against its cumulative compute seconds and
model work per query, and the Pareto front (drawn by :func:`stagebench.report.plots.quality_cost_chart`,
tabled in report.html)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stagebench.record import LLMStats, RerankStats, StageRecord
from stagebench.table import StageTable


@dataclass(frozen=True)
class CostPoint:
    """One stage on the quality-cost plane."""

    stage: str
    seconds_per_query: float  # its compute seconds plus every upstream stage's (each once), per query
    quality: float  # nDCG@10 (or the first measure when nDCG@10 is not scored)
    work_per_query: float | None  # pairs scored (a reranker) or tokens (an LLM stage) per query; None: neither
    pareto: bool  # no other stage is at least as good for at most its cost, and better in one


def quality_cost(table: StageTable, stages: Sequence[StageRecord]) -> list[CostPoint]:
    """Each stage's :class:`CostPoint`, in table order. Compute seconds are those the cache recorded
    when the run was computed (a cached stage costs what it cost then)."""
    by = {s.name: s for s in stages}
    metric = "nDCG@10" if "nDCG@10" in table.metrics else table.metrics[0]
    n_q = max(table.rows[0].queries, 1) if table.rows else 1

    def upstream(name: str) -> set[str]:
        out, todo = set(), [name]
        while todo:
            x = todo.pop()
            if x not in out:
                out.add(x)
                todo += by[x].inputs
        return out

    pts = []
    for r in table.rows:
        # fsum: exactly rounded whatever the order, so the set's (hash-seeded) order cannot move a digit
        secs = math.fsum(by[x].computed_seconds or 0.0 for x in upstream(r.stage)) / n_q
        st = by[r.stage].stats
        work = None
        if isinstance(st, LLMStats):
            work = st.tokens / n_q
        elif isinstance(st, RerankStats):
            work = st.pairs.get(by[r.stage].candidate_depth or 0, 0) / n_q
        pts.append((r.stage, secs, r.metrics[metric], work))
    return [CostPoint(name, c, q, w, not any((c2 <= c and q2 >= q) and (c2 < c or q2 > q) for _, c2, q2, _ in pts))
            for name, c, q, w in pts]  # fmt: skip
