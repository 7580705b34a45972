"""Runs and qrels in Python or TREC files, scored: :func:`evaluate` and :func:`evaluate_views` (a run held
in memory), :func:`evaluate_files` (``stagebench eval QRELS RUN``), :func:`compare_runs` (``eval`` with
several runs), and the checks and writers around them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stagebench import outputs
from stagebench.config import test_settings
from stagebench.errors import DataError, StagebenchError
from stagebench.metrics import Evaluation, HoleViews, Measure, check_distinct, check_thresholds, parse_measure
from stagebench.metrics import scored_query_ids
from stagebench.metrics import evaluate_views as _evaluate_views
from stagebench.metrics import evaluate as _evaluate
from stagebench.metrics.compute import gain_map
from stagebench.metrics.delegate import described
from stagebench.results.experiment import Experiment, experiment
from stagebench.runs import Run, checked_qrels, checked_run, read_trec_qrels, read_trec_run
from stagebench.runs import write_trec_run as _write_trec_run


def evaluate(qrels: Mapping[Any, Mapping[Any, Any]], run: Mapping[Any, Mapping[Any, Any]],
             measures: Iterable[Measure | str], *, relevance_threshold: int = 1, gain: Any = "linear",
             holes: str = "irrelevant", queries: str = "judged") -> Evaluation:  # fmt: skip
    """Score ``run`` ({qid: {docid: score}}) against ``qrels`` ({qid: {docid: grade}}) as
    ``stagebench eval`` scores files: ids checked as every loader checks them (strings, or
    integers read as their decimal strings; no null, float, whitespace or newline), scores
    finite, grades integers - anything else is one :class:`~stagebench.errors.DataError`
    naming the query and document. ``holes``: what an unjudged document counts as (irrelevant,
    judged_only or top_grade: :mod:`stagebench.metrics.holes`); ``queries``: ``judged`` (every judged
    query with a positive grade, one the run lacks scored on an empty ranking, as trec_eval -c) or
    ``run`` (only those the run holds, trec_eval's default). A run that holds none of the scored
    queries is refused: nothing could be scored."""
    measures = list(measures)
    q = checked_qrels(qrels, "qrels")
    check_thresholds(q, relevance_threshold, measures, "qrels", "relevance_threshold")
    r = checked_run(run, "run")
    check_answers(q, r, "run")
    return _evaluate(q, r, measures, relevance_threshold=relevance_threshold, gain=gain, holes=holes, queries=queries)


def evaluate_views(qrels: Mapping[Any, Mapping[Any, Any]], run: Mapping[Any, Mapping[Any, Any]],
                   measures: Iterable[Measure | str], *, relevance_threshold: int = 1, gain: Any = "linear",
                   queries: str = "judged") -> HoleViews:  # fmt: skip
    """:func:`evaluate` under every treatment of the holes, and the bounds between them
    (``stagebench eval --view bounds|all``), the input checked as :func:`evaluate` checks it."""
    measures = list(measures)
    q = checked_qrels(qrels, "qrels")
    check_thresholds(q, relevance_threshold, measures, "qrels", "relevance_threshold")
    r = checked_run(run, "run")
    check_answers(q, r, "run")
    return _evaluate_views(q, r, measures, relevance_threshold=relevance_threshold, gain=gain, queries=queries)


def check_answers(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], where: str) -> None:
    """Refuse a run that answers none of the scored queries (an empty file, or query ids of another
    collection) in one line naming it: every measure would be 0, an answer that says nothing."""
    scored = scored_query_ids(qrels)
    if not scored or any(run.get(qid) for qid in scored):
        return
    if not any(run.values()):
        raise DataError(f"{where}: the run holds no document for any query: nothing could be scored")
    theirs = sorted(q for q in run if run[q])
    raise DataError(f"{where}: the run holds none of the {len(scored)} scored queries (its {len(theirs)} queries, e.g. "
                    f"{', '.join(map(repr, theirs[:3]))}; the qrels', e.g. {', '.join(map(repr, scored[:3]))}): nothing "
                    "could be scored")  # fmt: skip


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "stagebench") -> Path:
    """Write ``run`` as a TREC run file (``qid Q0 docid rank score tag``, ranks by the tie rule, scores
    that read back exactly), under the rule of :mod:`stagebench.outputs`: never over a file that is not
    a TREC run already, never inside a results folder (or any folder stagebench keeps a record of)."""
    outputs.check_file(path, outputs.TREC_RUN)
    _write_trec_run(checked_run(run, "run"), path, tag)
    return Path(path)


@dataclass(frozen=True)
class FileEvaluation:
    """``stagebench eval QRELS RUN``'s answer: the run scored in ``view`` (``irrelevant``,
    ``judged-only``, ``bounds`` or ``all``) - one :class:`Evaluation`, or for ``bounds`` and ``all`` the
    :class:`HoleViews` - and the measures ir_measures computed, each with its provider and the measure it
    computed under the evaluation's conventions (``Bpref`` -> ``pytrec_eval, as Bpref(rel=2)`` at ``--rel 2``)."""

    view: str
    relevance_threshold: int
    gain: Any
    evaluation: Evaluation
    views: HoleViews | None
    delegated: dict[str, str]
    max_per_query: int | None = None

    @property
    def means(self) -> dict[str, float]:
        return self.evaluation.means


