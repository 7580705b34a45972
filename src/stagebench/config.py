"""Typed, validated configuration.

A config is one YAML file::

    name: default                 # run name; results go to <output>
    output: results/default
    cache_dir: .stagebench-cache  # stage runs, embeddings, indexes ($STAGEBENCH_CACHE overrides)
    engine: local                 # or ray, or {type: ray, address: auto, num_workers: 4, ...}
    dataset:
      loader: esci                # see stagebench.data.LOADERS
      path: data/synthetic-esci   # loader options follow, flat
      split: test
    stages:                       # in pipeline order
      - name: bm25
        type: bm25                # see stagebench.stages.STAGE_TYPES
        params: {k1: 0.9, b: 0.4, top_k: 1000}
      - name: rerank
        type: cross_encoder
        inputs: [bm25]
        params: {top_n: 50}
    evaluation:
      metrics: [nDCG@10, RR@10, R@100]
      relevance_threshold: 1      # grade >= this is relevant for binary measures
      gain: linear                # nDCG gain: linear (trec_eval) | exp (2^g - 1)
    matrix:                       # optional: every reranker over every pool (docs/report.md)
      rerankers: [rerank]
      pools: [bm25, oracle]       # stages of the config, and the oracle pool

Relative paths are resolved against the working directory. Every error names the
file and the key path (``configs/x.yaml: stages[1].inputs: unknown stage 'bm52'``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from stagebench.data import DatasetConfig, parse_dataset
from stagebench.runtime.engine import EngineParams
from stagebench.errors import ConfigError, StagebenchError
from stagebench.judge.ask import JudgeParams
from stagebench.judge.section import parse_judge
from stagebench.metrics.compute import gain_map
from stagebench.metrics import check_distinct
from stagebench.metrics.names import Measure, parse_measure
from stagebench.models.resolve import check_model, check_stage_model
from stagebench.record import MatrixRecord
from stagebench.params import (
    DeviceSpec,
    Fraction,
    NonNegativeInt,
    PositiveInt,
    Length,
    Probability,
    Range,
    Seed,
    build,
    coerce,
    declared,
    param,
    read_yaml,  # fmt: skip
)
from stagebench.results.segments import BUILT_IN as SEGMENTERS, read_segment_file
from stagebench.table import CEILING_MEASURE
from stagebench.stages import STAGE_TYPES, stage_class

DEFAULT_METRICS = ("nDCG@10", "RR@10", "R@100")


@dataclass
class StageConfig:
    name: str
    type: str
    inputs: list[str]
    params: Any
    target: str | None = None  # plug-in target "package.module:Class" (type: plugin)
    cache: bool = True  # false: always recompute this stage (and do not store its run)
    engine: EngineParams = field(default_factory=EngineParams)  # where its units run (stagebench.runtime.engine)
    tuned_on: str | None = None  # the dataset its params were tuned on (dataset.path or dataset.id): a note elsewhere


#: the families of stage pairs ``evaluation.comparisons`` may name (besides explicit pairs ``A=B``)
COMPARISON_KINDS = ("inputs", "siblings", "baseline", "all")


def comparison_problem(kind: str, stages: Sequence[str]) -> str | None:
    """Why an ``evaluation.comparisons`` entry names nothing, or None."""
    if kind in COMPARISON_KINDS:
        return None
    a, sep, b = (x.strip() for x in str(kind).partition("="))
    if not sep:
        return f"{kind!r}: one of {', '.join(COMPARISON_KINDS)}, or a pair of stages A=B"
    for x in (a, b):
        if x not in stages:
            return f"{kind!r}: {x!r} is not a stage ({', '.join(stages)})"
    return f"{kind!r}: a stage against itself" if a == b else None


@dataclass
class EvaluationConfig:
    metrics: Annotated[list[str], Length()] = param(doc="measure names (docs/metrics.md), case-insensitive", factory=lambda: list(DEFAULT_METRICS))
    relevance_threshold: PositiveInt = param(1, "binary measures count grade >= this as relevant; never changes the query set")
    gain: str | dict[int, float] = param("linear", "nDCG gain map: linear (the grade, as trec_eval), exponential "
                                         "(2^grade - 1), esci (the official task-1 gains), or a table {grade: gain}")  # fmt: skip
    baseline: str | None = param(None, "the stage every other stage is compared with, besides its inputs (null: the first)")
    comparisons: Annotated[list[str], Length()] = param(
        doc="the stage pairs tested for significance (Holm over them, per measure): inputs (each stage against its "
            "inputs; a retriever against the stage listed before it), siblings (stages over the same input, e.g. two "
            "rerankers of one pool, against each other), baseline (every stage against evaluation.baseline), all "
            "(every pair), or a pair A=B of stage names",
        factory=lambda: ["inputs", "siblings", "baseline"])  # fmt: skip
    test: Literal["randomization", "ttest"] = param("randomization", "which test marks significance (both are in significance.json)")
    alpha: Probability = param(0.05, "significance level, after Holm-Bonferroni correction")
    permutations: Annotated[int, Range(ge=100, le=10_000_000)] = param(10000, "randomization-test permutations (at most "
                                                                       "10 million: a p-value to 1e-7)")  # fmt: skip
    bootstrap: Annotated[int, Range(ge=100, le=1_000_000)] = param(2000, "bootstrap resamples for the 95% confidence "
                                                                   "intervals (at most 1 million)")  # fmt: skip
    seed: Seed = param(42, "seed of both, so the numbers are reproducible")
    ceiling: str = param(CEILING_MEASURE, "the measure of the recall ceilings and oracle headroom, the depth sweep and "
                                          "the reranker-by-pool matrix: one of stagebench's own measures of a ranking "
                                          "(the ideal order of a pool is its maximum); the matrix needs it among metrics")  # fmt: skip
    latency_queries: NonNegativeInt = param(0, "queries each stage serves one at a time, warm, for its p50/p95/p99 "
                                               "latency in the cost table (drawn with seed; 0, the default: not "
                                               "measured; its cost is said by run --dry-run and the log)")  # fmt: skip
    segments: list[str] = param(
        doc="query segmentations of the segments table (docs/report.md#query-segments): length (words), negation "
            "(a negation word), judged or relevant (products per query, in thirds), locale or source (ESCI: the "
            "query's locale; its source from shopping_queries_dataset_sources.csv beside the data), or the path of a "
            "qid<TAB>segment file",
        factory=list)  # fmt: skip

    def validate(self) -> list[tuple[str, str]]:
        try:
            gain_map(self.gain)
        except ValueError as exc:
            return [("gain", str(exc))]
        if len(set(self.segments)) != len(self.segments):
            return [("segments", f"{self.segments}: a segmentation is listed twice")]
        for i, by in enumerate(self.segments):
            if by in SEGMENTERS:
                continue
            if not Path(by).is_file():
                return [(f"segments[{i}]", f"{by!r} is neither a built-in segmentation ({', '.join(SEGMENTERS)}) nor a "
                                           "file")]  # fmt: skip
            try:
                read_segment_file(by)
            except StagebenchError as exc:
                return [(f"segments[{i}]", str(exc))]
        return []


def test_settings(permutations: int, seed: int, alpha: float, flags: bool = False) -> tuple[int, int, float]:
    """The paired tests' settings checked as ``evaluation:`` declares them - what every command and every API
    function that tests pairs takes, so the two refuse alike (``flags``: errors name ``--alpha``, else
    ``alpha``)."""
    names = ("permutations", "seed", "alpha")
    return tuple(declared(v, EvaluationConfig, k, f"--{k}" if flags else k)  # type: ignore[return-value]
                 for k, v in zip(names, (permutations, seed, alpha)))


@dataclass
class OracleOptions:
    of: str | None = param(None, "the stage whose candidates the oracle pool completes with every relevant product "
                                 "(null: the first stage)")  # fmt: skip
    min_grade: PositiveInt = param(1, "judged products of at least this grade are put in the oracle pool")
    seed: Seed = param(42, "seed of the ranks the relevant products are given in the oracle pool")


@dataclass
class MatrixConfig:
    rerankers: Annotated[list[str], Length()] = param(doc="reranking stages of the config (one input each), run over every pool")
    pools: Annotated[list[str], Length()] = param(doc="stages of the config whose runs are candidate pools, and 'oracle': the first stage's "
                                 "candidates with every relevant product put in (a stage of type oracle_pool as deep "
                                 "as the reranker's top_n, so the reranker sees all of them)")  # fmt: skip
    oracle: OracleOptions = param(doc="the oracle pool (below)", factory=OracleOptions)

    def validate(self) -> list[tuple[str, str]]:
        for key, names in (("rerankers", self.rerankers), ("pools", self.pools)):  # each non-empty: Length
            if len(set(names)) != len(names):
                return [(key, f"{names}: a stage is listed twice")]
        return []


def ceiling_measure(text: str) -> str:
    """``evaluation.ceiling`` read: a measure stagebench computes whose ideal order is its maximum, by its
    canonical name; anything else one error naming the key."""
    try:
        m = parse_measure(text)
    except StagebenchError as exc:
        raise ConfigError(f"evaluation.ceiling: {exc}") from None
    if not m.supports.ceiling:
        why = ("computed by ir_measures, which stagebench cannot reorder ideally" if not m.supports.native else
               "describes the judgments, not a ranking: no reordering changes it")  # fmt: skip
        raise ConfigError(f"evaluation.ceiling: {m.name}: {why}; give one of stagebench's measures of a ranking, "
                          "e.g. nDCG@10")  # fmt: skip
    return m.name


#: the name of the oracle pool among a matrix's pools
ORACLE = "oracle"


def expand_matrix(m: MatrixConfig, stages: list[StageConfig], raw_stages: list, engines: list[EngineParams],
                  training: Any) -> tuple[list[StageConfig], MatrixRecord]:  # fmt: skip
    """The stages the matrix adds (the oracle pool, then every reranker over every other pool), parsed as
    any stage is, and the matrix's cells. The copies share their reranker's type and params, so a pool a
    reranker already ranks in the config is not scored twice, and every cell goes through the stage cache."""
    by_name = {sc.name: (i, sc) for i, sc in enumerate(stages)}
    for j, r in enumerate(m.rerankers):
        if r not in by_name:
            raise ConfigError(f"matrix.rerankers[{j}]: unknown stage {r!r} (known: {', '.join(by_name)})")
        sc = by_name[r][1]
        if not (stage_class(sc.type, sc.target, r).reorders_input and len(sc.inputs) == 1):
            raise ConfigError(f"matrix.rerankers[{j}]: {r!r} ({sc.type}) is not a reranker of one input (a stage that "
                              "reorders the candidates of one input: cross_encoder, plugin, llm_rerank)")  # fmt: skip
    oracle_name = None
    for j, p in enumerate(m.pools):
        if p == ORACLE and p not in by_name:
            oracle_name = ORACLE
        elif p not in by_name:
            raise ConfigError(f"matrix.pools[{j}]: unknown stage {p!r} (known: {', '.join([*by_name, ORACLE])})")
    depth = {r: getattr(by_name[r][1].params, "top_n", None) for r in m.rerankers}
    if oracle_name is not None:
        for j, r in enumerate(m.rerankers):
            if not depth[r]:
                raise ConfigError(f"matrix.rerankers[{j}]: {r!r} has no top_n, which the oracle pool's depth follows")
    seen = set(by_name)
    added: list[StageConfig] = []

    def add(raw: dict, i: int) -> None:
        where = f"matrix: the stage {raw['name']!r} it adds"
        if raw["name"] in seen:
            raise ConfigError(f"{where}: a stage of the config has that name already; rename it")
        sc = parse_stage(raw, where, seen, engines[i], training, raw_stages)
        added.append(sc)
        seen.add(sc.name)

    oracle_of: dict[int, str] = {}  # depth -> the oracle pool's stage of that depth
    if oracle_name is not None:
        of = m.oracle.of or stages[0].name
        if of not in by_name:
            raise ConfigError(f"matrix.oracle.of: unknown stage {of!r} (known: {', '.join(by_name)})")
        depths = sorted(set(depth.values()))
        for d in depths:  # one oracle pool per reranker depth: each reranker sees every relevant product
            oracle_of[d] = ORACLE if len(depths) == 1 else f"{ORACLE}_{d}"
            add({"name": oracle_of[d], "type": "oracle_pool", "inputs": [of],
                 "params": {"depth": d, "min_grade": m.oracle.min_grade, "seed": m.oracle.seed}}, by_name[of][0])  # fmt: skip
    cells: dict[str, dict[str, str]] = {}
    for r in m.rerankers:
        i, sc = by_name[r]
        cells[r] = {}
        for p in m.pools:
            pool = oracle_of[depth[r]] if p == oracle_name else p
            if sc.inputs == [pool]:
                cells[r][p] = r
                continue
            raw = dict(raw_stages[i])
            raw.update(name=f"{r}_on_{p}", inputs=[pool])
            add(raw, i)
            cells[r][p] = raw["name"]
    return added, MatrixRecord(list(m.rerankers), list(m.pools), cells, oracle_name)


@dataclass
class NegativesConfig:
    judged: bool = param(True, "train on the judged products of each query, with their mapped labels")
    from_stage: str | None = param("bm25", "a first stage of this config, run over the train queries to mine negatives")
    per_query: NonNegativeInt = param(8, "hard negatives per query, sampled among ...")
    depth: PositiveInt = param(50, "... the unjudged documents in the top depth of that stage's run")
    skip_top: NonNegativeInt = param(0, "ignore the first N unjudged (the likeliest false negatives)")


@dataclass
class TrainingConfig:
    base_model: str = param("cross-encoder/ms-marco-MiniLM-L-12-v2", "the model to fine-tune (anything the resolver loads)")
    source: str = param("auto", "where the base model comes from: auto | bundled | hub")
    output: str = param("models/reranker", "the model folder written (with a model card)")
    split: str = param("train", "the split the training queries come from (the test split is never read)")
    max_queries: PositiveInt | None = param(None, "train queries used, after the dev ones are set aside (null: all)")
    dev_queries: NonNegativeInt = param(100, "held out of the training split for dev metrics and early stopping")
    negatives: NegativesConfig = param(doc="hard-negative mining (below)", factory=NegativesConfig)
    labels: Annotated[dict[str, float], Length()] = param(doc="grade name (or grade) -> training target",
                                     factory=lambda: {"E": 1.0, "S": 0.1, "C": 0.01, "I": 0.0})
    unjudged_label: float = param(0.0, "the target of mined negatives nobody judged")
    loss: Literal["bce", "mse", "lambda"] = param("bce", "pointwise BCE | pointwise MSE | listwise LambdaLoss")
    epochs: PositiveInt = param(1, "training epochs")
    batch_size: PositiveInt = param(16, "pairs per training batch")
    max_length: PositiveInt = param(96, "tokens of query + document")
    learning_rate: Probability = param(2e-5, "AdamW learning rate")
    warmup_ratio: Fraction = param(0.1, "share of the steps with a linear warm-up")
    seed: Seed = param(12, "seed of the dev split, the negative sampling and training")
    early_stopping_patience: PositiveInt | None = param(None, "epochs without a dev nDCG@10 gain before stopping (null: never)")
    device: DeviceSpec = param("auto", "where training runs: auto (CUDA, else MPS, else CPU) | cpu | cuda | cuda:N | mps; "
                               "training is fp32 everywhere")  # fmt: skip

    def validate(self) -> list[tuple[str, str]]:
        # labels is non-empty (Length); the base model must be loadable before any training step
        errs = check_model(self.base_model, self.source, self.max_length)
        return [("base_model" if k == "model" else k, m) for k, m in errs]

    def produces(self, model: str) -> bool:
        """Whether a stage's ``model`` names this training's output folder."""
        return Path(model).expanduser().resolve() == Path(self.output).expanduser().resolve()

    def check_against(self, stages: list) -> None:
        name = self.negatives.from_stage
        if name is None:
            return
        sc = next((s for s in stages if s.name == name), None)
        if sc is None:
            raise ConfigError(f"training.negatives.from_stage: unknown stage {name!r} "
                              f"(known: {', '.join(s.name for s in stages)})")  # fmt: skip
        if sc.inputs:
            raise ConfigError(f"training.negatives.from_stage: stage {name!r} has inputs; hard negatives come from a "
                              "first stage (a retriever), which can run on the train queries alone")  # fmt: skip


def check_trained_models(config) -> None:
    """Fail early (before any stage runs) when a stage uses this config's training output
    and it has not been trained yet."""
    t = config.training
    if t is None:
        return
    for sc in config.stages:
        model = getattr(sc.params, "model", None)
        if model and t.produces(model) and not Path(model).expanduser().is_dir():
            raise StagebenchError(f"{config.path}: stages ({sc.name}).params.model: {model!r} is this config's training "
                                  f"output and does not exist yet; run `stagebench train-reranker {config.path}` first")  # fmt: skip


@dataclass
class TuneConfig:
    """The ``tune:`` section (``stagebench tune``, docs/baselines.md): which stages' params are
    searched, over what, on which queries, chosen by which measure."""

    stages: Annotated[list[str], Length()] = param(doc="the stages tuned, in pipeline order; each with the ones before it at their tuned params")
    space: dict[str, dict[str, list[Any]]] = param(doc="stage -> param -> the values tried (a stage not named: its "
                                                   "type's space, docs/baselines.md)", factory=dict)  # fmt: skip
    measure: str = param("nDCG@10", "what a trial is chosen by: its mean over the tuning queries")
    queries: Literal["auto", "split", "kfold"] = param("auto", "split: the queries of the dataset's split `split`; "
                                                       "kfold: k-fold cross-validation over the test queries; auto: split "
                                                       "when the loader has that split, else kfold")  # fmt: skip
    split: str = param("train", "the split that tunes (never the test split)")
    max_queries: PositiveInt | None = param(None, "tuning queries drawn from that split with seed (null: all)")
    folds: Annotated[int, Range(ge=2, le=20)] = param(5, "k of the k-fold cross-validation")
    search: Literal["grid", "random"] = param("grid", "grid: every combination; random: `trials` combinations drawn with seed")
    trials: PositiveInt = param(100, "the budget per stage: random draws this many; a larger grid is refused")
    seed: Seed = param(42, "seed of the random search, the folds and the query draw")
    output: str | None = param(None, "the tuning folder (null: <output>-tuned)")


@dataclass
class Config:
    name: str
    dataset: DatasetConfig
    stages: list[StageConfig]
    evaluation: EvaluationConfig
    measures: list[Measure]
    output: str
    cache_dir: str | None  # None: $STAGEBENCH_CACHE or .stagebench-cache (stagebench.cache.cache_root)
    path: str
    raw: dict
    training: TrainingConfig | None = None  # for `stagebench train-reranker`
    matrix: MatrixRecord | None = None  # the reranker-by-pool matrix (its stages are in stages)
    judge: JudgeParams | None = None  # the LLM judge of the holes (stagebench.judge.grading)
    engine: EngineParams = field(default_factory=EngineParams)  # the top-level engine: (stages may override it)
    tune: TuneConfig | None = None  # for `stagebench tune` (stagebench.fitting.tune)

    def ray_engine(self) -> EngineParams | None:
        """The settings of the Ray cluster this run connects to (one per run), or None."""
        return next((sc.engine for sc in self.stages if sc.engine.type == "ray"), None)


# --------------------------------------------------------------------------- loading

#: config and stage names become file and folder names: no separators, no "..", no whitespace
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

_TOP_KEYS = ("name", "output", "cache_dir", "engine", "dataset", "stages", "evaluation", "matrix", "training", "judge",
             "tune")
_STAGE_KEYS = ("name", "type", "inputs", "params", "target", "cache", "engine", "tuned_on")


def load_config(path: str | Path, engine: str | None = None) -> Config:
    """Load and validate a YAML config file (``engine``: as :func:`parse_config`)."""
    path = Path(path)
    raw = read_yaml(path)
    try:
        return parse_config(raw, str(path), engine)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _engine_mapping(value: Any, where: str) -> dict:
    if isinstance(value, str):
        return {"type": value}
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(f"{where}: expected local, ray or a mapping (type: ray, address: ..., num_workers: ...)")


def _engines(raw: dict, override: str | None) -> tuple[EngineParams, list[EngineParams]]:
    """The top-level engine and each stage's: a stage's ``engine:`` (a type, or a mapping over the
    top-level settings of the same type) overrides the top level; ``override`` (``--engine``) puts
    every stage on that type, with the top-level settings when they are of that type."""
    top_raw = _engine_mapping(raw.get("engine", {}), "engine")
    if override is not None:
        if override not in ("local", "ray"):
            raise ConfigError(f"--engine: must be local or ray, got {override!r}")
        top_raw = top_raw if top_raw.get("type", "local") == override else {"type": override}
    top = build(EngineParams, top_raw, "engine")
    per_stage = []
    for i, s in enumerate(raw["stages"]):
        where = f"stages[{i}] ({s.get('name')}).engine"
        if override is not None or not isinstance(s, dict) or "engine" not in s:
            per_stage.append(top)
            continue
        own = _engine_mapping(s["engine"], where)
        kind = own.get("type", top.type)
        base = {k: v for k, v in top_raw.items() if k != "type"} if kind == top.type else {}
        eng = build(EngineParams, {**base, **own, "type": kind}, where)
        ray = next((e for e in [top, *per_stage] if e.type == "ray"), None)
        if eng.type == "ray" and ray is not None and (eng.address, eng.local_cpus) != (ray.address, ray.local_cpus):
            raise ConfigError(f"{where}.address: one run uses one Ray cluster; set address and local_cpus at the top "
                              "level (engine:), not per stage")  # fmt: skip
        per_stage.append(eng)
    return top, per_stage


def parse_config(raw: Any, path: str = "<config>", engine: str | None = None) -> Config:
    """Validate a config mapping; errors are ``key.path: message`` (the caller adds the file).
    ``engine`` (``--engine``): run every stage on ``local`` or ``ray``, whatever the config says."""

    if not isinstance(raw, dict):
        raise ConfigError("top level: expected a mapping")
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{key}: unknown key (known: {', '.join(_TOP_KEYS)})")
    for key in ("name", "dataset", "stages"):
        if key not in raw:
            raise ConfigError(f"{key}: required key is missing")
    name = _name(raw["name"], "name")
    training = None
    if raw.get("training") is not None:
        training = build(TrainingConfig, raw["training"], "training")
    output = coerce(raw.get("output", f"results/{name}"), str, "output")
    cache_dir = coerce(raw.get("cache_dir"), str | None, "cache_dir")

    dataset = parse_dataset(raw["dataset"])

    stages_raw = raw["stages"]
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ConfigError("stages: expected a non-empty list")
    top_engine, stage_engines = _engines(raw, engine)
    stages: list[StageConfig] = []
    seen: set[str] = set()
    for i, s in enumerate(stages_raw):
        sc = parse_stage(s, f"stages[{i}]", seen, stage_engines[i], training, stages_raw)
        stages.append(sc)
        seen.add(sc.name)

    matrix = None
    if raw.get("matrix") is not None:
        added, matrix = expand_matrix(build(MatrixConfig, raw["matrix"], "matrix"), stages, stages_raw, stage_engines,
                                      training)  # fmt: skip
        stages += added
        seen |= {sc.name for sc in added}

    evaluation = build(EvaluationConfig, raw.get("evaluation", {}), "evaluation")
    measures = []
    for j, m in enumerate(evaluation.metrics):
        try:
            measures.append(parse_measure(m))
        except StagebenchError as exc:
            raise ConfigError(f"evaluation.metrics[{j}]: {exc}") from None
    try:
        check_distinct(measures, evaluation.metrics, "evaluation.metrics")
    except StagebenchError as exc:
        raise ConfigError(str(exc)) from None
    evaluation.ceiling = ceiling_measure(evaluation.ceiling)
    if matrix is not None and evaluation.ceiling not in [m.name for m in measures]:
        raise ConfigError(f"evaluation.ceiling: the matrix shows each reranker's {evaluation.ceiling} beside its pool's, "
                          f"which evaluation.metrics does not score ({', '.join(evaluation.metrics)}); add it there")  # fmt: skip
    if evaluation.baseline is not None and evaluation.baseline not in seen:
        raise ConfigError(f"evaluation.baseline: unknown stage {evaluation.baseline!r}")
    for j, kind in enumerate(evaluation.comparisons):
        why = comparison_problem(kind, [sc.name for sc in stages])
        if why:
            raise ConfigError(f"evaluation.comparisons[{j}]: {why}")
    if training is not None:
        training.check_against(stages)
    judge = None if raw.get("judge") is None else parse_judge(raw["judge"], None, [s.name for s in stages], dataset)
    tune = None
    if raw.get("tune") is not None:
        tune = build(TuneConfig, raw["tune"], "tune")
        check_tune(tune, stages, stages_raw, stage_engines, training)
    return Config(
        name=name, dataset=dataset, stages=stages, evaluation=evaluation, measures=measures,
        output=output, cache_dir=cache_dir, path=path, raw=raw, training=training, engine=top_engine, judge=judge,
        matrix=matrix, tune=tune,
    )  # fmt: skip


def tune_space(tune: TuneConfig, sc: StageConfig) -> dict[str, list[Any]]:
    """The values tried for each tuned param of stage ``sc``: the config's ``tune.space`` for it,
    else its type's (:meth:`stagebench.stages.Stage.tune_space`)."""
    if sc.name in tune.space:
        return tune.space[sc.name]
    return stage_class(sc.type, sc.target, sc.name).tune_space(sc.params, sc.inputs)


