"""Measures stagebench does not implement, computed by ir_measures (``RBP(rel=1,p=0.8)``, ``Bpref``,
``infAP``): wherever a measure name is read - a config's ``evaluation.metrics``, ``stagebench eval -m``,
``stagebench.evaluate`` - a name no family of :mod:`stagebench.metrics.families` claims is handed to
ir_measures when it is installed, and becomes a :class:`Delegated` measure: its per-query values are
ir_measures', and everything built on per-query values (the table's means and intervals, the
significance marks, segments) works on it as on a native one. What it cannot give: the judged-only
view and the bounds (ir_measures counts an unjudged document as irrelevant), said in one line where
asked for.

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
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stagebench.errors import StagebenchError
from stagebench.optional import need


@dataclass(frozen=True)
class Delegated:
    """A measure ir_measures computes: its name as ir_measures writes it, the provider that computes it
    here, and ir_measures' measure object. It answers the attributes a native
    :class:`~stagebench.metrics.names.Measure` has that its users read (no family, cut-off, threshold
    or gain of stagebench's own)."""

    name: str
    provider: str
    measure: Any = field(compare=False, hash=False, repr=False)
    family: ClassVar[str] = "ir_measures"
    cutoff: ClassVar[None] = None
    rel: ClassVar[None] = None
    gain: ClassVar[None] = None
    declared: ClassVar[None] = None

    def __str__(self) -> str:
        return self.name


def ir_measures_version() -> str | None:
    try:
        return importlib.import_module("ir_measures").__version__
    except ImportError:
        return None


def parse_delegated(text: str) -> Delegated | None:
    """ir_measures' measure for ``text`` as a :class:`Delegated`, or None when ir_measures is absent or
    does not know it; a measure it knows but no installed provider computes is one error naming what
    to install."""
    if ir_measures_version() is None:
        return None
    irm = need("ir_measures", "a measure stagebench does not implement")
    try:
        m = irm.parse_measure(text)
        m.validate_params()  # a parameter the measure does not take: ir_measures does not know it either
    except (ValueError, NameError, TypeError, SyntaxError, AttributeError, KeyError, AssertionError):
        return None
    providers = [p for p in irm.providers.registry.values() if p.supports(m)]
    ready = [p for p in providers if p.is_available()]
    if not ready:
        how = "; ".join(dict.fromkeys(p.install_instructions() for p in providers)) or "none known"
        raise StagebenchError(f"measure {text!r}: ir_measures {irm.__version__} knows it as {m}, but none of the "
                              f"providers that compute it is installed ({how})")  # fmt: skip
    return Delegated(str(m), ready[0].NAME, m)


def delegated_per_query(measures: Iterable[Any], qrels: Mapping[str, Mapping[str, int]],
                        run: Mapping[str, Mapping[str, float]], scored: Iterable[str]) -> dict[str, dict[str, float]]:  # fmt: skip
    """measure name (as given) -> qid -> value over the ``scored`` queries (absent from ir_measures'
    answer - a query the run lacks - : 0)."""
    irm = need("ir_measures", "a measure stagebench does not implement")
    scored = list(scored)
    keep = set(scored)
    q = {qid: dict(d) for qid, d in qrels.items() if qid in keep}
    r = {qid: dict(d) for qid, d in run.items() if qid in keep}
    # each measure by the provider it was resolved to: ir_measures' default pipeline does not try every
    # installed provider (RBP, which only trectools computes, is "unsupported" there)
    groups: dict[str | None, list[Any]] = {}
    for m in measures:
        groups.setdefault(m.provider if isinstance(m, Delegated) else None, []).append(
            m.measure if isinstance(m, Delegated) else m)
    values: dict[str, dict[str, float]] = {str(m): {} for ms in groups.values() for m in ms}
    for name, ms in groups.items():
        calc = irm.iter_calc(ms, q, r) if name is None else irm.providers.registry[name].evaluator(ms, q).iter_calc(r)
        for metric in calc:
            values[str(metric.measure)][metric.query_id] = float(metric.value)
    return {name: {qid: per.get(qid, 0.0) for qid in scored} for name, per in values.items()}
