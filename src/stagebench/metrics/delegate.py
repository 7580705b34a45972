"""Measures stagebench does not implement, computed by ir_measures (``stagebench eval -m ERR@10``).

ir_measures (``pip install 'stagebench[interop]'``) names hundreds of measures over a dozen
providers (trec_eval, gdeval, cwl_eval, ...). A measure string stagebench does not parse
itself is handed to it when it is installed; its value is ir_measures' own, with the
conventions its string carries (``P(rel=2)@10``, ``nDCG(gains={0:0,1:1,2:3})@10``), unjudged
documents counted as irrelevant, and averaged over the same query set as every stagebench
measure: every judged query with a positive grade, a query the run lacks scored 0.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from stagebench.optional import need


def ir_measures_version() -> str | None:
    try:
        return importlib.import_module("ir_measures").__version__
    except ImportError:
        return None


def parse_delegated(text: str) -> Any | None:
    """ir_measures' measure for ``text``, or None when ir_measures is absent or does not know it."""
    if ir_measures_version() is None:
        return None
    irm = need("ir_measures", "a measure stagebench does not implement")
    try:
        return irm.parse_measure(text)
    except (ValueError, NameError, TypeError, SyntaxError, AttributeError, KeyError):
        return None


def delegated_per_query(measures: Iterable[Any], qrels: Mapping[str, Mapping[str, int]],
                        run: Mapping[str, Mapping[str, float]], scored: Iterable[str]) -> dict[str, dict[str, float]]:  # fmt: skip
    """measure name (as given) -> qid -> value over the ``scored`` queries (absent from ir_measures'
    answer - a query the run lacks - : 0)."""
    irm = need("ir_measures", "a measure stagebench does not implement")
    measures = list(measures)
    scored = list(scored)
    keep = set(scored)
    values: dict[str, dict[str, float]] = {str(m): {} for m in measures}
    for metric in irm.iter_calc(measures, {q: dict(d) for q, d in qrels.items() if q in keep},
                                {q: dict(d) for q, d in run.items() if q in keep}):  # fmt: skip
        values[str(metric.measure)][metric.query_id] = float(metric.value)
    return {name: {q: per.get(q, 0.0) for q in scored} for name, per in values.items()}
