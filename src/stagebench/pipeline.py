"""Run a config: load the dataset, run the stages in order, score them, write results.

Every stage's run is looked up in the content-addressed cache (:mod:`stagebench.cache`)
under a key of everything it depends on (:func:`stagebench.execute.stage_key`); a hit is
read back and checksum-verified, a miss is computed and stored at once. A run killed in stage N thus
resumes at stage N, with stages 1..N-1 from the cache.

Before anything is computed, the output folder must be absent, empty, or a results folder
stagebench wrote (every file in it, at every depth, hidden ones included, listed in its
manifest with the digest it has now: :data:`stagebench.results.folder.RESULTS`), not a symbolic
link, the cache and the output must not contain each other, and both (the output's parent
too) must be writable: a run never deletes what it did not write.
Results are written into a hidden sibling folder (``.<name>.partial-<pid>``, marked as ours)
that replaces the output folder only once everything (runs, tables, manifest) is written, so
a failed run never leaves a results folder that looks complete; staging folders of killed
runs are removed by the next run.
"""

from __future__ import annotations

import json
import logging
import platform
import resource
import sys
import time
from dataclasses import asdict, dataclass, is_dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from stagebench.cache import Cache, cache_root, make_key
from stagebench.config import Config, check_trained_models
from stagebench.data import DatasetConfig
from stagebench.data import LOADERS, Dataset
from stagebench.data.esci import SOURCES_FILE
from stagebench.runtime.cluster.auth import check_token_given
from stagebench.runtime.cluster.session import answers as cluster_answers, ray_session
from stagebench.errors import ConfigError, DataError, StagebenchError
from stagebench.execute import (context, entry_digest, latency_sample, make_stage, measure_latency, package_versions, run_in, scoring_key,
                                stage_key)
from stagebench.judge.ask import Judge
from stagebench.judge.rules import RulesJudge
from stagebench.judge.grading import judge_runs, make_judge
from stagebench.forecast import Forecast, forecast, total as forecast_total
from stagebench.files import atomic_write, check_apart, check_destination, check_writable, remove_staging, staging, swap_in
from stagebench.metrics import SCORED_MIN_GRADE
from stagebench.metrics.compute import gain_map
from stagebench.record import Manifest, StageRecord
from stagebench.report.write import render
from stagebench.results import baselines
from stagebench.results.folder import RESULTS, write_manifest
from stagebench.judgments.pool import JUDGMENTS
from stagebench.results.queries import TEXTS_FILE, texts_for
from stagebench.results.segments import FROM_DATASET, STORED_FILE, read_segment_file, stored_here, stored_tsv
from stagebench.rerank.merge import split_head
from stagebench.runs import Run, read_trec_run, run_digest, write_trec_qrels, write_trec_run
from stagebench.stages import Stage
from stagebench.runtime.system import code_commit, machine_info
from stagebench.table import StageTable
from stagebench.version import __version__

log = logging.getLogger("stagebench")



@dataclass
class RunResult:
    output: Path
    table: StageTable
    runs: dict[str, Run]
    dataset: Dataset
    table_text: str
    per_query: dict[str, dict[str, dict[str, float]]]  # stage -> measure -> qid -> value
    judge_text: str = ""  # the LLM judge's summary (empty: no judge: section)


def read_dataset(dc: DatasetConfig) -> Dataset:
    """The dataset a config's ``dataset:`` section names, its warnings and size logged."""
    loader = LOADERS[dc.loader]
    t0 = time.perf_counter()
    ds = loader.load(dc.options)
    for w in ds.warnings:
        log.warning(w)
    log.info(
        "dataset %s: %d documents (corpus scope: %s%s), %d queries, %d judgments [%.1fs]",
        ds.name, len(ds.corpus), ds.corpus_scope,
        " - only judged documents are indexed, which inflates recall" if ds.corpus_scope == "judged" else
        " - the whole catalog is indexed",
        len(ds.queries), sum(len(v) for v in ds.qrels.values()), time.perf_counter() - t0,
    )  # fmt: skip
    return ds


