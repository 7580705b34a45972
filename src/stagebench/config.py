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

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagebench.errors import ConfigError, StagebenchError
from stagebench.metrics.names import GAINS, Measure, parse_measure

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
    relevance_threshold: int = 1
    gain: str = "linear"
    baseline: str | None = None  # the stage others are compared with (default: the first)
    test: str = "randomization"  # which test marks significance: randomization | ttest
    alpha: float = 0.05
    permutations: int = 10000  # randomization test
    bootstrap: int = 2000  # bootstrap resamples for the 95% confidence intervals
    seed: int = 42

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if self.gain not in GAINS:
            errs.append(("gain", f"must be one of {', '.join(GAINS)}, got {self.gain!r}"))
        if self.test not in ("randomization", "ttest"):
            errs.append(("test", f"must be 'randomization' or 'ttest', got {self.test!r}"))
        if not 0 < self.alpha < 1:
            errs.append(("alpha", "must be between 0 and 1"))
        if self.permutations < 100 or self.bootstrap < 100:
            errs.append(("permutations", "permutations and bootstrap must be >= 100"))
        return errs


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
    training: Any = None  # stagebench.training.TrainingConfig, for `stagebench train-reranker`


# --------------------------------------------------------------------------- coercion


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check/convert ``value`` against a type hint; raise ConfigError naming ``where``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: must be one of {list(typing.get_args(tp))}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        (item_t,) = typing.get_args(tp) or (Any,)
        return [coerce(v, item_t, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {value!r}")
        kt, vt = typing.get_args(tp) or (Any, Any)
        return {coerce(k, kt, f"{where}") : coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    raise ConfigError(f"{where}: unsupported type {_type_name(tp)}")  # pragma: no cover


def build(cls: type, mapping: Any, where: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping: unknown keys, missing keys and wrong
    types are errors naming ``where.key``; then ``cls.validate()`` (if any) is applied."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(mapping).__name__} {mapping!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in mapping:
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        if name in mapping:
            kwargs[name] = coerce(mapping[name], hints[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}.{name}: required key is missing")
    obj = cls(**kwargs)
    if hasattr(obj, "validate"):
        for key, msg in obj.validate():
            raise ConfigError(f"{where}.{key}: {msg}")
    return obj


# --------------------------------------------------------------------------- loading

_TOP_KEYS = ("name", "output", "cache_dir", "dataset", "stages", "evaluation", "training")
_STAGE_KEYS = ("name", "type", "inputs", "params", "target", "cache")


def read_yaml(path: str | Path, what: str = "config file") -> Any:
    """Parse a YAML file; a missing file or a syntax error is a ConfigError naming file and line."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: {what} not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{at} invalid YAML ({getattr(exc, 'problem', exc)})") from None


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
    from stagebench.data import LOADERS
    from stagebench.stages import STAGE_TYPES, stage_class

    if not isinstance(raw, dict):
        raise ConfigError("top level: expected a mapping")
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{key}: unknown key (known: {', '.join(_TOP_KEYS)})")
    for key in ("name", "dataset", "stages"):
        if key not in raw:
            raise ConfigError(f"{key}: required key is missing")
    name = coerce(raw["name"], str, "name")
    training = None
    if raw.get("training") is not None:
        from stagebench.training import TrainingConfig

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
        sname = coerce(s["name"], str, f"{where}.name")
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


def check_stage_model(params: Any, where: str, training: Any = None) -> None:
    """A stage's ``model``/``source`` must resolve (local folder, carrier or hub) when the config
    is loaded, so an unknown name fails before any stage runs. The one exception: the folder
    this config's ``training:`` section writes, which may not exist before training."""
    from stagebench.models import check_model

    if not hasattr(params, "model") or not hasattr(params, "source"):
        return
    if training is not None and training.produces(params.model):
        return
    for key, msg in check_model(params.model, params.source):
        raise ConfigError(f"{where}.{key}: {msg}")
