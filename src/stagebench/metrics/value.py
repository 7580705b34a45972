"""One measure's value on one query: a ranked list and the query's judgments in, a number out (the
kernel its family declares, :mod:`stagebench.metrics.families`); and the order of a pool that gives a
measure its highest value there (its oracle, read by the ceilings and the depth sweep)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stagebench.metrics.compute import gain_map
from stagebench.metrics.names import Measure


def per_query_value(
    measure: Measure, ranking: list[str], judgments: Mapping[str, int], relevance_threshold: int, gain: Any
) -> float:
    family = measure.declared
    rel = measure.rel if measure.rel is not None else relevance_threshold
    return family.kernel(ranking, judgments, measure.cutoff, rel, family.fixed_gain or measure.gain or gain, measure.params)


def ideal_key(measure: Measure, judgments: Mapping[str, int], gain: Any) -> Callable[[str], float]:
    """A document's worth in ``measure``'s ideal order (higher first): its gain for a measure that reads a
    gain map (nDCG: a gain table need not rise with the grade), else its grade, which puts every document
    relevant at any threshold first (P, R, RR, AP, ERR, RBP...). An unjudged document is worth 0."""
    if measure.declared.reads_gain:
        g = gain_map(measure.declared.fixed_gain or measure.gain or gain)
        return lambda d: g(judgments[d]) if d in judgments else 0.0
    return lambda d: float(judgments.get(d, 0))