def check_scorable(config: Config, ds: Dataset) -> None:
    """Before any stage runs: the dataset has queries to score, and the evaluation's
    relevance threshold (and every measure's ``rel``) names a grade the qrels hold."""
    if not ds.queries:
        raise DataError(f"{ds.source or ds.name}: no query left to score (after the loader's filters)")
    if not ds.corpus:
        raise DataError(f"{ds.source or ds.name}: the corpus has no documents")
    if not any(t.strip() for t in ds.doc_texts):  # stops at the first document with text
        raise DataError(f"{ds.source or ds.name}: every document's text is empty under text_template "
                        f"{ds.text_template!r}: no stage could retrieve anything, and every measure would be 0")  # fmt: skip
    grades = [g for docs in ds.qrels.values() for g in docs.values()]
    if not any(g >= SCORED_MIN_GRADE for g in grades):
        raise DataError(f"{ds.source or ds.name}: no judgment has a positive grade (grades: "
                        f"{sorted(set(grades))}); nothing can be scored")  # fmt: skip
    top = max(grades)
    if config.evaluation.relevance_threshold > top:
        raise ConfigError(f"{config.path}: evaluation.relevance_threshold: {config.evaluation.relevance_threshold} is "
                          f"above every grade in the qrels (highest: {top}); every binary measure would be 0")  # fmt: skip
    g = gain_map(config.evaluation.gain)
    missing = sorted({x for x in grades if g.table and x not in dict(g.table)})
    if missing:
        raise ConfigError(f"{config.path}: evaluation.gain: the {g.describe()} has no gain for grade "
                          f"{', '.join(map(str, missing))}, which the qrels hold (grades: {sorted(set(grades))})")  # fmt: skip
    held = sorted({x for x in grades if x >= SCORED_MIN_GRADE})
    if not any(g(x) > 0 for x in held):
        raise ConfigError(f"{config.path}: evaluation.gain: the {g.describe()} gives no positive gain to any grade the "
                          f"qrels hold ({', '.join(map(str, held))}); every nDCG would be 0")  # fmt: skip
    for j, by in enumerate(config.evaluation.segments):
        if by in FROM_DATASET and by not in ds.query_groups:
            raise ConfigError(f"{config.path}: evaluation.segments[{j}]: {by}: the dataset gives no query {by} (the esci "
                              "loaders give each query's locale; the query source comes from the release's "
                              f"{SOURCES_FILE} beside the examples file)")  # fmt: skip
    for j, m in enumerate(config.measures):
        if m.rel is not None and m.rel > top:
            raise ConfigError(f"{config.path}: evaluation.metrics[{j}]: {m.name}: rel={m.rel} is above every grade "
                              f"in the qrels (highest: {top})")  # fmt: skip


def check_destinations(out: Path, cache: Cache) -> None:
    """Refuse, before anything is computed, an output that is not ours to replace, an output
    and a cache inside each other, and destinations that cannot be written."""
    check_destination(out, RESULTS)
    check_apart(out, "results folder", cache.root, "cache")
    check_writable(cache.root, "cache")


def refusals_before_loading(config: Config, output: str | Path | None = None, cache_dir: str | None = None,
                             recompute: bool = False) -> tuple[Path, Cache]:  # fmt: skip
    """What a run refuses before it loads or connects to anything (its results folder and cache,
    the trained models it names); the results folder and the cache it would use."""
    out = Path(output or config.output)
    cache = Cache(cache_root(cache_dir, config.cache_dir), read=not recompute)
    check_destinations(out, cache)
    check_trained_models(config)
    if config.ray_engine() is not None:  # before a watched child starts, and before anything connects
        check_token_given(f"{config.path}: engine")
    return out, cache


@dataclass(frozen=True)
class Planned:
    """One stage of a dry run: cached (its run read back from the cache), or to compute, the work, and
    its expected seconds on this machine (:mod:`stagebench.forecast`; None where nothing is computed)."""

    stage: str
    type: str
    cached: bool
    work: str
    forecast: Forecast | None = None