def _flag_measures(metrics: Sequence[str], relevance_threshold: int) -> list:
    """``eval``'s ``-m`` names parsed, and its ``--rel`` checked: each refusal one line naming the flag."""
    if relevance_threshold < 1:
        raise StagebenchError(f"--rel {relevance_threshold}: must be >= 1 (grade 0 means not relevant)")
    measures = []
    for m in metrics:
        try:
            measures.append(parse_measure(m))
        except StagebenchError as exc:
            raise StagebenchError(f"-m {m}: {exc}") from None
    check_distinct(measures, metrics, "-m")
    return measures


def _file_gain(gain: Any, qrels: Mapping[str, Mapping[str, int]]) -> Any:
    """A gain table for run files, as trec_eval's ``-m ndcg.G=V,...`` reads one: a grade of the qrels the table
    does not list keeps its own value as gain (0 for a grade <= 0); a name is left as it is."""
    if not isinstance(gain, Mapping):
        return gain
    table = {int(g): v for g, v in gain.items()}
    for docs in qrels.values():
        for g in docs.values():
            table.setdefault(int(g), float(max(int(g), 0)))
    return table


def _read_run(path: str | Path, max_per_query: int | None) -> Run:
    if max_per_query is not None and max_per_query < 1:
        raise StagebenchError(f"-M {max_per_query}: the most documents a query keeps must be >= 1")
    return read_trec_run(path, max_per_query)


def evaluate_files(qrels: str | Path, run: str | Path, metrics: Sequence[str], *, relevance_threshold: int = 1,
                   gain: Any = "linear", view: str = "irrelevant", queries: str = "judged",
                   max_per_query: int | None = None) -> FileEvaluation:  # fmt: skip
    """``stagebench eval``: a TREC run file scored against a TREC qrels file. Every measure name is
    read as :func:`stagebench.metrics.parse_measure` reads it (ir_measures computes the ones stagebench
    does not implement, in the ``irrelevant`` view only); ``queries``: ``judged`` (trec_eval -c) or
    ``run`` (trec_eval's default); ``max_per_query``: each query's top N only (trec_eval -M). Each
    refusal is one line naming the flag or the file."""
    measures = _flag_measures(metrics, relevance_threshold)
    if view not in ("irrelevant", "judged-only", "bounds", "all"):
        raise StagebenchError(f"--view {view}: one of irrelevant, judged-only, bounds, all")
    unviewed = [m.name for m in measures if not m.supports.views]
    if unviewed and len(unviewed) == len(measures) and view != "irrelevant":
        raise StagebenchError(f"--view {view}: ir_measures' measures ({', '.join(unviewed)}) count an unjudged "
                              "document as irrelevant only; score them with the default view")  # fmt: skip
    q = read_trec_qrels(qrels)
    gain = _file_gain(gain, q)
    check_thresholds(q, relevance_threshold, measures, str(qrels), "--rel")
    r = _read_run(run, max_per_query)
    check_answers(q, r, str(run))
    delegated = described(measures, q, relevance_threshold, gain_map(gain))
    kw = {"relevance_threshold": relevance_threshold, "gain": gain, "queries": queries}
    if view in ("bounds", "all"):
        views = _evaluate_views(q, r, measures, **kw)
        return FileEvaluation(view, relevance_threshold, gain, views.irrelevant, views, delegated, max_per_query)
    if view == "judged-only":
        return FileEvaluation(view, relevance_threshold, gain, _judged_only(q, r, measures, kw), None, delegated,
                              max_per_query)  # fmt: skip
    return FileEvaluation(view, relevance_threshold, gain, _evaluate(q, r, measures, **kw), None, delegated, max_per_query)


