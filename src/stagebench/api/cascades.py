"""Stages and models written in Python: :func:`stage` and ``>>`` compose a :class:`Cascade` (the same run as
its YAML), :func:`load_dataset` reads a dataset section, :func:`cross_encoder` and :func:`bi_encoder` load
a model alone, placed as a stage would place it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagebench.api.result import Result, run
from stagebench.cache import Cache, cache_root
from stagebench.config import parse_stage
from stagebench.data import DatasetConfig, parse_dataset
from stagebench.data.dataset import Dataset
from stagebench.errors import ConfigError, DataError
from stagebench.execute import StageRun, canonical, context, make_stage, run_in
from stagebench.models.encoders import BiEncoder, CrossEncoderModel, load_bi_encoder, load_cross_encoder
from stagebench.models.resolve import ResolvedModel, resolve_model
from stagebench.models.variants import for_placement, onnx_kind
from stagebench.pipeline import read_dataset
from stagebench.runs import checked_run, run_digest
from stagebench.runtime.devices import Placement, place
from stagebench.runtime.engine import EngineParams


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
                  precision: str = "auto", max_length: int = 512, streams: str | int = "auto") -> CrossEncoderModel:  # fmt: skip
    """A cross-encoder as the ``cross_encoder`` stage loads it (resolved name, device, precision and
    streams chosen the same way): ``.predict([(query, text), ...], batch_size)`` -> one logit per pair."""
    return load_cross_encoder(*_placed(model, source, device, precision, "cross_encoder"), max_length, streams)


def bi_encoder(model: str = "sentence-transformers/all-MiniLM-L6-v2", *, source: str = "auto", device: str = "auto",
               precision: str = "auto", max_length: int | None = None, streams: str | int = "auto") -> BiEncoder:  # fmt: skip
    """A bi-encoder as the ``dense`` stage loads it: ``.encode(texts, batch_size)`` -> unit-length
    float32 vectors, one row per text."""
    return load_bi_encoder(*_placed(model, source, device, precision, "bi_encoder"), max_length, streams)
