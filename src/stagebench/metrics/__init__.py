"""Exact IR measures with stated conventions.

Conventions (see ``docs/metrics.md``):

* **Ranking and ties**: documents are ranked by score descending, ties broken by doc
  id descending (trec_eval's rule), see :func:`stagebench.runs.ranked`.
* **Gain**: nDCG uses linear gain (the grade, as trec_eval) unless another gain map is set for
  the evaluation (``exponential``: ``2**grade - 1``; ``esci``: the official task-1 table; or a
  table ``{grade: gain}``) or in the name (``nDCG(gain=esci)@10``, ``nDCG_Burges@10``).
* **Relevance**: binary measures count a document as relevant when its grade is
  ``>= rel``; ``rel`` comes from the measure name or else the evaluation's
  ``relevance_threshold`` (default 1, as trec_eval's ``relevance_level``).
* **Scored queries** (one set for every measure, whatever the threshold): every query in
  the qrels with at least one positive grade (``>= 1``). A scored query missing from the
  run is scored on an empty ranking, as ``trec_eval -c`` scores it: 0 on every measure of the
  ranking, its judgments still counted by those of the judgments alone (NumRel, NumQ); a scored
  query with no document at a binary measure's ``rel`` scores 0 on that measure (as trec_eval).
  Queries judged only with grades <= 0, and run queries absent from the qrels, are not scored;
  their counts are reported (:attr:`Evaluation.excluded`). ``queries="run"`` keeps only the
  scored queries the run holds (trec_eval without ``-c``). No scored query at all is an error.
* **Negative grades** are trec_eval's "in the pool, not judged": a hole to every native measure
  (never relevant, not judged for Judged@k, removed by the judged-only view); ir_measures reads
  them as trec_eval does (infAP).
* **Cut-offs are real**: ``RR@10`` is 0 when the first relevant document is below rank 10.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from stagebench.errors import StagebenchError
from stagebench.metrics import compute
from stagebench.metrics import holes as _holes
from stagebench.metrics.delegate import Delegated, delegated_per_query
from stagebench.metrics.names import Measure, claims, parse_measure
from stagebench.metrics.supports import Supports
from stagebench.metrics.value import ideal_key, per_query_value
from stagebench.runs import ranked_ids

__all__ = ["AnyMeasure", "Delegated", "Measure", "Supports", "claims", "parse_measure", "evaluate", "evaluate_views", "Evaluation",
           "HoleViews", "ideal_key", "per_query_value", "HOLES", "parsed"]

HOLES = _holes.HOLES
#: a parsed measure of either kind: both answer ``name``, ``rel``, ``cutoff`` and ``supports``
AnyMeasure = Measure | Delegated


@dataclass
class Evaluation:
    """Per-query values and means of several measures on one run."""

    measures: list[Measure | Delegated]  # stagebench's own, and those ir_measures computes
    per_query: dict[str, dict[str, float]]  # measure name -> qid -> value
    relevance_threshold: int
    gain: compute.Gain
    scored_queries: list[str]
    missing_queries: list[str] = field(default_factory=list)  # scored but absent from the run
    unjudged_run_queries: int = 0  # run queries absent from the qrels (not scored)
    judged_without_positive: int = 0  # qrels queries whose every grade is <= 0 (not scored)
    holes: str = "irrelevant"  # how unjudged documents were treated (stagebench.metrics.holes)
    queries: str = "judged"  # the query set: judged (trec_eval -c) or run (trec_eval's default)
    run_without_scored: int = 0  # queries="run": scored queries the run lacks, left out of the averages

    @property
    def excluded(self) -> dict[str, int]:
        """Why queries were left out of the averages, with their counts."""
        out = {"judged, no positive grade": self.judged_without_positive,
               "in the run, not judged": self.unjudged_run_queries}  # fmt: skip
        if self.queries == "run":
            out["judged, not in the run"] = self.run_without_scored
        return out

    @property
    def means(self) -> dict[str, float]:
        n = len(self.scored_queries)
        return {name: (sum(v.values()) / n if n else 0.0) for name, v in self.per_query.items()}


#: a query is scored when it has a judgment at this grade or above (a positive gain)
SCORED_MIN_GRADE = 1
#: the query sets a run can be averaged over (:func:`evaluate`'s ``queries``)
QUERY_SETS = ("judged", "run")


def scored_query_ids(qrels: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The query set every measure averages over: queries with a positive grade, sorted."""
    return sorted(q for q, docs in qrels.items() if any(g >= SCORED_MIN_GRADE for g in docs.values()))


