"""Measures stagebench does not implement, computed by ir_measures (``Bpref``, ``infAP``, ``SetP``, or
trec_eval's names of them: ``bpref``, ``set_P``): wherever a measure name is read - a config's ``evaluation.metrics``, ``stagebench eval -m``,
``stagebench.evaluate`` - a name no family of :mod:`stagebench.metrics.families` claims is handed to
ir_measures when it is installed, and becomes a :class:`Delegated` measure: its per-query values are
ir_measures', and everything built on per-query values (the table's means and intervals, the
significance marks, segments) works on it as on a native one. What it cannot give: the judged-only
view and the bounds (ir_measures counts an unjudged document as irrelevant), said in one line where
asked for.

ir_measures (``pip install 'stagebench[interop]'``) names hundreds of measures over a dozen
providers (trec_eval, gdeval, cwl_eval, ...). A measure string stagebench does not parse
itself is handed to it when it is installed; its value is ir_measures' own, with the
conventions its string carries (``P(rel=2)@10``, ``nDCG(gains={0:0,1:1,2:3})@10``) and the
evaluation's where it leaves them open (:func:`under`: the relevance threshold, the gain map),
unjudged documents counted as irrelevant, and averaged over the same query set as every stagebench
measure: every judged query with a positive grade, a query the run lacks scored on one unjudged
document as trec_eval -c scores it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from stagebench.errors import StagebenchError
from stagebench.metrics.supports import DELEGATED, Supports
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

    @property
    def supports(self) -> Supports:
        """Its per-query values in the main view, by its provider; no other view, bound or ceiling. It reads
        the evaluation's gain map when it takes ``gains`` and its name gives none (:func:`under`)."""
        takes = self.measure is not None and "gains" in self.measure.SUPPORTED_PARAMS
        return replace(DELEGATED, provider=self.provider, reads_gain=takes and "gains" not in self.measure.params)


def ir_measures_version() -> str | None:
    try:
        return importlib.import_module("ir_measures").__version__
    except ImportError:
        return None


class UnknownForm(StagebenchError):
    """ir_measures knows the measure's name but refuses the rest of the string; where the name is also one
    of stagebench's families, stagebench's own reason is the one to give."""


#: the ranges of ir_measures' parameters that cannot mean anything outside them (ir_measures accepts
#: ``IPrec@1.5`` and ``Compat(p=1.5)`` and prints 0): parameter -> (low, high, low open, high open, why)
RANGES = {
    "cutoff": (1, None, False, False, "a cut-off keeps at least one document"),
    "rel": (1, None, False, False, "grade 0 means not relevant"),
    "p": (0.0, 1.0, True, True, "a persistence, the chance of reading on"),
    "recall": (0.0, 1.0, False, False, "a recall level"),
    "alpha": (0.0, 1.0, False, False, "a redundancy penalty"),
    "beta": (0.0, None, True, False, "the weight of recall"),
}  # fmt: skip


def out_of_range(params: Mapping[str, Any]) -> str | None:
    """Why a parameter ir_measures was given lies outside the range it can mean anything in (:data:`RANGES`)."""
    for key, value in params.items():
        if key not in RANGES or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        lo, hi, lo_open, hi_open, why = RANGES[key]
        below = value <= lo if lo_open else value < lo
        above = hi is not None and (value >= hi if hi_open else value > hi)
        if below or above:
            span = f"{'(' if lo_open else '['}{lo}, {'inf)' if hi is None else str(hi) + (')' if hi_open else ']')}"
            return f"{key} {value:g} is outside {span} ({why})"
    return None


def parse_delegated(text: str) -> Delegated | None:
    """ir_measures' measure for ``text`` as a :class:`Delegated`, or None when ir_measures is absent or
    does not know it; a measure it knows but no installed provider computes, a form of a measure it
    knows that it refuses, or a parameter outside its range (:data:`RANGES`) is one error naming it."""
    if ir_measures_version() is None:
        return None
    irm = need("ir_measures", "a measure stagebench does not implement")
    m = _ir_measure(irm, text)
    if m is None:
        return None
    if isinstance(m, str):
        raise UnknownForm(f"measure {text!r}: ir_measures {irm.__version__} knows the measure but not this "
                              f"form ({m})")  # fmt: skip
    bad = out_of_range(m.params)
    if bad:
        raise StagebenchError(f"measure {text!r}: {bad}")
    providers = [p for p in irm.providers.registry.values() if p.supports(m)]
    ready = [p for p in providers if p.is_available()]
    if not ready:
        how = "; ".join(dict.fromkeys(p.install_instructions() for p in providers)) or "none known"
        raise StagebenchError(f"measure {text!r}: ir_measures {irm.__version__} knows it as {m}, but none of the "
                              f"providers that compute it is installed ({how})")  # fmt: skip
    return Delegated(str(m), ready[0].NAME, m)