def trial_stage(stages_raw: list, index: int, assignment: dict[str, Any], engine: EngineParams, training: Any,
                where: str) -> StageConfig:  # fmt: skip
    """Stage ``index`` of the config with ``assignment`` (param -> value) over its params, validated
    as the config's own stages are (:func:`parse_stage`); ``where`` names the trial in errors."""
    raw = dict(stages_raw[index])
    raw["params"] = {**(raw.get("params") or {}), **assignment}
    seen = {s["name"] for s in stages_raw[:index]}
    return parse_stage(raw, where, seen, engine, training, stages_raw)


def check_tune(tune: TuneConfig, stages: list[StageConfig], stages_raw: list, engines: list[EngineParams],
               training: Any) -> None:  # fmt: skip
    """Every name, param and value of ``tune:`` makes sense before anything runs: the stages are
    the config's own (not the matrix's copies), each has a space, every value builds a valid
    stage, the measure parses, a grid fits the trials budget."""
    try:
        parse_measure(tune.measure)
    except StagebenchError as exc:
        raise ConfigError(f"tune.measure: {exc}") from None
    own = {sc.name: i for i, sc in enumerate(stages[: len(stages_raw)])}
    for name in tune.space:
        if name not in tune.stages:
            raise ConfigError(f"tune.space.{name}: not one of tune.stages ({', '.join(tune.stages)})")
    last = -1
    for j, name in enumerate(tune.stages):
        if name not in own:
            raise ConfigError(f"tune.stages[{j}]: unknown stage {name!r} (stages: {', '.join(own)})")
        if own[name] <= last:
            raise ConfigError(f"tune.stages[{j}]: {name!r} is listed twice or before a stage it comes after")
        last = own[name]
        sc = stages[own[name]]
        space = tune_space(tune, sc)
        if not space:
            raise ConfigError(f"tune.stages[{j}]: a {sc.type} stage has no default search space; give its values "
                              f"in tune.space.{name}")  # fmt: skip
        size = 1
        for key, values in space.items():
            where = f"tune.space.{name}.{key}"
            if not values:
                raise ConfigError(f"{where}: give at least one value")
            for v, value in enumerate(values):
                trial_stage(stages_raw, own[name], {key: value}, engines[own[name]], training, f"{where}[{v}]")
            size *= len(values)
        if tune.search == "grid" and size > tune.trials:
            raise ConfigError(f"tune.trials: the grid of stage {name} has {size} combinations, above the budget of "
                              f"{tune.trials}; raise tune.trials or use search: random")  # fmt: skip


