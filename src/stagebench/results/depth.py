"""A reranker's depth sweep (``depths:``), computed: per depth its ceiling in the ceiling measure
(``evaluation.ceiling``, nDCG@10 by default), what it achieved, whether that differs significantly from
its input, and the pairs it scored."""

from __future__ import annotations

from stagebench import stats
from stagebench.metrics import Measure, per_query_value
from stagebench.record import EvaluationRecord, RerankStats, LLMStats, StageRecord
from stagebench.results import ceilings
from stagebench.runs import Run, ranked_ids
from stagebench.table import DepthCells


def depth_sweep(s: StageRecord, runs: dict[str, Run], qrels: dict, queries: list[str], rel: int, gain,
                ev: EvaluationRecord, measure: Measure) -> list[DepthCells]:  # fmt: skip
    """A reranker's depth sweep: per depth, its ceiling in ``measure``, what it achieved, whether that differs
    significantly from its input (paired randomization test, Holm over the depths), and its cost."""
    inp = runs[s.inputs[0]]
    pairs = (s.stats.pairs if isinstance(s.stats, (RerankStats, LLMStats)) else None) or {}
    in_q = {q: per_query_value(measure, ranked_ids(inp.get(q, {})), qrels[q], rel, gain) for q in queries}
    rows = []
    for name, n in zip(s.depth_runs, s.depths):
        c = ceilings.ceiling(inp, runs[name], qrels, queries, n, rel, gain, measure)
        out_q = [per_query_value(measure, ranked_ids(runs[name].get(q, {})), qrels[q], rel, gain) for q in queries]
        cmp = stats.paired_test(name, s.inputs[0], measure.name, out_q, [in_q[q] for q in queries], ev.permutations,
                                ev.seed)  # fmt: skip
        rows.append((n, c, cmp))
    holm = stats.holm([cmp.p_rand for _, _, cmp in rows])
    return [DepthCells(depth=n, pool_recall=round(c.pool_recall, 6), input=round(c.input, 6),
                       achieved=round(c.achieved, 6), oracle=round(c.oracle, 6),
                       headroom_captured=None if c.headroom_captured is None else round(c.headroom_captured, 6),
                       p_value=float(f"{p:.4g}"), significant=bool(p < ev.alpha and cmp.mean_a != cmp.mean_b),
                       pairs=int(pairs.get(n, 0)), measure=measure.name)
            for (n, c, cmp), p in zip(rows, holm)]  # fmt: skip