@dataclass
class RunPlan:
    """What ``stagebench run --dry-run`` prints: every stage's status, work and expected seconds; nothing
    of the run is computed or written (a probe's rates are kept in the cache)."""

    config: str
    output: Path
    cache: Path
    stages: list[Planned]
    engine: str = ""  # a Ray engine: whether its cluster answers (asked, nothing started on it)
    engine_error: str = ""  # the error a run would end with at once: its cluster does not answer
    machine: str = ""  # the CPU the forecast was measured on

    def expected(self) -> tuple[float, list[str]]:
        """The expected seconds of the stages to compute (latency passes included), and the stages to
        compute that have no forecast."""
        todo = [p.forecast for p in self.stages if p.forecast is not None]
        seconds, missing = forecast_total(todo)
        names = [p.stage for p in self.stages if p.forecast is not None]
        return seconds, [names[i] for i in missing]

    def text(self) -> str:
        lines = [f"dry run of {self.config}: results to {self.output}, cache {self.cache}; nothing of the run is "
                 "computed or written (a probe's rates are kept in the cache)",
                 f"{'stage':<20}  {'type':<16}  {'status':<8}  {'work':<44}  expected on this machine"]  # fmt: skip
        for p in self.stages:
            expect = p.forecast.text() if p.forecast is not None else ""
            lines.append(f"{p.stage:<20}  {p.type:<16}  {'cached' if p.cached else 'compute':<8}  {p.work:<44}  {expect}".rstrip())
        todo = sum(not p.cached for p in self.stages)
        lines.append(f"{len(self.stages) - todo} of {len(self.stages)} stages cached; {todo} to compute (then the "
                     "tables, plots and report)")  # fmt: skip
        seconds, missing = self.expected()
        if any(p.forecast is not None for p in self.stages):
            unprobed = [p.stage for p in self.stages if p.forecast is not None and not p.forecast.probed]
            lines.append(f"expected: about {_duration(seconds)} of stage work on {self.machine}"
                         + (f" (not counted: {', '.join(missing)}, without a forecast)" if missing else "")
                         + (f"; {', '.join(unprobed)} (no model) and" if unprobed else ";")
                         + " loading the data, the tables and the report add seconds")  # fmt: skip
        if self.engine:
            lines.append(self.engine)
        return "\n".join(lines) + "\n"


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min ({s:.0f} s)"


def plan_stages(config: Config, ds: Dataset, cache: Cache, probe: bool, exact: bool = True) -> list[Planned]:
    """Each stage keyed as the run keys it and looked up in the cache; a hit is read back (its digest keys
    the stages after it), a miss is work, said in queries and documents, or in pairs for a reranker (exact
    where its input is known, else at most queries x top_n), with its expected seconds: from a probe now
    (``probe``) or from rates probed before (:mod:`stagebench.forecast`). A stage whose run is cached but
    whose latency pass is not costs its latency pass. ``exact=False`` (the run's own log) reads no cached run:
    a hit's digest comes from its entry's record, and a reranker's pairs are at most queries x top_n."""
    runs: dict[str, Run] = {}
    digests: dict[str, str] = {}
    planned = []
    sample = latency_sample(ds.query_ids, config.evaluation.latency_queries, config.evaluation.seed)
    for sc in config.stages:
        stage = make_stage(sc)
        known = all(i in digests for i in sc.inputs)
        serves = bool(sample) and type(stage).server is not Stage.server and sc.engine.type == "local"
        entry = None
        key = None
        if known and sc.cache:
            key, _ = stage_key(sc, stage, ds, [digests[i] for i in sc.inputs])
            entry = cache.get("runs", key)
        if entry is not None:
            recorded = entry_digest(entry)
            if exact or recorded is None:
                run = read_trec_run(entry.file("run.trec"))
                runs[sc.name], digests[sc.name] = run, run_digest(run)
            else:  # the digest the entry was stored with (checked then to read back as the run)
                digests[sc.name] = recorded
            took = entry.meta.get("seconds")
            pending = serves and cache.get("latency", make_key({"run": key, "queries": sample})) is None
            fc = None
            if pending:  # its latency pass is still to measure
                f = forecast(sc, ds, cache, {}, None, len(sample), probe)
                fc = Forecast(0.0, f.latency, f.source) if f.seconds is not None else f
            planned.append(Planned(sc.name, sc.type, True, f"computed before in {took:.1f}s" if took is not None else "", fc))
            continue
        top = getattr(sc.params, "top_n", None) if stage.reorders_input and len(sc.inputs) == 1 else None
        pairs, head = None, None
        if top is not None and known and sc.inputs[0] in runs:
            head = {q: dict.fromkeys(ids, 0.0) for q, ids in split_head(runs[sc.inputs[0]], top)[0].items() if ids}
            pairs = sum(map(len, head.values()))
            work = f"{pairs:,} pairs ({len(head):,} queries x top {top})"
        elif top is not None:
            pairs = len(ds.query_ids) * min(top, len(ds.corpus))
            work = f"at most {pairs:,} pairs ({len(ds.query_ids):,} queries x top {top})"
        else:
            work = f"{len(ds.query_ids):,} queries" + (f" over {len(ds.corpus):,} documents" if stage.reads_corpus else "")
        planned.append(Planned(sc.name, sc.type, False, work,
                               forecast(sc, ds, cache, head, pairs, len(sample) if serves else 0, probe)))  # fmt: skip
    return planned


