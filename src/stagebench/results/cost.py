"""Quality against cost, as data: each stage's nDCG@10 against its cumulative compute seconds and
model work per query, its cumulative latency serving one query at a time (p50/p95/p99 over the
sampled queries, each query's latency summed over the cascade up to the stage), and the Pareto fronts
(drawn by :func:`stagebench.report.plots.quality_cost_chart`, tabled in report.html)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stagebench.record import LLMStats, RerankStats, StageRecord
from stagebench.stats import latency_percentiles
from stagebench.table import StageTable


@dataclass(frozen=True)
class CostPoint:
    """One stage on the quality-cost plane."""

    stage: str
    seconds_per_query: float  # its compute seconds plus every upstream stage's (each once), per query
    quality: float  # nDCG@10 (or the first measure when nDCG@10 is not scored)
    work_per_query: float | None  # pairs scored (a reranker) or tokens (an LLM stage) per query; None: neither
    pareto: bool  # no other stage is at least as good for at most its cost, and better in one
    #: p50, p95, p99 ms of serving one query through the cascade up to this stage (None: a stage
    #: upstream was not measured)
    latency_ms: tuple[float, float, float] | None = None
    pareto_latency: bool = False  # the Pareto front of quality against p95 latency


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
        pts.append((r.stage, secs, r.metrics[metric], work, cascade_latency([by[x] for x in upstream(r.stage)])))
    p95 = [(lat[1], q) for _, _, q, _, lat in pts if lat is not None]
    return [CostPoint(name, c, q, w, _front(c, q, [(c2, q2) for _, c2, q2, _, _ in pts]), lat,
                      lat is not None and _front(lat[1], q, p95))
            for name, c, q, w, lat in pts]  # fmt: skip


def _front(cost: float, quality: float, others: list[tuple[float, float]]) -> bool:
    """No other point is at least as good for at most the cost, and better in one."""
    return not any(c2 <= cost and q2 >= quality and (c2 < cost or q2 > quality) for c2, q2 in others)


def cascade_latency(stages: Sequence[StageRecord]) -> tuple[float, float, float] | None:
    """p50/p95/p99 of each sampled query's latency summed over ``stages`` (a cascade up to a stage,
    each stage once): the percentiles of the sum, not the sum of the percentiles. ``None`` when a
    stage was not measured or the stages were measured on different queries."""
    lat = [s.latency_ms for s in stages]
    if not lat or any(x is None or not x for x in lat) or any(set(x) != set(lat[0]) for x in lat):  # type: ignore[arg-type]
        return None
    return latency_percentiles([math.fsum(x[q] for x in lat) for q in sorted(lat[0])])  # type: ignore[index]