def _judged_only(q: dict, r: Run, measures: list, kw: dict) -> Evaluation:
    """The judged-only evaluation of the native measures, ir_measures' beside them in the only view they have."""
    native = [m for m in measures if m.supports.views]
    ev = _evaluate(q, r, native, **kw, holes="judged_only")
    if len(native) == len(measures):
        return ev
    main = _evaluate(q, r, [m for m in measures if not m.supports.views], **kw)
    return replace(ev, measures=measures, per_query={m.name: (ev.per_query.get(m.name) or main.per_query[m.name])
                                                     for m in measures})  # fmt: skip


def compare_runs(qrels: str | Path, runs: Sequence[str | Path], metrics: Sequence[str], *, relevance_threshold: int = 1,
                 gain: Any = "linear", permutations: int = 10000, seed: int = 42, alpha: float = 0.05,
                 names: Sequence[str] | None = None, queries: str = "judged",
                 max_per_query: int | None = None, baseline: str | Path | None = None,
                 test: str = "randomization") -> Experiment:  # fmt: skip
    """``stagebench eval QRELS RUN RUN ...``: several TREC run files against one qrels file, every pair of
    runs tested (:mod:`stagebench.results.experiment`); ``names``: the runs' names (default: each
    file's name without its extension, made unique). A run that answers none of the scored queries is
    refused naming its file. ``queries="run"`` averages over the queries every run holds, so that
    the pairs are tested on the same queries; ``baseline``: one of the runs (its name or its file) -
    every other run is tested against it alone, as pt.Experiment's ``baseline=``."""
    if len(runs) < 2:
        raise StagebenchError("compare_runs: give two or more run files")
    permutations, seed, alpha = test_settings(permutations, seed, alpha)  # refused as eval's flags are
    measures = _flag_measures(metrics, relevance_threshold)
    q = read_trec_qrels(qrels)
    gain = _file_gain(gain, q)
    check_thresholds(q, relevance_threshold, measures, str(qrels), "--rel")
    if names is None:
        names = [Path(r).name.removesuffix(".gz").rsplit(".", 1)[0] or Path(r).name for r in runs]
        names = [n if names.count(n) == 1 else f"{n}.{i}" for i, n in enumerate(names)]
    if len(set(names)) != len(names):
        raise StagebenchError(f"run names given twice: {names}")
    loaded = {}
    for n, path in zip(names, runs):
        loaded[n] = _read_run(path, max_per_query)
        check_answers(q, loaded[n], str(path))
    base = None
    if baseline is not None:
        by_file = {str(Path(r)): n for n, r in zip(names, runs)}
        base = str(baseline) if str(baseline) in loaded else by_file.get(str(Path(baseline)))
        if base is None:
            raise StagebenchError(f"--baseline {baseline}: not one of the runs ({', '.join(names)}, or their files)")
    if test not in ("randomization", "ttest"):
        raise StagebenchError(f"--test {test}: randomization or ttest")
    return experiment(q, loaded, measures, relevance_threshold, gain, permutations, seed, alpha, queries,
                      described(measures, q, relevance_threshold, gain_map(gain)), base, test=test)  # fmt: skip
