"""One measure's value on one query: a ranked list and the query's judgments in, a number out
(the kernels of :mod:`stagebench.metrics.compute`, chosen by the measure's family)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stagebench.metrics import compute
from stagebench.metrics.names import Measure


def per_query_value(
    measure: Measure, ranking: list[str], judgments: Mapping[str, int], relevance_threshold: int, gain: Any
) -> float:
    rel = measure.rel if measure.rel is not None else relevance_threshold
    k = measure.cutoff
    f = measure.family
    if f == "nDCG":
        return compute.ndcg(ranking, judgments, k, measure.gain or gain)
    if f == "nDCG_Burges":
        return compute.ndcg(ranking, judgments, k, "exponential")
    if f == "F1":
        return compute.f1(ranking, judgments, k, rel)
    if f == "Hits":
        return compute.hits(ranking, judgments, k, rel)
    if f == "RR":
        return compute.reciprocal_rank(ranking, judgments, k, rel)
    if f == "R":
        return compute.recall(ranking, judgments, k, rel)
    if f == "P":
        return compute.precision(ranking, judgments, k, rel)
    if f == "AP":
        return compute.average_precision(ranking, judgments, k, rel)
    if f == "Hit":
        return compute.hit(ranking, judgments, k, rel)
    if f == "Rprec":
        return compute.r_precision(ranking, judgments, rel)
    if f == "Judged":
        return compute.judged(ranking, judgments, k)
    raise AssertionError(f"unhandled family {f}")