def check_thresholds(qrels: Mapping[str, Mapping[str, int]], relevance_threshold: int, measures: Iterable[Measure | str],
                     where: str, flag: str = "relevance threshold") -> None:  # fmt: skip
    """Refuse a relevance threshold (or a measure's ``rel=``) above every grade the qrels hold: every
    binary measure would be 0 for every query, an answer that says nothing."""
    grades = [g for docs in qrels.values() for g in docs.values()]
    top = max(grades, default=0)
    if top < SCORED_MIN_GRADE:
        return  # nothing is scorable at all: evaluate says so in its own words
    if relevance_threshold > top:
        raise StagebenchError(f"{where}: {flag} {relevance_threshold} is above every grade in the qrels (highest: {top}); "
                              "every binary measure would be 0")  # fmt: skip
    for m in parsed(measures):
        if m.rel is not None and m.rel > top:
            raise StagebenchError(f"{where}: {m.name}: rel={m.rel} is above every grade in the qrels (highest: {top})")


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    measures: Iterable[Measure | str],
    *,
    relevance_threshold: int = 1,
    gain: Any = "linear",
    holes: str = "irrelevant",
    queries: str = "judged",
) -> Evaluation:
    """Score ``run`` against ``qrels`` on every measure, per query and on average; ``gain``: a
    name (linear, exponential, esci) or a table grade -> gain (:func:`compute.gain_map`);
    ``holes``: what an unjudged document counts as - ``irrelevant`` (trec_eval's default),
    ``judged_only`` (removed before the cut, trec_eval ``-J``) or ``top_grade``
    (:mod:`stagebench.metrics.holes`); ``queries``: ``judged`` (every judged query with a positive
    grade, a query the run lacks scored on an empty ranking: trec_eval -c) or ``run`` (only those
    the run holds: trec_eval's default)."""
    if holes not in HOLES:
        raise StagebenchError(f"holes {holes!r}: one of {', '.join(HOLES)}")
    if queries not in QUERY_SETS:
        raise StagebenchError(f"queries {queries!r}: one of {', '.join(QUERY_SETS)}")
    try:
        gain = compute.gain_map(gain)
    except ValueError as exc:
        raise StagebenchError(f"gain: {exc}") from None
    if gain.table:
        missing = sorted({g for docs in qrels.values() for g in docs.values()} - {g for g, _ in gain.table})
        if missing:
            raise StagebenchError(f"{gain.describe()}: no gain for grade(s) {missing}, which the qrels hold")

    ms = parsed(measures)
    names = [m.name for m in ms]
    delegated = [m for m in ms if not m.supports.native]
    unviewed = [m for m in ms if not m.supports.views]
    if holes != "irrelevant" and unviewed:
        raise StagebenchError(f"{', '.join(m.name for m in unviewed)}: computed by ir_measures, which counts an unjudged "
                              f"document as irrelevant only: no {holes.replace('_', '-')} view of it")  # fmt: skip
    held = sorted({g for docs in qrels.values() for g in docs.values() if g >= SCORED_MIN_GRADE})
    if held and not any(gain(g) > 0 for g in held) and any(m.supports.reads_gain for m in ms):
        raise StagebenchError(f"{gain.describe()}: no grade the qrels hold ({', '.join(map(str, held))}) has a "
                              "positive gain, so every nDCG would be 0")  # fmt: skip
    for m in ms:
        problem = m.params.problem(max(held, default=0)) if hasattr(getattr(m, "params", None), "problem") else None
        if problem:
            raise StagebenchError(f"{m.name}: {problem}")
    check_distinct(ms)
    if relevance_threshold < 1:
        raise StagebenchError(f"relevance threshold {relevance_threshold}: must be >= 1 (grade 0 means not relevant)")
    judged_scored = scored_query_ids(qrels)
    if not judged_scored:
        raise StagebenchError(f"no query in the qrels has a positive grade ({len(qrels)} queries judged): "
                              "nothing can be scored")  # fmt: skip
    scored = judged_scored if queries == "judged" else [q for q in judged_scored if run.get(q)]
    if not scored:
        raise StagebenchError(f"the run holds none of the {len(judged_scored)} judged queries with a positive grade: "
                              "nothing to average over the run's queries")  # fmt: skip
    top = _holes.top_grade(qrels, gain)
    native_qrels = _without_negative(qrels)
    per_query: dict[str, dict[str, float]] = {n: {} for n in names}
    native = [(m, n) for m, n in zip(ms, names) if m.supports.native]  # asked once, not per query
    missing = []
    for qid in scored:
        docs = run.get(qid)
        if not docs:
            missing.append(qid)
        ranking = ranked_ids(docs) if docs else []
        for m, n in native:
            per_query[n][qid] = _holes.value(m, ranking, native_qrels[qid], holes, top, relevance_threshold, gain)
    if delegated:
        try:
            per_query.update(delegated_per_query(delegated, qrels, run, scored, relevance_threshold, gain))
        except Exception as exc:  # noqa: BLE001 - any failure of the library (a provider's subprocess too) is one line
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise StagebenchError(f"{', '.join(m.name for m in delegated)}: ir_measures could not compute it "
                                  f"({type(exc).__name__}: {first[:300]})") from None  # fmt: skip
    return Evaluation(
        measures=ms,
        per_query=per_query,
        relevance_threshold=relevance_threshold,
        gain=gain,
        scored_queries=scored,
        missing_queries=missing,
        unjudged_run_queries=sum(1 for q in run if q not in qrels),
        judged_without_positive=len(qrels) - len(judged_scored),
        holes=holes,
        queries=queries,
        run_without_scored=len(judged_scored) - len(scored),
    )


