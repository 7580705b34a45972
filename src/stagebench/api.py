"""The Python API: what a notebook or a script needs, in a few names.

    import stagebench

    result = stagebench.run({"name": "mine", "dataset": {...}, "stages": [...]})
    result.table                   # pandas DataFrame, one row per stage
    result.per_query               # pandas DataFrame: stage, qid, one column per measure
    result.runs["bm25"]            # {qid: {docid: score}}
    result.save("elsewhere/")      # a copy of the results folder

    done = stagebench.open("results/default")                  # any results folder a run wrote
    stagebench.compare("results/default", "results/default-trained").row("ce_finetuned", "nDCG@10")

    cascade = stagebench.stage("bm25", k1=0.9) >> stagebench.stage("cross_encoder", top_n=50)
    cascade.run(dataset={"loader": "esci", "path": "data/synthetic-esci"})   # the same run as its YAML

    ds = stagebench.load_dataset({"loader": "esci", "path": "data/synthetic-esci"})
    first = stagebench.stage("bm25", k1=0.9).apply(ds)                        # one stage, through the cache
    reranked = stagebench.stage("cross_encoder", top_n=50).apply(ds, first.run)
    stagebench.api.cross_encoder("cross-encoder/ms-marco-MiniLM-L-12-v2").predict(pairs, 32)   # a model alone

    stagebench.evaluate(qrels, run, ["nDCG@10", "RR@10"]).means

A config is a YAML path, a mapping (validated exactly as a file is) or a loaded
:class:`~stagebench.config.Config`. Results are written where the CLI writes them (the
config's ``output``, or ``output=``), with the same safety rules, and the stage cache is
shared with the CLI.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stagebench.cache import Cache, cache_root
from stagebench.config import Config, load_config, parse_config, parse_stage
from stagebench.data import DatasetConfig, parse_dataset
from stagebench.data.dataset import Dataset
from stagebench.runtime.devices import Placement, place
from stagebench.models.encoders import BiEncoder, CrossEncoderModel, load_bi_encoder, load_cross_encoder
from stagebench.runtime.engine import EngineParams
from stagebench.errors import ConfigError, DataError, StagebenchError
from stagebench.data.synthetic import SyntheticSpec, generate
from stagebench.execute import StageRun, canonical, context, make_stage, run_in
from stagebench.judging import rescore_with_worksheets, judge_folder, write_worksheet
from stagebench.judging import run_incompleteness, estimate_coverage, simulate_strategies
from stagebench.metrics import Evaluation, HoleViews, Measure, check_distinct, check_thresholds, parse_measure
from stagebench.metrics import scored_query_ids
from stagebench.metrics import evaluate_views as _evaluate_views
from stagebench.metrics import evaluate as _evaluate
from stagebench.metrics.compute import gain_map
from stagebench.metrics.delegate import described, ir_measures_version
from stagebench.files import check_apart, check_destination, remove_staging, staging, swap_in
from stagebench.models.resolve import ResolvedModel, resolve_model
from stagebench.rerank.plugins import Reranker
from stagebench.pipeline import RunPlan, RunResult, plan_run, read_dataset, run_config
from stagebench.pipeline import refusals_before_loading
from stagebench import outputs
from stagebench.report import plots
from stagebench.report.write import rerender, show_query
from stagebench.reproductions import Reproduced, run_reproductions
from stagebench.results.check import Check, compare_with_expected, write_expected
from stagebench.results.compare import Comparison, compare_folders
from stagebench.results.folder import RESULTS, RunFolder
from stagebench.judgments.incompleteness import Incompleteness
from stagebench.results import interop
from stagebench.results.matrix import MatrixTable, matrix_table
from stagebench.judgments.coverage import Coverage
from stagebench.judgments.design import DESIGNS, HOLE
from stagebench.results.experiment import Experiment, experiment
from stagebench.judgments.planning import Simulation
from stagebench.results.segments import MIN_QUERIES, SegmentTable, folder_segments
from stagebench.results.scoring import stage_evaluations
from stagebench.runs import Run, checked_qrels, checked_run, read_trec_qrels, read_trec_run, run_digest
from stagebench.runs import write_trec_run as _write_trec_run
from stagebench.models.variants import for_placement, onnx_kind
from stagebench.table import StageTable, measure_key
from stagebench.fitting.train import run_training
from stagebench.fitting.tune import TuneResult
from stagebench.fitting.tune import run_tune


__all__ = [
    # the verbs stagebench itself exports, and the types they return
    "run", "check_run", "dry_run", "open", "compare", "tune", "evaluate", "stage", "load_config", "load_dataset",
    "Result", "Comparison", "Evaluation", "TuneResult", "Config", "Dataset", "StageSpec", "Cascade", "StageRun",
    "Reranker", "StagebenchError",
    # one call per CLI command on a folder, training, reproductions and upkeep (stagebench.api.<name>)
    "table", "show", "measure_of", "segments", "matrix", "check", "pin", "judge", "incompleteness", "plan_judgments",
    "simulate_plans", "simulate_estimates", "add_judgments", "compare_runs", "evaluate_views", "train_reranker", "reproduce", "cache", "generate_data",
    "config_from", "cross_encoder", "bi_encoder", "read_trec_run", "read_trec_qrels", "write_trec_run",
    "evaluate_files", "ir_measures_version",
    # what those return
    "SegmentTable", "MatrixTable", "Check", "FileEvaluation", "Worksheet", "Simulation", "Incompleteness", "HoleViews", "Reproduced",
    "RunPlan",
]  # fmt: skip

def config_from(config: Config | Mapping[str, Any] | str | Path, engine: str | None = None) -> Config:
    """A validated config from a YAML path, a mapping or a Config; ``engine`` (local | ray) puts
    every stage on that engine, as ``stagebench run --engine``."""
    if isinstance(config, Config):
        return config if engine is None else parse_config(config.raw, config.path, engine)
    if isinstance(config, Mapping):
        try:
            return parse_config(dict(config), "<dict>", engine)
        except ConfigError as exc:
            raise ConfigError(f"<dict>: {exc}") from None
    return load_config(config, engine)


@dataclass
class Result:
    """A finished run: its stage table, per-query values and runs, and its results folder. What a
    run computed is held; what :func:`open` did not need is read (verified) when first asked for."""

    output: Path
    stage_table: StageTable
    table_text: str
    judge_text: str = ""  # the judge's summary, when a judge: section ran with the run (or judge() did)
    estimate_refused: str = ""  # add_judgments of a sampling round: why its estimated view was refused
    _runs: dict[str, Run] | None = field(default=None, repr=False)
    _per_query: dict[str, dict[str, dict[str, float]]] | None = field(default=None, repr=False)

    @property
    def runs(self) -> dict[str, Run]:
        """``{stage: {qid: {docid: score}}}``, read from the folder on first use (every file verified);
        empty for a committed folder, which keeps its tables but not its runs."""
        if self._runs is None:
            rf = RunFolder.open(self.output)
            self._runs = rf.runs() if rf.holds_runs() else {}
        return self._runs

    @property
    def per_query_values(self) -> dict[str, dict[str, dict[str, float]]]:
        """stage -> measure -> qid -> value: recomputed from the verified runs on first use (exactly
        :func:`run`'s), or ``per_query.csv``'s (six decimals) for a folder without its runs."""
        if self._per_query is None:
            rf = RunFolder.open(self.output)
            if self.runs:
                evals = stage_evaluations(rf.manifest, rf.qrels(), self.runs)
                self._per_query = {n: e.per_query for n, e in evals.items()}
            else:
                self._per_query = rf.per_query()
        return self._per_query

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        """The judgments the stages were scored against (the folder's qrels, verified)."""
        return RunFolder.open(self.output).qrels()

    def _held_runs(self, what: str) -> dict[str, Run]:
        if not self.runs:
            raise StagebenchError(f"{self.output}: {what} needs the stages' runs, and this folder keeps its tables "
                                  "but not its runs (a committed folder); run the config to get them")  # fmt: skip
        return self.runs

    def to_ranx(self, ties: str = "trec_eval"):
        """``(ranx.Qrels, {stage: ranx.Run})``: the stage table's query set and every stage's run,
        for ranx's ``evaluate`` (with ``make_comparable=True``), ``compare``, ``fuse`` and tests.
        ``ties="trec_eval"`` (default) moves tied scores apart by float steps so that ranx ranks
        each query as the table did; ``"keep"`` gives the stored scores (:mod:`stagebench.results.interop`)."""
        return interop.to_ranx(self.qrels, self._held_runs("to_ranx()"), ties)  # type: ignore[arg-type]

    def ir_measures_qrels(self):
        """The judgments as ``ir_measures.Qrel`` records (for ``ir_measures.calc_aggregate``)."""
        return interop.ir_measures_qrels(self.qrels)

    def ir_measures_run(self, stage: str):
        """One stage's run as ``ir_measures.ScoredDoc`` records."""
        runs = self._held_runs("ir_measures_run()")
        if stage not in runs:
            raise StagebenchError(f"{self.output}: no stage {stage!r} (stages: {', '.join(runs)})")
        return interop.ir_measures_run(runs[stage])

    @property
    def table(self):
        """The stage table as a pandas DataFrame: one row per stage, the measures as columns
        (plus queries, pool recall, the oracle in the ceiling measure and headroom for rerankers)."""
        import pandas as pd

        records = []
        oracle = f"oracle_{measure_key(self.stage_table.ceiling_measure)}"
        for r in self.stage_table.rows:
            c = r.ceiling
            records.append({"id": r.id, "stage": r.stage, "type": r.type, "inputs": ",".join(r.inputs), **r.metrics,
                            "queries": r.queries, "pool_depth": c and c.depth, "pool_recall": c and c.pool_recall,
                            oracle: c and c.oracle, "headroom_captured": c and c.headroom_captured})  # fmt: skip
        return pd.DataFrame.from_records(records).set_index("stage")

    @property
    def measures(self) -> list[str]:
        return list(self.stage_table.metrics)

    @property
    def per_query(self):
        """Per-query values as a long pandas DataFrame: stage, qid, one column per measure."""
        import pandas as pd

        records = [{"stage": s, "qid": q, **{m: values[m][q] for m in values}}
                   for s, values in self.per_query_values.items() for q in next(iter(values.values()), {})]  # fmt: skip
        return pd.DataFrame.from_records(records)

    def save(self, folder: str | Path) -> Path:
        """Copy the results folder to ``folder``, under the rule every results folder follows:
        ``folder`` is absent, empty, or a results folder stagebench wrote (docs/config.md). The
        copy is built beside it and swapped in complete, so a copy that fails half-way leaves
        the old folder as it was. Saving a result into its own folder changes nothing."""
        dest = Path(folder)
        if dest.exists() and not dest.is_symlink() and dest.resolve() == self.output.resolve():
            return dest
        RunFolder.open(self.output)  # the source is still a results folder
        check_apart(self.output, "results folder", dest, "copy")
        check_destination(dest, RESULTS)
        tmp = staging(dest)
        try:
            shutil.copytree(self.output, tmp, dirs_exist_ok=True)
            check_destination(dest, RESULTS)  # it may have changed while the copy ran
            swap_in(tmp, dest, kept=RESULTS.kept)
        except BaseException:
            remove_staging(tmp)
            raise
        return dest

    def rerender(self) -> Result:
        """Score and render the folder again from its verified runs (``stagebench table``)."""
        return replace(table(self.output), _runs=self._runs)

    def incompleteness(self, rates: Sequence[float] = (0.9, 0.7, 0.5, 0.3, 0.1), seeds: int = 3,
                       measure: str | None = None, permutations: int = 1000) -> Incompleteness:  # fmt: skip
        """Each view's stage order with judgments taken away, and against the truth when the rules
        judged the folder (``stagebench incompleteness``; docs/metrics.md#a-judging-round)."""
        return incompleteness(self.output, rates, seeds, measure, permutations)

    def plan_judgments(self, budget: int, output: str | Path, *, strategy: str = "plan", depth: int = 10,
                       measure: str | None = None, seed: int = 0) -> Path:  # fmt: skip
        """The worksheet of the ``budget`` unjudged pairs that settle the most open stage orders (a
        CSV at ``output``, the same rows as JSONL beside it); its path (``stagebench plan-judgments``)."""
        return plan_judgments(self.output, budget, output, strategy=strategy, depth=depth, measure=measure, seed=seed).csv

    def add_judgments(self, worksheets: Sequence[str | Path], output: str | Path, prefer: str | None = None) -> Result:
        """A new results folder scored with graded worksheets added to this one's qrels, with their
        provenance; this folder is left as it is (``stagebench add-judgments``)."""
        return add_judgments(self.output, worksheets, output, prefer)

    def __repr__(self) -> str:
        return f"Result({self.output}, stages={[r.stage for r in self.stage_table.rows]})"


def run(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
        cache_dir: str | None = None, recompute: bool = False, engine: str | None = None) -> Result:  # fmt: skip
    """Run a config (path, mapping or Config) and return its :class:`Result`; ``engine``: local or
    ray for every stage (default: what the config says)."""
    res: RunResult = run_config(config_from(config, engine), output, cache_dir=cache_dir, recompute=recompute)
    return Result(res.output, res.table, res.table_text, res.judge_text, _runs=res.runs, _per_query=res.per_query)


def dry_run(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
            cache_dir: str | None = None, recompute: bool = False) -> RunPlan:  # fmt: skip
    """``stagebench run --dry-run``: each stage of the config cached or to compute, and its work (pairs for
    a reranker), with nothing computed or written (:func:`stagebench.pipeline.plan_run`)."""
    return plan_run(config_from(config), output, cache_dir, recompute)


def check_run(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
              cache_dir: str | None = None) -> Path:  # fmt: skip
    """What :func:`run` would refuse before it loads or connects to anything (a results folder
    that is not stagebench's, a cache inside it, destinations that cannot be written, a trained
    model that is missing), raised as its one error; else the results folder it would write."""
    return refusals_before_loading(config_from(config), output, cache_dir)[0]


def tune(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
         cache_dir: str | None = None) -> TuneResult:  # fmt: skip
    """``stagebench tune``: the config's ``tune:`` section run (docs/baselines.md); the result's
    ``record`` holds every trial, the choices, the tuned params and default against tuned on the
    test queries, ``output`` the tuning folder (its ``tuned.yaml`` runs with :func:`run`)."""
    return run_tune(config_from(config), output, cache_dir)


def open(folder: str | Path) -> Result:  # noqa: A001 - stagebench.open, as a notebook reads it
    """A results folder a run wrote (a committed one included) as a :class:`Result`, every file
    verified against the manifest's digests first. It reads the stage table (``stage_table.json``)
    and nothing more: the runs and the per-query values are read and computed when first asked for
    (:attr:`Result.runs`, :attr:`Result.per_query`), each time from verified files."""
    rf = RunFolder.open(folder)
    rf.holds_runs()  # an incomplete folder (some runs missing) is refused now, not when its runs are asked for
    return Result(rf.path, rf.table(), rf.verified("stage_table.txt").read_text(encoding="utf-8"))


def compare(a: Result | str | Path, b: Result | str | Path, *, permutations: int = 10000, seed: int = 42,
            alpha: float = 0.05, pairs: Mapping[str, str] | None = None, judgments: str = "same") -> Comparison:  # fmt: skip
    """Two results folders (or Results) stage by matching stage, as ``stagebench compare`` computes
    it: per stage and measure the means over the common queries, B - A, the paired randomization
    and t-tests Holm-corrected across the matching stages, and win/tie/loss counts. Folders scored
    differently (gain, threshold, corpus) are refused, and so are different judgments unless
    ``judgments="each"`` (a judging round's before and after); ``pairs``: A's stage -> B's stage
    compared besides those of the same name.
    :func:`stagebench.report.tables.comparison_text` renders it as the CLI prints it."""
    pa = a.output if isinstance(a, Result) else a
    pb = b.output if isinstance(b, Result) else b
    return compare_folders(pa, pb, permutations=permutations, seed=seed, alpha=alpha, pairs=dict(pairs or {}),
                           judgments=judgments)  # fmt: skip


# -- the commands on a finished results folder (each reads the folder verified, as the CLI's) --------------


def table(folder: str | Path) -> Result:
    """``stagebench table``: score and render a folder again from its verified runs, its new files'
    digests recorded; the table is :attr:`Result.table_text`."""
    rendered = rerender(folder)
    return Result(Path(folder), rendered.table, rendered.text, _per_query=rendered.per_query)


def show(folder: str | Path, query_id: str) -> str:
    """``stagebench show``: one query's view in text - each stage's top 10 with grades and moves."""
    return show_query(folder, query_id)


def measure_of(folder: str | Path, measure: str | None = None) -> str:
    """The name of ``measure`` as the folder scored it (its first measure when None); a measure the
    run did not score is refused."""
    rf = RunFolder.open(folder)
    name = parse_measure(measure).name if measure else rf.metrics[0]
    if name not in rf.metrics:
        raise StagebenchError(f"{folder} was scored with {', '.join(rf.metrics)}")
    return name


def segments(folder: str | Path, by: Sequence[str] | None = None, min_queries: int = MIN_QUERIES) -> list[SegmentTable]:
    """``stagebench segments``: the folder's stages within query segments, each stage's change tested per
    segment. ``by``: built-in segmenters or files (default: the run's own ``evaluation.segments``, else
    length, negation and - where the folder holds its qrels - judged and relevant)."""
    rf = RunFolder.open(folder)
    bys = list(by or rf.manifest.evaluation.segments) or ["length", "negation", *(
        ["judged", "relevant"] if rf.holds_runs() else [])]
    return folder_segments(rf, bys, min_queries)


def matrix(folder: str | Path) -> MatrixTable:
    """``stagebench matrix``: the reranker-by-pool matrix of a run whose config had a ``matrix:`` section."""
    rf = RunFolder.open(folder)
    record = rf.manifest.evaluation.matrix
    if record is None:
        raise StagebenchError(f"{folder}: the run had no matrix (its config has no matrix: section; see "
                              "docs/report.md#the-reranker-by-pool-matrix)")  # fmt: skip
    return matrix_table(record, rf.table(), str(folder))


def check(folder: str | Path, expected: str | Path, *, stored_table: bool = False) -> Check:
    """``stagebench check``: the folder's values against an ``expected.yaml`` (``stored_table``: the
    stored stage table, not one rescored from the runs); :attr:`Check.failed` when any is off."""
    rows, source = compare_with_expected(folder, expected, stored_table=stored_table)
    return Check(rows, source)


def pin(folder: str | Path, expected: str | Path, *, tolerance: float | None = None, stored_table: bool = False) -> Path:
    """``stagebench check --update``: the folder's values written as the expected values (the file's
    tolerances kept unless ``tolerance`` is given)."""
    outputs.check_file(expected, outputs.EXPECTED)
    write_expected(folder, expected, tolerance=tolerance, stored_table=stored_table)
    return Path(expected)


def judge(folder: str | Path, config: str | Path | None = None, cache_dir: str | None = None) -> Result:
    """``stagebench judge``: the judge of ``config``'s ``judge:`` section (else of the folder's own
    config) grades the holes of a finished folder; its stages are not run again."""
    rendered = judge_folder(folder, None if config is None else str(config), cache_dir)
    return Result(Path(folder), rendered.table, rendered.text, rendered.judge_text, _per_query=rendered.per_query)


def incompleteness(folder: str | Path, rates: Sequence[float] = (0.9, 0.7, 0.5, 0.3, 0.1), seeds: int = 3,
                   measure: str | None = None, permutations: int = 1000, report: bool = False,
                   json_path: str | Path | None = None, plot_path: str | Path | None = None) -> Incompleteness:  # fmt: skip
    """``stagebench incompleteness``: each view's stage order with judgments taken away (``report``:
    kept in the folder and shown in its report.html; ``json_path``, ``plot_path``: also written there,
    under the rule of :mod:`stagebench.outputs`, checked before any work)."""
    outputs.check_file(json_path, outputs.INCOMPLETENESS_JSON.out)
    outputs.check_file(plot_path, outputs.INCOMPLETENESS_PLOT.out)
    inc = run_incompleteness(folder, list(rates), seeds, measure, permutations, report)
    if json_path is not None:
        outputs.INCOMPLETENESS_JSON.write(json_path, inc.as_json())
    if plot_path is not None:
        outputs.INCOMPLETENESS_PLOT.write(plot_path, plots.incompleteness_chart(inc))
    return inc


@dataclass(frozen=True)
class Worksheet:
    """A judging worksheet :func:`plan_judgments` wrote: the CSV, the same rows as JSONL, how many, and for a
    sample what its budget buys each aimed pair if the grade model is right."""

    csv: Path
    jsonl: Path
    pairs: int
    power: list[str] = field(default_factory=list)


def plan_judgments(folder: str | Path, budget: int, output: str | Path, *, strategy: str = "plan", depth: int = 10,
                   measure: str | None = None, seed: int = 0, predictor: str | None = None,
                   show_ranks: bool = False, cache_dir: str | None = None,
                   aim: Sequence[str] | None = None, design: str = HOLE) -> Worksheet:  # fmt: skip
    """``stagebench plan-judgments``: the worksheet of ``budget`` unjudged pairs picked by ``strategy``
    (``sample``: a random sample for the estimated view, its record beside the worksheet, aimed at the
    stage pairs ``aim`` names (``["ce=plugin"]``) or else at those its grade model predicts the budget
    can settle; a cross-encoder grade model scores the pairs outside its pool in the cache ``cache_dir``;
    ``design``: the sample's design, :data:`stagebench.judgments.design.DESIGNS`)."""
    return Worksheet(*write_worksheet(folder, budget, output, strategy, depth, measure, seed, predictor, show_ranks,
                                      cache_dir, aim, design))


def simulate_estimates(folder: str | Path, budgets: Sequence[int], *, rounds: int = 200, measure: str | None = None,
                       predictor: str | None = None, hide: float | None = None, seed: int = 0,
                       json_path: str | Path | None = None, cache_dir: str | None = None,
                       designs: Sequence[str] = DESIGNS) -> Coverage:  # fmt: skip
    """``plan-judgments --simulate --strategy sample``: the estimated view's coverage, settled pairs and
    widths over ``rounds`` simulated rounds a budget, for each of ``designs`` side by side
    (:func:`stagebench.judging.estimate_coverage`)."""
    outputs.check_file(json_path, outputs.SIMULATION_JSON.out)
    if hide is not None and not 0 < hide < 1:
        raise StagebenchError(f"--hide {hide}: a share of the judged pairs, between 0 and 1")
    cov = estimate_coverage(folder, list(budgets), rounds, measure, predictor, hide, seed, cache_dir, designs)
    if json_path is not None:
        outputs.SIMULATION_JSON.write(json_path, cov.as_json())
    return cov


def simulate_plans(folder: str | Path, budgets: Sequence[int], *, depth: int = 10, seeds: int = 3,
                   measure: str | None = None, json_path: str | Path | None = None) -> Simulation:  # fmt: skip
    """``plan-judgments --simulate``: every strategy at every budget, answered by the folder's judge
    (``json_path``: also written there, under the rule of :mod:`stagebench.outputs`)."""
    outputs.check_file(json_path, outputs.SIMULATION_JSON.out)
    sim = simulate_strategies(folder, list(budgets), depth, seeds, measure)
    if json_path is not None:
        outputs.SIMULATION_JSON.write(json_path, sim.as_json())
    return sim


def add_judgments(folder: str | Path, worksheets: Sequence[str | Path], output: str | Path,
                  prefer: str | None = None, cache_dir: str | None = None) -> Result:  # fmt: skip
    """``stagebench add-judgments``: a new results folder scored with graded worksheets added to the
    folder's qrels; the folder itself is left as it is. A sampling round's estimated view that was
    refused (the folder is written all the same) says why in :attr:`Result.estimate_refused`."""
    rendered = rescore_with_worksheets(folder, [str(w) for w in worksheets], output, prefer, cache_dir)
    return replace(open(output), estimate_refused=rendered.estimate_refused)


@dataclass(frozen=True)
class StageSpec:
    """A stage written in Python: its type, params and (optionally) name, plug-in target and inputs.
    ``a >> b`` composes a :class:`Cascade` in which ``b`` reads ``a``'s run; the config it stands for
    is validated exactly as a YAML file's when it runs."""

    type: str
    params: dict
    name: str | None = None
    target: str | None = None
    inputs: tuple[str, ...] | None = None

    def __rshift__(self, other: StageSpec | Cascade) -> Cascade:
        return Cascade([self]) >> other

    def apply(self, dataset: Dataset | Mapping[str, Any], *inputs: Mapping[str, Mapping[str, float]],
              cache: bool | str | Path = True, recompute: bool = False) -> StageRun:  # fmt: skip
        """Run this one stage over ``dataset`` (a :class:`Dataset`, or a config's ``dataset:``
        mapping), reading ``inputs`` (runs, as many as the stage type takes; a reranker takes one).
        Its params are validated as a config file's; it runs through the stage cache the CLI uses
        (``cache``: True for the default root, a folder, or False for none; ``recompute``: ignore
        what is cached), under the same key, so a stage a YAML run computed is read back here and
        the other way round. Returns a :class:`~stagebench.execute.StageRun`: ``.run``,
        ``.depth_runs``, ``.stats`` and ``.record`` (cached or computed, seconds, key)."""
        ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
        names = list(self.inputs) if self.inputs is not None and len(self.inputs) == len(inputs) else [
            f"input{i + 1}" for i in range(len(inputs))]  # fmt: skip
        where = "stagebench.stage"
        sc = parse_stage(self.as_config(self.name or self.type, names), where, set(names), EngineParams())
        runs = []
        for name, r in zip(names, inputs):
            run = canonical(checked_run(r, f"{where}: input {name}"))
            unknown = sorted(set(run) - set(ds.queries))
            if unknown:
                raise DataError(f"{where} ({sc.name}): input {name}: query {unknown[0]!r} is not a query of dataset {ds.name} "
                                f"({len(unknown)} unknown)")  # fmt: skip
            runs.append(run)
        stage = make_stage(sc, f"{where}.target")
        stage.preflight()
        store = None if cache is False else Cache(cache_root(None if cache is True else str(cache)), read=not recompute)
        return run_in(sc, stage, context(sc, ds, store), runs, [run_digest(r) for r in runs])

    def as_config(self, name: str, inputs: list[str]) -> dict:
        out: dict[str, Any] = {"name": name, "type": self.type}
        if self.target is not None:
            out["target"] = self.target
        if inputs:
            out["inputs"] = list(inputs)
        if self.params:
            out["params"] = dict(self.params)
        return out


def stage(type: str, *, name: str | None = None, target: str | None = None,  # noqa: A002 - the config's key
          inputs: Iterable[str | StageSpec] | None = None, **params: Any) -> StageSpec:
    """A stage for a :class:`Cascade`: ``stage("bm25", k1=0.9)``, ``stage("cross_encoder", top_n=50)``,
    ``stage("plugin", target="pkg.mod:Class", top_n=20)``; ``inputs`` (names or stages) for a fusion,
    otherwise each stage reads the one before it."""
    ins = None if inputs is None else tuple(i.name or i.type if isinstance(i, StageSpec) else i for i in inputs)
    return StageSpec(type, params, name, target, ins)


@dataclass(frozen=True)
class Cascade:
    """Stages in order, each reading the stage before it unless it names its inputs."""

    stages: list[StageSpec]

    def __rshift__(self, other: StageSpec | Cascade) -> Cascade:
        return Cascade([*self.stages, *(other.stages if isinstance(other, Cascade) else [other])])

    def config(self, dataset: Mapping[str, Any], *, name: str = "cascade", metrics: list[str] | None = None,
               evaluation: Mapping[str, Any] | None = None, output: str | Path | None = None) -> dict:  # fmt: skip
        """The config this cascade stands for (what its YAML file would hold)."""
        stages, names = [], []
        for i, s in enumerate(self.stages):
            base = s.name or s.type
            sname = base if base not in names else f"{base}_{sum(n.startswith(base) for n in names) + 1}"
            inputs = list(s.inputs) if s.inputs is not None else names[-1:] if i else []
            stages.append(s.as_config(sname, inputs))
            names.append(sname)
        ev = dict(evaluation or {})
        if metrics is not None:
            ev["metrics"] = list(metrics)
        out: dict[str, Any] = {"name": name, "dataset": dict(dataset), "stages": stages}
        if output is not None:
            out["output"] = str(output)
        if ev:
            out["evaluation"] = ev
        return out

    def run(self, dataset: Mapping[str, Any], *, name: str = "cascade", metrics: list[str] | None = None,
            evaluation: Mapping[str, Any] | None = None, output: str | Path | None = None, cache_dir: str | None = None,
            recompute: bool = False) -> Result:  # fmt: skip
        """Run it as :func:`run` runs its config: the same validation, cache and results folder."""
        return run(self.config(dataset, name=name, metrics=metrics, evaluation=evaluation, output=output),
                   cache_dir=cache_dir, recompute=recompute)  # fmt: skip


def load_dataset(dataset: Mapping[str, Any] | DatasetConfig) -> Dataset:
    """The dataset a config's ``dataset:`` section names (``{"loader": "esci", "path": ...}``),
    validated as a config file's and loaded as ``stagebench run`` loads it."""
    if isinstance(dataset, DatasetConfig):
        return read_dataset(dataset)
    if not isinstance(dataset, Mapping):
        raise ConfigError(f"dataset: expected a mapping (loader: ..., path: ...), got {type(dataset).__name__}")
    return read_dataset(parse_dataset(dict(dataset)))


def _placed(model: str, source: str, device: str, precision: str, what: str) -> tuple[ResolvedModel, Placement]:
    """A model resolved and placed as a model stage resolves and places its own (a derived
    variant, e.g. ``int8-token``, is kept in the default cache root: :mod:`stagebench.models.variants`)."""
    resolved = resolve_model(model, source)
    kind = onnx_kind(resolved)
    placement = place(device, precision, kind, f"{what}({model!r})", what)
    return for_placement(resolved, placement, kind, None, what, what), placement


def cross_encoder(model: str = "cross-encoder/ms-marco-MiniLM-L-12-v2", *, source: str = "auto", device: str = "auto",
                  precision: str = "auto", max_length: int = 512) -> CrossEncoderModel:  # fmt: skip
    """A cross-encoder as the ``cross_encoder`` stage loads it (resolved name, device and precision
    chosen the same way): ``.predict([(query, text), ...], batch_size)`` -> one logit per pair."""
    return load_cross_encoder(*_placed(model, source, device, precision, "cross_encoder"), max_length)


def bi_encoder(model: str = "sentence-transformers/all-MiniLM-L6-v2", *, source: str = "auto", device: str = "auto",
               precision: str = "auto", max_length: int | None = None) -> BiEncoder:  # fmt: skip
    """A bi-encoder as the ``dense`` stage loads it: ``.encode(texts, batch_size)`` -> unit-length
    float32 vectors, one row per text."""
    return load_bi_encoder(*_placed(model, source, device, precision, "bi_encoder"), max_length)


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
                 max_per_query: int | None = None, baseline: str | Path | None = None) -> Experiment:  # fmt: skip
    """``stagebench eval QRELS RUN RUN ...``: several TREC run files against one qrels file, every pair of
    runs tested (:mod:`stagebench.results.experiment`); ``names``: the runs' names (default: each
    file's name without its extension, made unique). A run that answers none of the scored queries is
    refused naming its file. ``queries="run"`` averages over the queries every run holds, so that
    the pairs are tested on the same queries; ``baseline``: one of the runs (its name or its file) -
    every other run is tested against it alone, as pt.Experiment's ``baseline=``."""
    if len(runs) < 2:
        raise StagebenchError("compare_runs: give two or more run files")
    measures = _flag_measures(metrics, relevance_threshold)
    q = read_trec_qrels(qrels)
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
    return experiment(q, loaded, measures, relevance_threshold, gain, permutations, seed, alpha, queries,
                      described(measures, q, relevance_threshold, gain_map(gain)), base)  # fmt: skip


# -- training, reproductions and upkeep ------------------------------------------------------------------


def train_reranker(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
                   cache_dir: str | None = None) -> dict:  # fmt: skip
    """``stagebench train-reranker``: the config's ``training:`` section run (docs/training.md); the
    training report (data, dev nDCG before and after, steps, the model folder as ``output``)."""
    c = config_from(config)
    return run_training(c, None if output is None else str(output), Cache(cache_root(cache_dir, c.cache_dir)))


def reproduce(root: str | Path = ".", names: Sequence[str] | None = None, output_root: str | Path = "build/reproduce",
              matrix_path: str | Path | None = None, cache_dir: str | None = None) -> list[Reproduced]:  # fmt: skip
    """``stagebench reproduce``: the published tables under ``root/reproductions`` run when their
    inputs are here and checked; ``matrix_path``: where the Markdown matrix is written."""
    return run_reproductions(Path(root), list(names) if names else None, Path(output_root),
                      None if matrix_path is None else Path(matrix_path), cache_dir)  # fmt: skip


def cache(cache_dir: str | None = None, config: Config | None = None) -> Cache:
    """The stage cache a command uses: ``cache_dir`` > ``$STAGEBENCH_CACHE`` > ``config``'s
    ``cache_dir`` > the default (``stagebench cache``: ``.list()``, ``.verify(kind, key)``, ``.prune(...)``)."""
    return Cache(cache_root(cache_dir, None if config is None else config.cache_dir))


def generate_data(output: str | Path, *, seed: int = 13, products: int = 20000, test_queries: int = 500,
                  train_queries: int = 2000) -> dict:  # fmt: skip
    """``stagebench generate-data``: the synthetic ESCI-style dataset written into ``output``; its
    statistics. A value that cannot make a dataset is refused naming its keyword."""
    spec = SyntheticSpec(seed=seed, n_products=products, n_test_queries=test_queries, n_train_queries=train_queries)
    keywords = {"seed": "seed", "n_products": "products", "n_test_queries": "test_queries",
                "n_train_queries": "train_queries"}  # fmt: skip
    for name, why in spec.problems():
        raise ConfigError(f"{keywords[name]} {getattr(spec, name)}: {why}")
    return generate(output, spec)
