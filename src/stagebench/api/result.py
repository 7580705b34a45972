"""A finished run as a :class:`Result`, and the verbs that give one: ``run`` a config, ``open`` a results
folder, ``table`` (render it again), ``judge`` (grade its holes), ``add_judgments`` (a new folder with
graded worksheets added), ``compare`` two folders; ``dry_run``, ``check_run``, ``tune`` and
``train_reranker`` on a config."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stagebench.api.judging import incompleteness, judge_folder, plan_judgments, rescore_with_worksheets
from stagebench.cache import Cache, cache_root
from stagebench.config import Config, load_config, parse_config, test_settings
from stagebench.errors import ConfigError, StagebenchError
from stagebench.files import check_apart, check_destination, remove_staging, staging, swap_in
from stagebench.fitting.train import run_training
from stagebench.fitting.tune import TuneResult
from stagebench.fitting.tune import run_tune
from stagebench.judgments.incompleteness import Incompleteness
from stagebench.pipeline import RunPlan, RunResult, plan_run, run_config
from stagebench.pipeline import refusals_before_loading
from stagebench.report.write import rerender
from stagebench.results import interop
from stagebench.results.compare import Comparison, compare_folders
from stagebench.results.folder import RESULTS, RunFolder
from stagebench.results.scoring import stage_evaluations
from stagebench.runs import Run
from stagebench.table import StageTable, measure_key


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
    permutations, seed, alpha = test_settings(permutations, seed, alpha)  # refused as compare's flags are
    pa = a.output if isinstance(a, Result) else a
    pb = b.output if isinstance(b, Result) else b
    return compare_folders(pa, pb, permutations=permutations, seed=seed, alpha=alpha, pairs=dict(pairs or {}),
                           judgments=judgments)  # fmt: skip


def table(folder: str | Path) -> Result:
    """``stagebench table``: score and render a folder again from its verified runs, its new files'
    digests recorded; the table is :attr:`Result.table_text`."""
    rendered = rerender(folder)
    return Result(Path(folder), rendered.table, rendered.text, _per_query=rendered.per_query)


def judge(folder: str | Path, config: str | Path | None = None, cache_dir: str | None = None) -> Result:
    """``stagebench judge``: the judge of ``config``'s ``judge:`` section (else of the folder's own
    config) grades the holes of a finished folder; its stages are not run again."""
    rendered = judge_folder(folder, None if config is None else str(config), cache_dir)
    return Result(Path(folder), rendered.table, rendered.text, rendered.judge_text, _per_query=rendered.per_query)


def add_judgments(folder: str | Path, worksheets: Sequence[str | Path], output: str | Path,
                  prefer: str | None = None, cache_dir: str | None = None) -> Result:  # fmt: skip
    """``stagebench add-judgments``: a new results folder scored with graded worksheets added to the
    folder's qrels; the folder itself is left as it is. A sampling round's estimated view that was
    refused (the folder is written all the same) says why in :attr:`Result.estimate_refused`."""
    rendered = rescore_with_worksheets(folder, [str(w) for w in worksheets], output, prefer, cache_dir)
    return replace(open(output), estimate_refused=rendered.estimate_refused)


def train_reranker(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
                   cache_dir: str | None = None) -> dict:  # fmt: skip
    """``stagebench train-reranker``: the config's ``training:`` section run (docs/training.md); the
    training report (data, dev nDCG before and after, steps, the model folder as ``output``)."""
    c = config_from(config)
    return run_training(c, None if output is None else str(output), Cache(cache_root(cache_dir, c.cache_dir)))