def parsed(measures: Iterable[Measure | Delegated | str]) -> list[Measure | Delegated]:
    """Measures given as names or as parsed measures, parsed."""
    return [parse_measure(m) if isinstance(m, str) else m for m in measures]


def _without_negative(qrels: Mapping[str, Mapping[str, int]]) -> Mapping[str, Mapping[str, int]]:
    """The judgments native measures read: a negative grade (trec_eval: in the pool, not judged) is a hole."""
    if all(g >= 0 for docs in qrels.values() for g in docs.values()):
        return qrels
    return {q: {d: g for d, g in docs.items() if g >= 0} for q, docs in qrels.items()}


def check_distinct(measures: Sequence[Measure | Delegated], given: Sequence[str] | None = None,
                   where: str = "measures") -> None:  # fmt: skip
    """Refuse two names of one measure (``ndcg_cut_10`` beside ``nDCG@10``) in one line naming both
    spellings; ``given``: the names as the user wrote them (default: the parsed names)."""
    given = list(given) if given is not None else [m.name for m in measures]
    first: dict[str, str] = {}
    for m, text in zip(measures, given):
        if m.name in first:
            if first[m.name] == text:
                raise StagebenchError(f"{where}: {m.name} is given twice; keep one")
            raise StagebenchError(f"{where}: {first[m.name]!r} and {text!r} both name {m.name}; keep one")
        first[m.name] = text


@dataclass
class HoleViews:
    """One run scored under every treatment of its holes (``stagebench eval --view bounds|all``):
    the ``irrelevant``, ``judged_only`` and ``top_grade`` evaluations, and per measure and query the
    bounds they leave open (:func:`stagebench.metrics.holes.bounds`). A measure ir_measures computes
    is in ``irrelevant`` only (:attr:`unviewed`): it has no judged-only view and no bounds."""

    irrelevant: Evaluation
    judged_only: Evaluation
    top_grade: Evaluation

    @property
    def scored_queries(self) -> list[str]:
        return self.irrelevant.scored_queries

    @property
    def unviewed(self) -> list[str]:
        """The measures with no judged-only view and no bounds (ir_measures')."""
        return [n for n in self.irrelevant.per_query if n not in self.judged_only.per_query]

    def bounds(self, name: str) -> dict[str, tuple[float, float]]:
        """Per query, the low and high value of measure ``name``."""
        lo, hi = _holes.bounds(self.irrelevant.per_query[name], self.top_grade.per_query[name])
        return {q: (lo[q], hi[q]) for q in self.scored_queries}

    @property
    def means(self) -> dict[str, dict[str, float]]:
        """Per measure with views the mean of each: ``irrelevant``, ``judged_only``, ``low``, ``high``."""
        n = len(self.scored_queries)
        out = {}
        for name in self.judged_only.per_query:
            b = self.bounds(name).values()
            out[name] = {"irrelevant": self.irrelevant.means[name], "judged_only": self.judged_only.means[name],
                         "low": sum(lo for lo, _ in b) / n, "high": sum(hi for _, hi in b) / n}  # fmt: skip
        return out


def evaluate_views(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                   measures: Iterable[Measure | str], *, relevance_threshold: int = 1, gain: Any = "linear",
                   queries: str = "judged") -> HoleViews:  # fmt: skip
    """:func:`evaluate` under each treatment of the holes, with the bounds between them; a measure
    ir_measures computes is scored in the ``irrelevant`` view only."""
    ms = parsed(measures)
    native = [m for m in ms if m.supports.views]
    kw = {"relevance_threshold": relevance_threshold, "gain": gain, "queries": queries}
    main = evaluate(qrels, run, ms, **kw)
    if not native:
        raise StagebenchError(f"{', '.join(m.name for m in ms)}: computed by ir_measures, which counts an unjudged "
                              "document as irrelevant only: no judged-only view and no bounds")  # fmt: skip
    return HoleViews(main, *(evaluate(qrels, run, native, **kw, holes=h) for h in ("judged_only", "top_grade")))
