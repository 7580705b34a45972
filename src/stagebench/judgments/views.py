"""One measure of every stage under the three views of the holes, on one fixed query set: the
ground the judging round stands on (:mod:`stagebench.judgments.incompleteness`,
:mod:`stagebench.judgments.planning`).

* ``irrelevant`` - a hole counts as grade 0 (the main table);
* ``judged_only`` - holes removed before the cut (trec_eval ``-J``);
* ``bounds`` - every hole irrelevant .. every hole at the top grade; its point value, where an
  order needs one, is the midpoint, and two stages are *settled* when their bounds do not overlap.

The query set is fixed by the caller (the folder's scored queries), so qrels with judgments taken
away or added still average over the same queries.

Whether the judgments settle the order of two stages is asked of the *pair*
(:func:`stagebench.metrics.holes.pair_bounds`): the bounds of the mean difference over every grading of the holes, a hole
taking one grade for both stages. Two stages' own bounds can overlap while their difference is
settled: a hole both rank at the same place moves both alike, never their order. The table's
bounds (:meth:`StageViews.settled`, the stage table's ``~x`` marks) ask each stage alone, so
they never settle more than the pair does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from stagebench.metrics import holes
from stagebench.metrics.names import Measure
from stagebench.judgments.agreement import kendall_tau_b


VIEWS = ("irrelevant", "judged_only", "bounds")


@dataclass(frozen=True)
class StageViews:
    """Every stage's mean under every view, and its bounds."""

    values: dict[str, dict[str, float]]  # view -> stage -> mean (bounds: the midpoint)
    bounds: dict[str, tuple[float, float]]  # stage -> (low, high)
    per_query: dict[str, dict[str, list[float]]]  # view (irrelevant, judged_only) -> stage -> values in query order

    def settled(self) -> dict[tuple[str, str], int]:
        """Every stage pair (in stage order): +1 when the first's bounds lie above the second's, -1
        below, 0 when they overlap (the judgments do not settle the pair)."""
        return {(a, b): settled_sign(self.bounds[a], self.bounds[b]) for a, b in combinations(self.bounds, 2)}


def settled_sign(a: tuple[float, float], b: tuple[float, float]) -> int:
    if a[0] > b[1]:
        return 1
    if b[0] > a[1]:
        return -1
    return 0


def stage_views(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
                queries: Sequence[str], measure: Measure, top: int, rel: int, gain: object) -> StageViews:  # fmt: skip
    """``measure`` of every stage under every view over ``queries``; ``top``: the grade a hole takes
    at the high end of the bounds (fixed by the caller, so every qrels variant uses the same one)."""
    values: dict[str, dict[str, float]] = {v: {} for v in VIEWS}
    per_query: dict[str, dict[str, list[float]]] = {"irrelevant": {}, "judged_only": {}}
    bounds: dict[str, tuple[float, float]] = {}
    n = len(queries)
    for s, by_q in ranked.items():
        low, jo, high = [], [], []
        for q in queries:
            r, j = by_q[q], qrels.get(q, {})
            low.append(holes.value(measure, r, j, "irrelevant", top, rel, gain))
            jo.append(holes.value(measure, r, j, "judged_only", top, rel, gain))
            high.append(holes.value(measure, r, j, "top_grade", top, rel, gain))
        lo, hi = holes.bounds(dict(enumerate(low)), dict(enumerate(high)))
        bounds[s] = (sum(lo.values()) / n, sum(hi.values()) / n)
        values["irrelevant"][s], values["judged_only"][s] = sum(low) / n, sum(jo) / n
        values["bounds"][s] = (bounds[s][0] + bounds[s][1]) / 2
        per_query["irrelevant"][s], per_query["judged_only"][s] = low, jo
    return StageViews(values, bounds, per_query)


def pair_settled(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
                 queries: Sequence[str], measure: Measure, top: int, rel: int, gain: object) -> dict[tuple[str, str], int]:  # fmt: skip
    """Every stage pair (in stage order): +1 when the judgments settle the first above the second
    (its difference's bounds above 0), -1 below, 0 open."""
    out = {}
    for a, b in combinations(ranked, 2):
        lo, hi = holes.pair_bounds(ranked, qrels, queries, measure, top, rel, gain, a, b)
        out[(a, b)] = 1 if lo > 1e-12 else -1 if hi < -1e-12 else 0
    return out


def tau(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Kendall's tau-b between two orders of the same stages (1: the same order, -1: reversed). An
    order that ties every stage says nothing: 1.0 against another such order (or with fewer than two
    stages), else 0.0."""
    keys = list(a)
    t = kendall_tau_b([a[k] for k in keys], [b[k] for k in keys])
    if t is not None:
        return t
    return 1.0 if len(keys) < 2 or (len({a[k] for k in keys}) < 2 and len({b[k] for k in keys}) < 2) else 0.0


__all__ = ["VIEWS", "StageViews", "pair_settled", "settled_sign", "stage_views", "tau"]
