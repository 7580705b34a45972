"""Typed, validated configuration.

A config is one YAML file::

    name: default                 # run name; results go to <output>
    output: results/default
    cache_dir: .stagebench-cache  # stage runs, embeddings, indexes ($STAGEBENCH_CACHE overrides)
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

Relative paths are resolved against the working directory. Every error names the
file and the key path (``configs/x.yaml: stages[1].inputs: unknown stage 'bm52'``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from stagebench.data import LOADERS
from stagebench.errors import ConfigError, StagebenchError
from stagebench.metrics.names import Measure, parse_measure
from stagebench.models import check_model
from stagebench.params import Fraction, NonNegativeInt, PositiveInt, Probability, Range, Seed, build, coerce, read_yaml
from stagebench.stages import STAGE_TYPES, stage_class

DEFAULT_METRICS = ("nDCG@10", "RR@10", "R@100")


@dataclass
class DatasetConfig:
    loader: str
    options: Any


@dataclass
class StageConfig:
    name: str
    type: str
    inputs: list[str]
    params: Any
    target: str | None = None  # plug-in target "package.module:Class" (type: plugin)
    cache: bool = True  # false: always recompute this stage (and do not store its run)


@dataclass
class EvaluationConfig:
    metrics: list[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    relevance_threshold: PositiveInt = 1  # grade >= this is relevant for binary measures (0 = "not relevant")
    gain: Literal["linear", "exp"] = "linear"
    baseline: str | None = None  # the stage others are compared with (default: the first)
    test: Literal["randomization", "ttest"] = "randomization"  # which test marks significance
    alpha: Probability = 0.05
    permutations: Annotated[int, Range(ge=100)] = 10000  # randomization test
    bootstrap: Annotated[int, Range(ge=100)] = 2000  # bootstrap resamples for the 95% confidence intervals
    seed: Seed = 42


@dataclass
class NegativesConfig:
    judged: bool = True  # the judged products of each query, with their mapped labels
    from_stage: str | None = "bm25"  # a stage of this config without inputs, run over the train queries
    per_query: NonNegativeInt = 8  # hard negatives per query, sampled among ...
    depth: PositiveInt = 50  # ... the unjudged documents in the top `depth` of that stage's run
    skip_top: NonNegativeInt = 0  # ignore the first N unjudged (they are the likeliest false negatives)


@dataclass
class TrainingConfig:
    base_model: str = "cross-encoder/ms-marco-MiniLM-L-12-v2"
    source: str = "auto"
    output: str = "models/reranker"
    split: str = "train"
    max_queries: PositiveInt | None = None
    dev_queries: NonNegativeInt = 100
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    labels: dict[str, float] = field(default_factory=lambda: {"E": 1.0, "S": 0.1, "C": 0.01, "I": 0.0})
    unjudged_label: float = 0.0
    loss: Literal["bce", "mse", "lambda"] = "bce"  # pointwise BCE | pointwise MSE | listwise LambdaLoss
    epochs: PositiveInt = 1
    batch_size: PositiveInt = 16
    max_length: PositiveInt = 96
    learning_rate: Probability = 2e-5
    warmup_ratio: Fraction = 0.1
    seed: Seed = 12
    early_stopping_patience: PositiveInt | None = None  # epochs without dev nDCG@10 gain before stopping

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if not self.labels:
            errs.append(("labels", "needs at least one grade -> target"))
        if not errs:  # the base model must be loadable before any training step
            errs += check_model(self.base_model, self.source)
            errs = [("base_model" if k == "model" else k, m) for k, m in errs]
        return errs

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


# --------------------------------------------------------------------------- loading

#: config and stage names become file and folder names: no separators, no "..", no whitespace
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

_TOP_KEYS = ("name", "output", "cache_dir", "dataset", "stages", "evaluation", "training")
_STAGE_KEYS = ("name", "type", "inputs", "params", "target", "cache")


def load_config(path: str | Path) -> Config:
    """Load and validate a YAML config file."""
    path = Path(path)
    raw = read_yaml(path)
    try:
        return parse_config(raw, str(path))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(raw: Any, path: str = "<config>") -> Config:
    """Validate a config mapping; errors are ``key.path: message`` (the caller adds the file)."""

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

    ds_raw = raw["dataset"]
    if not isinstance(ds_raw, dict):
        raise ConfigError("dataset: expected a mapping")
    loader = ds_raw.get("loader")
    if loader not in LOADERS:
        raise ConfigError(f"dataset.loader: unknown loader {loader!r} (known: {', '.join(LOADERS)})")
    options = build(LOADERS[loader].options, {k: v for k, v in ds_raw.items() if k != "loader"}, "dataset")
    dataset = DatasetConfig(loader=loader, options=options)

    stages_raw = raw["stages"]
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ConfigError("stages: expected a non-empty list")
    stages: list[StageConfig] = []
    seen: set[str] = set()
    for i, s in enumerate(stages_raw):
        where = f"stages[{i}]"
        if not isinstance(s, dict):
            raise ConfigError(f"{where}: expected a mapping")
        for key in s:
            if key not in _STAGE_KEYS:
                raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(_STAGE_KEYS)})")
        for key in ("name", "type"):
            if key not in s:
                raise ConfigError(f"{where}.{key}: required key is missing")
        sname = _name(s["name"], f"{where}.name")
        where = f"stages[{i}] ({sname})"
        if sname in seen:
            raise ConfigError(f"{where}.name: duplicate stage name {sname!r}")
        stype = coerce(s["type"], str, f"{where}.type")
        if stype not in STAGE_TYPES:
            raise ConfigError(f"{where}.type: unknown stage type {stype!r} (known: {', '.join(STAGE_TYPES)})")
        inputs = coerce(s.get("inputs", []), list[str], f"{where}.inputs")
        for j, inp in enumerate(inputs):
            if inp not in seen:
                hint = "it comes later; stages run in order" if any(
                    isinstance(o, dict) and o.get("name") == inp for o in stages_raw
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
        use_cache = coerce(s.get("cache", True), bool, f"{where}.cache")
        stages.append(StageConfig(name=sname, type=stype, inputs=inputs, params=params, target=target, cache=use_cache))
        seen.add(sname)

    evaluation = build(EvaluationConfig, raw.get("evaluation", {}), "evaluation")
    measures = []
    for j, m in enumerate(evaluation.metrics):
        try:
            measures.append(parse_measure(m))
        except StagebenchError as exc:
            raise ConfigError(f"evaluation.metrics[{j}]: {exc}") from None
    if len({m.name for m in measures}) != len(measures):
        raise ConfigError("evaluation.metrics: duplicate measure")
    if evaluation.baseline is not None and evaluation.baseline not in seen:
        raise ConfigError(f"evaluation.baseline: unknown stage {evaluation.baseline!r}")
    if training is not None:
        training.check_against(stages)
    return Config(
        name=name, dataset=dataset, stages=stages, evaluation=evaluation, measures=measures,
        output=output, cache_dir=cache_dir, path=path, raw=raw, training=training,
    )  # fmt: skip


def _name(value: Any, where: str) -> str:
    name = coerce(value, str, where)
    if not NAME_RE.match(name):
        raise ConfigError(f"{where}: {name!r} is not a valid name (letters, digits, '_', '-', '.'; starting with a "
                          "letter or digit; at most 100 characters): it names files and folders")  # fmt: skip
    return name


def check_stage_model(params: Any, where: str, training: Any = None) -> None:
    """A stage's ``model``/``source`` must resolve (local folder, carrier or hub) when the config
    is loaded, so an unknown name fails before any stage runs. The one exception: the folder
    this config's ``training:`` section writes, which may not exist before training."""

    if not hasattr(params, "model") or not hasattr(params, "source"):
        return
    if training is not None and training.produces(params.model):
        return
    for key, msg in check_model(params.model, params.source):
        raise ConfigError(f"{where}.{key}: {msg}")