def _ir_measure(irm: Any, text: str) -> Any:
    """ir_measures' measure for ``text``, its own spelling (``Bpref``, ``IPrec@0.1``) or trec_eval's of a
    measure it computes (``bpref``, ``iprec_at_recall_0.10``, ``set_P``); None when it knows neither; its
    reason (a string) when it knows the measure's name but refuses the rest (``SetF(beta=-1)``)."""
    errors = (ValueError, NameError, TypeError, SyntaxError, AttributeError, KeyError, AssertionError)
    try:
        m = irm.parse_measure(text)
        m.validate_params()  # a parameter the measure does not take: ir_measures does not know it either
        return m
    except errors as exc:
        refused = exc
    try:
        found = irm.parse_trec_measure(text.strip())
    except errors:
        found = []
    if len(found) == 1:
        return found[0]
    family = text.strip().split("(")[0].split("@")[0]
    if family in irm.measures.registry:
        return (str(refused).splitlines() or [type(refused).__name__])[0]
    return None


#: the document a query the run lacks is scored on, as trec_eval -c scores it ("ceci_nest_pas_un_docno"):
#: one unjudged document, so that a measure of the judgments alone (NumRel) keeps its value and every
#: other scores what an empty ranking scores
ABSENT_DOC = "stagebench:no-document"


def under(measure: Delegated, relevance_threshold: int, gains: Mapping[int, float] | None = None) -> Any:
    """ir_measures' measure with the evaluation's conventions where its name leaves them open: ``rel`` set to
    the relevance threshold for a measure whose ``rel`` defaults to 1 (Bpref, infAP, SetP, IPrec, ...), and
    ``gains`` (grade -> gain; None for the linear map, ir_measures' default) for one that takes gains. A
    name that states them keeps its own."""
    m = measure.measure
    supported, given = m.SUPPORTED_PARAMS, m.params
    extra: dict[str, Any] = {}
    if "rel" in supported and "rel" not in given and getattr(supported["rel"], "default", None) == 1:
        extra["rel"] = relevance_threshold
    if "gains" in supported and "gains" not in given and gains is not None:
        extra["gains"] = dict(gains)
    return m(**extra) if extra else m


def computed_as(measure: Delegated, relevance_threshold: int, gains: Mapping[int, float] | None = None) -> str:
    """What the notes and the header say a delegated measure is: its provider, and the measure computed
    when the conventions filled in what its name left open (``pytrec_eval, as Bpref(rel=2)``)."""
    done = str(under(measure, relevance_threshold, gains))
    return measure.provider + ("" if done == measure.name else f", as {done}")


def described(measures: Iterable[Any], qrels: Mapping[str, Mapping[str, int]], relevance_threshold: int,
              gain: Any) -> dict[str, str]:  # fmt: skip
    """Each delegated measure among ``measures`` -> :func:`computed_as` under the evaluation's threshold and
    gain map (a :class:`~stagebench.metrics.compute.Gain`), as the header and the table's notes name it."""
    gains = gains_of(gain, qrels)
    return {m.name: computed_as(m, relevance_threshold, gains) for m in measures if not m.supports.native}


def gains_of(gain: Any, qrels: Mapping[str, Mapping[str, int]]) -> dict[int, float] | None:
    """The gain map (a :class:`~stagebench.metrics.compute.Gain`) as ir_measures' ``gains``: grade -> gain
    for every grade the qrels hold; None for the linear map (ir_measures' own default) or no map."""
    if gain is None or gain.name == "linear":
        return None
    return {g: gain(g) for g in sorted({g for docs in qrels.values() for g in docs.values()})}


def delegated_per_query(measures: Iterable[Delegated], qrels: Mapping[str, Mapping[str, int]],
                        run: Mapping[str, Mapping[str, float]], scored: Iterable[str], relevance_threshold: int = 1,
                        gain: Any = None) -> dict[str, dict[str, float]]:  # fmt: skip
    """measure name (as given) -> qid -> value over the ``scored`` queries, each measure under the
    evaluation's conventions (:func:`under`; ``gain``: a :class:`~stagebench.metrics.compute.Gain`, its
    table read for the grades the qrels hold). A scored query the run lacks is scored as trec_eval -c
    scores it, on one unjudged document (:data:`ABSENT_DOC`)."""
    irm = need("ir_measures", "a measure stagebench does not implement")
    scored = list(scored)
    keep = set(scored)
    q = {qid: dict(d) for qid, d in qrels.items() if qid in keep}
    r = {qid: dict(run[qid]) if run.get(qid) else {_absent(q[qid]): 1.0} for qid in scored}
    gains = gains_of(gain, q)
    # each measure by the provider it was resolved to: ir_measures' default pipeline does not try every
    # installed provider (RBP, which only trectools computes, is "unsupported" there)
    groups: dict[str, list[Any]] = {}
    named: dict[str, str] = {}
    for m in measures:
        eff = under(m, relevance_threshold, gains)
        groups.setdefault(m.provider, []).append(eff)
        named[str(eff)] = m.name
    values: dict[str, dict[str, float]] = {name: {} for name in named.values()}
    for provider, ms in groups.items():
        for metric in irm.providers.registry[provider].evaluator(ms, q).iter_calc(r):
            values[named[str(metric.measure)]][metric.query_id] = float(metric.value)
    return {name: {qid: per.get(qid, 0.0) for qid in scored} for name, per in values.items()}


def _absent(judged: Mapping[str, int]) -> str:
    doc = ABSENT_DOC
    while doc in judged:
        doc += "_"
    return doc
