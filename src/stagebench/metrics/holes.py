"""What a measure does with the documents nobody judged (the "holes"): three treatments.

* ``irrelevant`` - a hole counts as grade 0. trec_eval's default and every table's main view: it
  never credits a stage for a product nobody looked at. It is the lowest value over the gradings
  of the holes for P, Hit, Hits, RR and R, not always for nDCG and AP (below).
* ``judged_only`` - holes are removed from the ranking before it is cut at k (condensed lists:
  trec_eval ``-J``, pytrec_eval's ``judged_docs_only_flag``, the official ESCI evaluation).
* ``top_grade`` - every hole within the measure's cut-off (the whole ranking for a measure without
  one) counts at the top grade: the grade worth most under the gain map (of a gain table's grades,
  else of the grades the qrels hold). Normalised measures
  (nDCG, AP, R, Rprec) see those documents in their ideal and their number of relevant documents
  too, exactly as trec_eval would on qrels filled that way.

The bounds of a measure on a query are the lower and the higher of its ``irrelevant`` and
``top_grade`` values. For P, Hit, Hits, RR and R a hole can only raise the value as its grade
rises, so every grading of the holes lands inside the bounds. nDCG, ERR, AP and Rprec are not monotone
in a hole's grade (ERR: a relevant hole above a relevant document lowers that document's share) (a hole that turns relevant raises their normaliser too), so for them the bounds
are the two extreme scenarios, not a guarantee for every mixed grading (docs/metrics.md).
``Judged@k`` describes the run's judgments themselves and is the same under every treatment.

Two stages' difference has bounds of its own that do hold for every grading of the holes in either
top k, a hole taking one grade for both (:func:`pair_bounds`, :func:`pair_query_bounds`): the
judging round settles stage orders with them, and the stage table marks a pair open unless they
exclude 0 (:mod:`stagebench.results.scoring`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stagebench.metrics.compute import Gain, dcg, discount, gain_map
from stagebench.metrics.families import FAMILIES
from stagebench.metrics.names import Measure
from stagebench.metrics.value import per_query_value

HOLES = ("irrelevant", "judged_only", "top_grade")
#: the families whose every grading of the holes lies inside the bounds (declared ``holes="monotone"``)
MONOTONE = frozenset(f.name for f in FAMILIES if f.holes == "monotone")
#: families that describe the judgments of a ranking, not its quality: the same under every treatment
#: (declared ``holes="unaffected"``)
UNAFFECTED = frozenset(f.name for f in FAMILIES if f.holes == "unaffected")


def top_grade(qrels: Mapping[str, Mapping[str, int]], gain: Gain) -> int:
    """The grade a hole takes in the ``top_grade`` treatment: the grade worth most under ``gain`` (the
    highest such grade on a tie) of a gain table's grades, or else of the grades the qrels hold."""
    grades = {g for g, _ in gain.table} or {g for docs in qrels.values() for g in docs.values()}
    return max(grades, key=lambda g: (gain(g), g))


def value(measure: Measure, ranking: Sequence[str], judgments: Mapping[str, int], holes: str, top: int,
          relevance_threshold: int, gain: Any) -> float:  # fmt: skip
    """One measure on one query's ranking under a treatment of its holes."""
    if holes == "irrelevant" or measure.family in UNAFFECTED:
        return per_query_value(measure, list(ranking), judgments, relevance_threshold, gain)
    if holes == "judged_only":
        return per_query_value(measure, [d for d in ranking if d in judgments], judgments, relevance_threshold, gain)
    if holes != "top_grade":
        raise ValueError(f"holes {holes!r}: one of {', '.join(HOLES)}")
    window = ranking if measure.cutoff is None else ranking[: measure.cutoff]
    filled = dict(judgments)
    filled.update((d, top) for d in window if d not in judgments)
    return per_query_value(measure, list(ranking), filled, relevance_threshold, gain)


def bounds(low: Mapping[str, float], high: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """Per query, the lower and the higher of a measure's ``irrelevant`` (``low``) and ``top_grade``
    (``high``) values: the interval the holes leave open."""
    return ({q: min(v, high[q]) for q, v in low.items()}, {q: max(v, high[q]) for q, v in low.items()})


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point: the judgments do not settle which of two stages is better."""
    return a[0] <= b[1] and b[0] <= a[1]


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
        va = [value(measure, ra, judged, h, top, rel, gain) for h in ("irrelevant", "top_grade")]
        vb = [value(measure, rb, judged, h, top, rel, gain) for h in ("irrelevant", "top_grade")]
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
