"""Executing one stage: its cache key, and its run computed or read through the cache.

This is what the pipeline does for every stage, and what ``train-reranker`` does to mine
hard negatives with a first stage - without either importing the other.

* :func:`stage_key` - the content address of a stage's run: everything it depends on;
* :func:`run_stage` - the run from the cache (checksum-verified), or computed, checked
  (:func:`check_stage_run`), made canonical and stored - only if it reads back identically;
* :func:`measure_latency` - each sampled query served alone by the warm stage
  (:meth:`stagebench.stages.Stage.server`), timed: the per-query latency of the cost table.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from importlib import metadata
from pathlib import Path

from stagebench.cache import Cache, Entry, code_identity, make_key, memo
from stagebench.config import StageConfig
from stagebench.data import Dataset
from stagebench.errors import StagebenchError
from stagebench.stats import latency_percentiles
from stagebench.params import SCORES, affecting
from stagebench.runs import Run, ranked, read_trec_run, run_digest, write_trec_run
from stagebench.record import StageRecord, Stats, depth_run_name, stats_from_json
from stagebench.runtime.cluster.workers import make_engine
from stagebench.stages import Stage, StageContext, StageOutput, stage_class

log = logging.getLogger("stagebench")

REPORTED_PACKAGES = (
    "stagebench", "numpy", "scipy", "pandas", "pyarrow", "rank-bm25", "pytrec-eval-terrier", "torch",
    "sentence-transformers", "transformers", "faiss-cpu", "onnxruntime", "tokenizers", "datasets", "ir_datasets", "pyterrier",
)  # fmt: skip


def package_versions() -> dict[str, str]:
    """The versions of the libraries a manifest reports (those installed)."""
    return {p: v for p, v in declared_versions(REPORTED_PACKAGES).items() if v is not None}


def declared_versions(names) -> dict[str, str | None]:
    """The installed version of each distribution named (None: not installed): what a stage's
    ``packages`` put into its key, every one of them (PyStemmer for BM25, gguf for the LLM stage)."""
    out: dict[str, str | None] = {}
    for p in names:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def stage_key(sc: StageConfig, stage: Stage, ds: Dataset, input_digests: list[str]) -> tuple[str, dict]:
    """The cache key of a stage's run and the parts it hashes: everything the run depends on.

    * the stage type, plug-in target and params (less ``unkeyed_params`` that cannot change
      the output, e.g. a query batch size); the stage *name* is not part of it;
    * the content digests of its input runs, in order: a change upstream that changes an
      input run recomputes this stage; one that leaves it byte-identical (an edit to BM25's
      code that does not move a score, say) does not - the cut-off of build systems;
    * the dataset: corpus fingerprint (ids + indexed texts) if the stage reads texts, the
      queries fingerprint (ids + texts), the qrels fingerprint if the stage may read them;
    * model identities (name + origin + weight-file hash) and other ``identity()`` parts;
    * the source hash of the modules that compute it - its class's module and every stagebench module
      it imports, directly or not (:func:`stagebench.cache.import_closure`, traced from the source,
      never listed by hand) - and the versions of the libraries it declares.
    """
    params = asdict(sc.params) if is_dataclass(sc.params) else sc.params
    params = {k: v for k, v in params.items() if k not in stage.unkeyed_params}
    parts = {
        "type": sc.type,
        "target": sc.target,
        "params": params,
        "inputs": input_digests,
        "corpus": ds.fingerprint if stage.reads_corpus else None,
        "queries": ds.queries_fingerprint,
        "qrels": ds.qrels_fingerprint if stage.reads_qrels else None,
        "identity": stage.identity(),
        "code": code_identity((type(stage).__module__,)),
        "packages": declared_versions(stage.packages),
    }
    return make_key(parts), parts


def make_stage(sc: StageConfig, where: str | None = None) -> Stage:
    """The stage a config entry describes (its class from the registry, its params, its engine)."""
    return stage_class(sc.type, sc.target, where or sc.name)(sc.name, sc.params, sc.engine)


def context(sc: StageConfig, ds: Dataset, cache: Cache | None,
            shared_scores: dict[tuple[str, str], float] | None = None) -> StageContext:  # fmt: skip
    """What a stage of a config runs with: the dataset, the cache, its engine, the pair scores it shares."""
    return StageContext(dataset=ds, cache=cache, engine=make_engine(sc.engine), shared_scores=shared_scores)


def run_in(sc: StageConfig, stage: Stage, ctx: StageContext, inputs: list[Run], input_digests: list[str]) -> StageRun:
    """A stage keyed (:func:`stage_key`) and run through the cache (:func:`run_stage`) in ``ctx``: the one
    sequence behind ``run``, ``tune``, ``train-reranker``'s negatives and the API's ``apply``."""
    _, parts = stage_key(sc, stage, ctx.dataset, input_digests)
    return run_stage(sc, stage, ctx, inputs, parts, ctx.cache)


def scoring_key(parts: dict, params: type) -> str:
    """What a reranker's pair scores depend on: its stage key's parts (:func:`stage_key`) less its inputs
    and the params of ``params`` (its ``Params`` class) not declared to affect the pair scores
    (``affects=(RUN,)``: which candidates are scored, how scores are merged). Two stages of a run with one
    scoring key (a matrix's copies of one reranker over other pools) share their pair scores: a pair is
    scored once per run."""
    scoring = set(affecting(params, SCORES))
    kept = {k: v for k, v in (parts["params"] or {}).items() if k in scoring}
    return make_key({**{k: v for k, v in parts.items() if k not in ("inputs", "params")}, "params": kept})


def check_stage_run(run: Run, stage: str, dataset: Dataset) -> None:
    """A stage's run holds known queries, string doc ids a TREC file can hold, finite scores."""
    for qid, docs in run.items():
        if qid not in dataset.queries:
            raise StagebenchError(f"stage {stage}: returned unknown query id {qid!r}")
        for d, s in docs.items():
            # ids from the corpus were checked when the dataset loaded: only others need the test
            if (not isinstance(d, str) or not d or any(c.isspace() for c in d)) and d not in dataset.corpus:
                raise StagebenchError(f"stage {stage}: query {qid!r}: document id {d!r} is empty or holds whitespace "
                                      "(a TREC run file cannot hold it)")  # fmt: skip
            if not isinstance(s, float) or not math.isfinite(s):
                raise StagebenchError(f"stage {stage}: score for query {qid!r} doc {d!r} is {s!r}, not a finite number")


def canonical(run: Run) -> Run:
    """Queries sorted, documents in rank order, queries without documents dropped (a TREC file
    cannot hold them; metrics score them 0 either way): the same object whether a run was
    computed or read back from the cache, so downstream stages see identical inputs."""
    return {q: dict(ranked(run[q])) for q in sorted(run) if run[q]}


@dataclass
class StageRun:
    """One stage run through the cache: what it produced (its stats completed by ``finish_stats``)
    and its record for the manifest."""

    output: StageOutput
    record: StageRecord
    parts: dict = field(default_factory=dict)  # what its key hashes (stage_key), for the manifest

    @property
    def run(self) -> Run:
        return self.output.run

    @property
    def depth_runs(self) -> dict[int, Run]:
        return self.output.depth_runs

    @property
    def stats(self) -> Stats | None:
        return self.output.stats


def run_stage(sc: StageConfig, stage: Stage, ctx: StageContext, inputs: list[Run], parts: dict,
              cache: Cache | None) -> StageRun:  # fmt: skip
    """Run one stage through the cache (``cache=None`` or ``cache: false`` on the stage:
    compute, store nothing). ``parts`` are :func:`stage_key`'s."""

    Value = tuple[StageOutput, str]  # the output (canonical runs), its run's digest (computed once)

    def compute() -> Value:
        out = stage.apply(ctx, inputs)
        if not isinstance(out, StageOutput):
            raise StagebenchError(f"stage {sc.name}: {type(stage).__name__}.apply returned {type(out).__name__}, "
                                  "not a StageOutput")  # fmt: skip
        check_stage_run(out.run, sc.name, ctx.dataset)
        for r in out.depth_runs.values():
            check_stage_run(r, sc.name, ctx.dataset)
        run = canonical(out.run)
        return replace(out, run=run, depth_runs={n: canonical(r) for n, r in sorted(out.depth_runs.items())}), run_digest(run)

    def describe(value: Value) -> str:
        run, depths = value[0].run, value[0].depth_runs
        extra = f" (+ {len(depths)} runs at other depths)" if depths else ""
        return f"{len(run)} queries, up to {max((len(v) for v in run.values()), default=0)} docs each{extra}"

    def meta(value: Value) -> dict:
        out = value[0]
        m: dict = {"stage": sc.name, "type": sc.type, "queries": len(out.run), ENTRY_DIGEST: value[1]}
        if out.depth_runs:
            m["depths"] = sorted(out.depth_runs)
        return {**m, "stage_stats": out.stats.to_json()} if out.stats is not None else m

    def save(value: Value, folder: Path) -> None:
        write_trec_run(value[0].run, folder / "run.trec", tag=f"stagebench.{sc.type}")
        for n, r in value[0].depth_runs.items():
            write_trec_run(r, folder / f"depth-{n}.trec", tag=f"stagebench.{sc.type}")

    def load(entry) -> Value:
        run = read_trec_run(entry.file("run.trec"))
        depths = {int(n): read_trec_run(entry.file(f"depth-{int(n)}.trec")) for n in entry.meta.get("depths", [])}
        stats = stats_from_json(entry.meta.get("stage_stats"), f"cache entry {entry.path}")
        return StageOutput(run, depths, stats), run_digest(run)

    m = memo(cache if sc.cache else None, "runs", parts, compute, save=save, load=load,
             check=lambda value, folder: _reads_back(folder / "run.trec", value[1], sc.name), meta=meta,
             label=f"stage {sc.name}", what=f"run ({sc.type}{' <- ' + ', '.join(sc.inputs) if sc.inputs else ''})",
             describe=describe, measure_memory=True, unstorable=lambda value: value[0].incomplete)  # fmt: skip
    out, digest = m.value
    out = replace(out, stats=stage.finish_stats(out.stats))
    ran = stage.what_runs()
    if ran is not None:
        log.info("stage %s: %s on %s%s at %s (%s), variant: %s%s", sc.name, ran["runtime"], ran["device"],
                 f" ({ran['cpu_class']})" if "cpu_class" in ran else "", ran["precision"], ran["why"], ran["variant"],
                 f", streams: {ran['streams']}" if "streams" in ran else "")  # fmt: skip
    record = StageRecord(name=sc.name, type=sc.type, inputs=list(sc.inputs), key=m.key,
                         reorders_input=stage.reorders_input,
                         candidate_depth=getattr(sc.params, "top_n", None) if stage.reorders_input else None,
                         status=m.status, seconds=m.seconds, computed_seconds=m.computed_seconds,
                         peak_rss_mb=m.peak_rss_mb, computed_peak_rss_mb=m.computed_peak_rss_mb, run_digest=digest,
                         stats=out.stats, depth_runs=[depth_run_name(sc.name, n) for n in sorted(out.depth_runs)],
                         placement=ran)  # fmt: skip
    return StageRun(out, record, parts)


#: where a stage run's cache entry records its run's digest (checked, when stored, to read back as the run)
ENTRY_DIGEST = "run_digest"


def entry_digest(entry: Entry) -> str | None:
    """The digest of the run a stage run's cache entry holds, as recorded when it was stored (None: not recorded)."""
    return entry.meta.get(ENTRY_DIGEST) or None


def _reads_back(path: Path, digest: str, stage: str) -> None:
    """A cache entry is stored only if it reads back as the run that was computed."""
    if run_digest(read_trec_run(path)) != digest:
        raise StagebenchError(f"stage {stage}: its run does not read back identically from a TREC file; not cached")


def latency_sample(query_ids: list[str], n: int, seed: int) -> list[str]:
    """The queries whose latency is measured: ``n`` of them (all if fewer), drawn with ``seed``, in
    id order; the same for every stage of a run, so that a cascade's latency adds up per query."""
    ids = sorted(query_ids)
    return ids if n >= len(ids) else sorted(random.Random(seed).sample(ids, n))


def measure_latency(sc: StageConfig, stage: Stage, ctx: StageContext, inputs: list[Run], run: Run, run_key: str,
                    sample: list[str], cache: Cache | None) -> dict[str, float] | None:  # fmt: skip
    """Milliseconds to serve each query of ``sample`` alone with the stage warm (its model, index and
    embeddings loaded once, one untimed query first): what one request costs a search service,
    beside the batch throughput of the run. Kept in the cache under the stage run's key and the
    sample, like the run's compute seconds (measured when computed, on the machine that computed
    them). ``None``: not measured - the stage has no :meth:`~stagebench.stages.Stage.server`, the
    sample is empty, or the stage runs on Ray (serving is measured in this process). Logs how many
    served queries rank exactly as the batch run did (a batch-dependent model changes some)."""
    if not sample or type(stage).server is Stage.server or ctx.engine.remote:
        if sample and ctx.engine.remote:
            log.info("stage %s: per-query latency not measured (it runs on Ray; latency is measured in-process)", sc.name)
        return None

    def compute() -> dict[str, float]:
        serve = stage.server(ctx)
        assert serve is not None  # the class overrides server()
        one = {q: [{q: r[q]} if q in r else {} for r in inputs] for q in sample}
        serve(sample[0], one[sample[0]])  # warm-up: first-call allocations, lazy loads
        out, same = {}, 0
        for q in sample:
            t0 = time.perf_counter()
            got = serve(q, one[q])
            out[q] = (time.perf_counter() - t0) * 1000
            same += ranked(got.get(q, {})) == ranked(run.get(q, {}))
        log.info("stage %s: %d queries served one at a time, %d ranked exactly as in the batch run", sc.name,
                 len(sample), same)  # fmt: skip
        return out

    m = memo(cache if sc.cache else None, "latency", {"run": run_key, "queries": sample}, compute,
             save=lambda v, folder: (folder / "latency.json").write_text(json.dumps(v, sort_keys=True) + "\n"),
             load=lambda entry: {q: float(v) for q, v in json.loads(entry.file("latency.json").read_text()).items()},
             label=f"stage {sc.name}", what=f"per-query latency ({len(sample)} queries served one at a time)",
             describe=lambda v: "p50 {:.1f} / p95 {:.1f} / p99 {:.1f} ms".format(*latency_percentiles(list(v.values()))))  # fmt: skip
    return m.value