def parse_stage(s: Any, where: str, seen: set[str], engine: EngineParams, training: Any = None,
                siblings: list | tuple = ()) -> StageConfig:  # fmt: skip
    """One entry of ``stages:`` (at ``where``, e.g. ``stages[2]``), validated: its keys, name, type,
    inputs among the ``seen`` stage names, plug-in target and params. ``siblings``: the whole list,
    to say when an input names a stage that comes later."""
    if not isinstance(s, dict):
        raise ConfigError(f"{where}: expected a mapping")
    for key in s:
        if key not in _STAGE_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(_STAGE_KEYS)})")
    for key in ("name", "type"):
        if key not in s:
            raise ConfigError(f"{where}.{key}: required key is missing")
    sname = _name(s["name"], f"{where}.name")
    where = f"{where} ({sname})"
    if sname in seen:
        raise ConfigError(f"{where}.name: duplicate stage name {sname!r}")
    stype = coerce(s["type"], str, f"{where}.type")
    if stype not in STAGE_TYPES:
        raise ConfigError(f"{where}.type: unknown stage type {stype!r} (known: {', '.join(STAGE_TYPES)})")
    inputs = coerce(s.get("inputs", []), list[str], f"{where}.inputs")
    for j, inp in enumerate(inputs):
        if inp not in seen:
            hint = "it comes later; stages run in order" if any(
                isinstance(o, dict) and o.get("name") == inp for o in siblings
            ) else f"known so far: {', '.join(sorted(seen)) or 'none'}"
            raise ConfigError(f"{where}.inputs[{j}]: unknown stage {inp!r} ({hint})")
    target = coerce(s.get("target"), str | None, f"{where}.target")
    cls = stage_class(stype, target, f"{where}.target")
    lo, hi = cls.min_inputs, cls.max_inputs
    if len(inputs) < lo or (hi is not None and len(inputs) > hi):
        want = f"exactly {lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}"
        raise ConfigError(f"{where}.inputs: a {stype} stage takes {want} input(s), got {len(inputs)}")
    if hasattr(cls, "build_params"):
        params = cls.build_params(s.get("params", {}), f"{where}.params", target)
    else:
        params = build(cls.Params, s.get("params", {}), f"{where}.params")
    for key, msg in cls.check_params(params, inputs):
        raise ConfigError(f"{where}.params.{key}: {msg}")
    check_stage_model(params, f"{where}.params", training)
    if "engine" in s and not cls.uses_engine:
        raise ConfigError(f"{where}.engine: a {stype} stage runs in the driver process whatever the engine (only "
                          "model stages - dense, cross_encoder, plugin, llm_rerank - run on an engine); remove it")  # fmt: skip
    use_cache = coerce(s.get("cache", True), bool, f"{where}.cache")
    tuned_on = None if s.get("tuned_on") is None else coerce(s["tuned_on"], str, f"{where}.tuned_on")
    return StageConfig(name=sname, type=stype, inputs=inputs, params=params, target=target, cache=use_cache,
                       engine=engine, tuned_on=tuned_on)  # fmt: skip


def _name(value: Any, where: str) -> str:
    name = coerce(value, str, where)
    if not NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}: {name!r} is not a valid name (letters, digits, '_', '-', '.'; starting with a "
                          "letter or digit; at most 100 characters): it names files and folders")  # fmt: skip
    return name