def log_expected(planned: list[Planned]) -> None:
    """Before the first stage: what the stages to compute are expected to take on this machine, from rates
    probed before (a run never probes), and which have none."""
    todo = [p for p in planned if p.forecast is not None]
    if not todo:
        return
    known = [p for p in todo if p.forecast.seconds is not None]
    seconds, _ = forecast_total([p.forecast for p in known])
    unknown = [p.stage for p in todo if p.forecast.missing]
    if known:
        log.info("expected on this machine: about %s of stage work (%s)%s", _duration(seconds),
                 "; ".join(f"{p.stage} {p.forecast.text()}" for p in known),
                 f"; no rate for {', '.join(unknown)} (stagebench run --dry-run probes it)" if unknown else "")  # fmt: skip
    else:
        log.info("no forecast of the stages' seconds: no rate measured on this machine for %s (stagebench run --dry-run "
                 "probes them first)", ", ".join(unknown))  # fmt: skip


def plan_run(config: Config, output: str | Path | None = None, cache_dir: str | None = None,
             recompute: bool = False) -> RunPlan:  # fmt: skip
    """``run --dry-run``: the run's refusals (as :func:`run_config` makes them), then each stage cached or
    to compute, its work and its expected seconds (:func:`plan_stages`, probing the stages whose rates on
    this machine are not in the cache)."""
    out, cache = refusals_before_loading(config, output, cache_dir, recompute)
    ds = read_dataset(config.dataset)
    check_scorable(config, ds)
    plan = RunPlan(str(config.path or "the config"), out, cache.root, plan_stages(config, ds, cache, probe=True),
                   machine=str(machine_info().get("cpu")))  # fmt: skip
    engine = config.ray_engine()
    if engine is not None:  # the cluster asked whether it answers, nothing started on it
        try:
            plan.engine = cluster_answers(engine, f"{config.path}: engine")
        except StagebenchError as exc:
            plan.engine, plan.engine_error = "engine ray: the cluster does not answer (below); the run would stop there", str(exc)
    return plan


def run_config(config: Config, output: str | Path | None = None, cache_dir: str | None = None,
               recompute: bool = False) -> RunResult:  # fmt: skip
    """Run ``config``; ``cache_dir`` overrides the cache root, ``recompute`` ignores cached
    results (and replaces them)."""
    out, cache = refusals_before_loading(config, output, cache_dir, recompute)
    stages = [make_stage(sc) for sc in config.stages]
    judge = None if config.judge is None else make_judge(config.judge, config.dataset)
    with ray_session(config.ray_engine(), f"{config.path}: engine"):  # a cluster that does not answer: before any stage
        return _run(config, stages, out, cache, judge)


def _run(config: Config, stages: list[Stage], out: Path, cache: Cache, judge: Judge | RulesJudge | None = None) -> RunResult:
    for stage in stages:  # servers answer, keys are accepted: before anything is loaded or computed
        stage.preflight()
    if judge is not None:
        judge.preflight()
    t_start = time.perf_counter()
    ds = read_dataset(config.dataset)
    check_scorable(config, ds)
    log_expected(plan_stages(config, ds, cache, probe=False, exact=False))
    partial = staging(out)
    (partial / "runs").mkdir()
    try:
        result = _run_into(config, stages, ds, partial, cache, t_start, judge)
        check_destinations(out, cache)  # the folder may have changed while the stages ran
        swap_in(partial, out, kept=RESULTS.kept)  # expected values and screenshots are carried over
    except BaseException:
        remove_staging(partial)
        raise
    result.output = out
    return result


def shared_scores(config: Config, stages: list[Stage], ds: Dataset) -> dict[str, dict]:
    """stage name -> the pair scores it shares, for every reranker whose scoring (:func:`scoring_key`)
    another reranker of the run has: one dict per such scoring, so a pair is scored once per run."""
    keys = {sc.name: scoring_key(stage_key(sc, stage, ds, [""] * len(sc.inputs))[1], stage.Params)
            for sc, stage in zip(config.stages, stages) if stage.reorders_input}  # fmt: skip
    memo: dict[str, dict] = {k: {} for k in keys.values() if list(keys.values()).count(k) > 1}
    return {name: memo[k] for name, k in keys.items() if k in memo}


