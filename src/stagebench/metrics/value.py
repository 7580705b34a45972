"""One measure's value on one query: a ranked list and the query's judgments in, a number out (the
kernel its family declares, :mod:`stagebench.metrics.families`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stagebench.metrics.names import Measure


def per_query_value(
    measure: Measure, ranking: list[str], judgments: Mapping[str, int], relevance_threshold: int, gain: Any
) -> float:
    family = measure.declared
    rel = measure.rel if measure.rel is not None else relevance_threshold
    return family.kernel(ranking, judgments, measure.cutoff, rel, family.fixed_gain or measure.gain or gain, measure.params)
