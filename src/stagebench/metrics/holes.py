"""What a measure does with the documents nobody judged (the "holes"): three treatments.

* ``irrelevant`` - a hole counts as grade 0. trec_eval's default and every table's main view: it
  never credits a stage for a product nobody looked at, so it is the low end of the bounds.
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stagebench.metrics.compute import Gain
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