def _run_into(config: Config, stages: list[Stage], ds: Dataset, folder: Path, cache: Cache, t_start: float,
              judge: Judge | RulesJudge | None = None) -> RunResult:  # fmt: skip
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    runs: dict[str, Run] = {}
    digests: dict[str, str] = {}
    records: list[StageRecord] = []
    resolved = []
    sample = latency_sample(ds.query_ids, config.evaluation.latency_queries, config.evaluation.seed)
    shared = shared_scores(config, stages, ds)
    for sc, stage in zip(config.stages, stages):
        ctx = context(sc, ds, cache, shared.get(sc.name))
        if sc.engine.type != "local" and stage.uses_engine:
            log.info("stage %s: engine %s", sc.name, sc.engine.describe())
        inputs = [runs[i] for i in sc.inputs]
        ran = run_in(sc, stage, ctx, inputs, [digests[i] for i in sc.inputs])
        key, parts = ran.record.key, ran.parts
        latency = measure_latency(sc, stage, ctx, inputs, ran.run, key, sample, cache)
        runs[sc.name] = ran.run
        digests[sc.name] = ran.record.run_digest
        write_trec_run(ran.run, folder / "runs" / f"{sc.name}.trec", tag=f"{config.name}.{sc.name}")
        for name, r in zip(ran.record.depth_runs, ran.output.depth_runs.values()):  # a reranker's runs at other depths
            write_trec_run(r, folder / "runs" / f"{name}.trec", tag=f"{config.name}.{name}")
        records.append(replace(ran.record, latency_ms=latency))
        resolved.append({"name": sc.name, "type": sc.type, "inputs": sc.inputs, "target": sc.target, "cache": sc.cache,
                         "engine": asdict(sc.engine),
                         "params": asdict(sc.params) if is_dataclass(sc.params) else sc.params, "key": key,
                         "key_parts": parts})  # fmt: skip

    write_trec_qrels(ds.qrels, folder / "qrels.trec")
    texts = texts_for(runs, ds.qrels, ds.queries, ds.doc_text, config.evaluation.relevance_threshold)
    atomic_write(folder / TEXTS_FILE, json.dumps(texts, ensure_ascii=False, separators=(",", ":")) + "\n")
    stored = [by for by in config.evaluation.segments if stored_here(by)]
    if stored:  # what the folder cannot compute again from its own files: the dataset's segments, the user's files
        atomic_write(folder / STORED_FILE, stored_tsv({by: ds.query_groups[by] if by in FROM_DATASET else
                                                       read_segment_file(by) for by in stored}))  # fmt: skip
    log.info("stages computed: %s; from cache: %s", ", ".join(r.name for r in records if r.status == "computed") or "none",
             ", ".join(r.name for r in records if r.status == "cached") or "none")  # fmt: skip
    manifest = Manifest.new(
        version=__version__, config_path=config.path, config=config.raw,
        resolved={"dataset": {"loader": config.dataset.loader, **asdict(config.dataset.options)}, "stages": resolved},
        evaluation={**asdict(config.evaluation), "matrix": config.matrix.to_json() if config.matrix else None},
        cache={"root": str(cache.root.resolve()), "read": cache.read, "keys": {r.name: r.key for r in records}},
        started=started, python=sys.version.split()[0], platform=platform.platform(), machine=machine_info(),
        packages=package_versions(), dataset=ds.stats(), stages=records, code=code_commit(),
    )  # fmt: skip
    found = [b for r in records if (b := baselines.find(cache, r.key, config.evaluation.gain,
                                                          config.evaluation.relevance_threshold)) is not None]  # fmt: skip
    for b in found:
        log.info("stage %s: a tuning of it is in the cache (%s); the table compares it", b.stage, b.folder)
    if found:
        manifest = manifest.with_tuned_baselines(found)
    if judge is not None and config.judge is not None:
        record, tsv = judge_runs(config.judge, judge, ds, runs, [r.name for r in records], manifest.dataset.label_names,
                                 cache)  # fmt: skip
        (folder / "judge").mkdir()
        atomic_write(folder / JUDGMENTS, tsv)
        manifest = manifest.with_judge(record)
    manifest = write_manifest(folder, manifest)
    rendered = render(folder)
    wall = round(time.perf_counter() - t_start, 3)
    manifest = write_manifest(folder, manifest.finished(datetime.now(timezone.utc).isoformat(timespec="seconds"), wall,
                                                        round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)))  # fmt: skip
    first = rendered.table.rows[0]
    log.info("scored %d queries (%d without results in the first stage); tables, plots and report.html written "
             "[wall %.1fs]", first.queries, first.queries_without_results, wall)  # fmt: skip
    return RunResult(output=folder, table=rendered.table, runs=runs, dataset=ds, table_text=rendered.text,
                     per_query=rendered.per_query, judge_text=rendered.judge_text)  # fmt: skip
