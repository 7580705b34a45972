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
(:func:`pair_bounds`): the bounds of the mean difference over every grading of the holes, a hole
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
from stagebench.metrics.compute import dcg, discount, gain_map
from stagebench.metrics.names import Measure
from stagebench.judgments.agreement import kendall_tau_b
from stagebench.runs import Run, ranked_ids

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


def rankings(runs: Mapping[str, Run], stages: Sequence[str], queries: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """stage -> query -> its ranking (trec_eval's tie rule), computed once for every view."""
    return {s: {q: ranked_ids(runs[s].get(q, {})) for q in queries} for s in stages}


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


def _pair_query(m: Measure, ra: list[str], rb: list[str], judged: Mapping[str, int], top: int, rel: int,
                gain: object) -> tuple[float, float] | None:  # fmt: skip
    """The bounds of ``m(a) - m(b)`` on one query over every grading of its holes in either top k (each
    hole 0..``top``, the same for both stages) for the families declared ``paired``
    (:mod:`stagebench.metrics.families`): nDCG (the numerator exactly, the ideal bounded by its values
    with every hole irrelevant and every one at the top grade) and P; None for the others."""
    k = m.cutoff
    A, B = (ra, rb) if k is None else (ra[:k], rb[:k])
    family = m.declared
    if not family.paired:
        return None
    if family.graded:
        g = gain_map(family.fixed_gain or m.gain or gain)
        worth_a = {d: 1.0 / discount(i) for i, d in enumerate(A, start=1)}
        worth_b = {d: 1.0 / discount(i) for i, d in enumerate(B, start=1)}
        full = g(top)
    else:  # P: a cut-off is required
        g = _relevant(m.rel if m.rel is not None else rel)
        worth_a, worth_b, full = dict.fromkeys(A, 1.0 / k), dict.fromkeys(B, 1.0 / k), g(top)
    known = sum(g(judged[d]) * w for d, w in worth_a.items() if d in judged) - sum(
        g(judged[d]) * w for d, w in worth_b.items() if d in judged)
    open_ = [worth_a.get(d, 0.0) - worth_b.get(d, 0.0) for d in {*worth_a, *worth_b} if d not in judged]
    lo = known + sum(min(0.0, full * c) for c in open_)
    hi = known + sum(max(0.0, full * c) for c in open_)
    if not family.graded:
        return lo, hi
    gains = sorted((g(x) for x in judged.values()), reverse=True)
    n_holes = sum(1 for d in {*worth_a, *worth_b} if d not in judged)
    ideal_lo = dcg(gains[:k] if k else gains)
    filled = sorted(gains + [full] * n_holes, reverse=True)
    ideal_hi = dcg(filled[:k] if k else filled)
    if ideal_lo <= 0:
        return (-1.0, 1.0) if open_ else (0.0, 0.0)
    paired = (lo / (ideal_hi if lo >= 0 else ideal_lo), hi / (ideal_lo if hi >= 0 else ideal_hi))
    # each stage alone over every grading: its gain in the top k from every hole irrelevant to every
    # hole at the top grade, over the ideal from its largest to its smallest; a difference of two
    # nDCGs lies in [-1, 1]. All three are bounds, so is their intersection: with few judgments a
    # query's ideal is small and the paired division alone reaches far past them (issue 69)
    def alone(worth: dict[str, float]) -> tuple[float, float]:
        base = sum(g(judged[d]) * w for d, w in worth.items() if d in judged)
        extra = sum(full * w for d, w in worth.items() if d not in judged)
        return min(1.0, base / ideal_hi), min(1.0, (base + extra) / ideal_lo)

    (a_lo, a_hi), (b_lo, b_hi) = alone(worth_a), alone(worth_b)
    return max(paired[0], a_lo - b_hi, -1.0), min(paired[1], a_hi - b_lo, 1.0)


def _relevant(rel: int):
    return lambda grade: 1.0 if grade >= rel else 0.0


def pair_query_bounds(measure: Measure, ra: list[str], rb: list[str], judged: Mapping[str, int], top: int, rel: int,
                      gain: object) -> tuple[float, float]:  # fmt: skip
    """The bounds of ``measure(a) - measure(b)`` on one query over every grading of its holes: paired
    for nDCG and P (:func:`_pair_query`); for other measures the two stages' own bounds."""
    got = _pair_query(measure, ra, rb, judged, top, rel, gain)
    if got is None:
        va = [holes.value(measure, ra, judged, h, top, rel, gain) for h in ("irrelevant", "top_grade")]
        vb = [holes.value(measure, rb, judged, h, top, rel, gain) for h in ("irrelevant", "top_grade")]
        got = (min(va) - max(vb), max(va) - min(vb))
    return got


def pair_bounds(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
                queries: Sequence[str], measure: Measure, top: int, rel: int, gain: object, a: str,
                b: str) -> tuple[float, float]:  # fmt: skip
    """The bounds of the mean of ``measure(a) - measure(b)`` over ``queries`` across every grading of
    the holes (module docstring); for a measure other than nDCG and P, each query's difference is
    bounded by the two stages' own bounds (no tighter than the table's)."""
    lo = hi = 0.0
    for q in queries:
        got = pair_query_bounds(measure, ranked[a][q], ranked[b][q], qrels.get(q, {}), top, rel, gain)
        lo, hi = lo + got[0], hi + got[1]
    return lo / len(queries), hi / len(queries)


def pair_settled(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
                 queries: Sequence[str], measure: Measure, top: int, rel: int, gain: object) -> dict[tuple[str, str], int]:  # fmt: skip
    """Every stage pair (in stage order): +1 when the judgments settle the first above the second
    (its difference's bounds above 0), -1 below, 0 open."""
    out = {}
    for a, b in combinations(ranked, 2):
        lo, hi = pair_bounds(ranked, qrels, queries, measure, top, rel, gain, a, b)
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


__all__ = ["VIEWS", "StageViews", "pair_bounds", "pair_query_bounds", "pair_settled", "rankings", "settled_sign", "stage_views", "tau"]
