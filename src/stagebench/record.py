"""The run record, typed: what ``manifest.json`` says about a run and about each of its stages.

This is the one module that knows the manifest's keys. A stage returns its run and what it did
besides (:class:`RerankStats`, :class:`LLMStats`, its runs at other depths); the pipeline makes a
:class:`StageRecord` of it and of how the run was obtained (computed or cached, seconds, memory),
and a :class:`Manifest` of the records, the resolved config, the evaluation settings, the
dataset's statistics and the machine. Everything that reads a results folder - ``table``,
``check``, ``compare``, ``show``, the report, :func:`stagebench.open` - reads these objects,
never a key by name. Written records read back as they were written (``to_json`` of
``from_json`` is the identity), so re-rendering a folder changes no byte of its manifest.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from stagebench.errors import StagebenchError
from stagebench.files import Owned, json_record
from stagebench.table import CEILING_MEASURE

#: the words an LLM stage's stats count its calls by (the record's vocabulary: the rerankers that
#: produce them import them from here): every call's outcome - ``low_mass`` is the label-reading
#: families' (:mod:`stagebench.llm.labels`) ...
OK, REPAIRED, FALLBACK, FAILED, LOW_MASS = "ok", "repaired", "fallback", "failed", "low_mass"
OUTCOMES = (OK, REPAIRED, FALLBACK, FAILED, LOW_MASS)
#: ... and the repairs :func:`stagebench.llm.listwise.parse_permutation` may make
REPAIRS = ("duplicate", "out_of_range", "missing")

MANIFEST = "manifest.json"
#: what a manifest must hold to be read
MANIFEST_KEYS = ("stagebench_version", "stages", "evaluation", "dataset", "config", "files")


def _depth_map(d: dict, cast: type) -> dict[int, Any]:
    return {int(k): cast(v) for k, v in d.items()}


@dataclass(frozen=True)
class RerankStats:
    """A pointwise reranker's pass: pairs scored and seconds, per depth (its ``top_n`` and ``depths``)."""

    kind: ClassVar[str] = "rerank"
    pairs: dict[int, int]
    seconds: dict[int, float]  # measured, or pro-rated by pairs from one pass at the deepest depth

    def to_json(self) -> dict:
        return {"kind": self.kind, "pairs": {str(n): v for n, v in self.pairs.items()},
                "seconds": {str(n): round(v, 3) for n, v in self.seconds.items()}}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> RerankStats:
        return cls(_depth_map(d.get("pairs", {}), int), _depth_map(d.get("seconds", {}), float))


@dataclass(frozen=True)
class Pricing:
    """What an LLM stage's tokens cost (a param that does not change its run, so not cached with it)."""

    price_per_1k_tokens: float | None
    cost: float | None  # tokens / 1000 * price; None: no price given


@dataclass(frozen=True)
class LLMStats:
    """An LLM reranker's calls (listwise: its windows): how each answer was read, tokens, retries
    and the model's time."""

    kind: ClassVar[str] = "llm"
    queries: int
    windows: int  # model calls (listwise: windows)
    outcomes: dict[str, int]  # ok / repaired / fallback / failed / low_mass -> calls
    repairs: dict[str, int]  # duplicate / out_of_range / missing -> windows that needed it
    prompt_tokens: int
    completion_tokens: int
    retries: int
    model_seconds: float  # the answers' request seconds summed (queue time included), computed now or read from the cache
    seconds_per_query: float  # the calls' wall time in this run, per query
    windows_from_cache: int
    candidates: int | None = None  # documents reranked (the pairs of the depth table)
    reproducibility: str | None = None
    pairs: dict[int, int] | None = None  # with depths: candidates per depth
    seconds: dict[int, float] | None = None  # with depths: model seconds per depth
    pricing: Pricing | None = None
    method: str = "listwise"  # listwise | pointwise | pairwise | setwise
    label_mass: float | None = None  # label families: the labels' mean share of the next-token probability
    wall_seconds: float | None = None  # the calls' wall time in this run (concurrent calls overlap)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def low_mass(self) -> int:
        """Label answers whose labels held less than half of the next-token probability."""
        return self.outcomes.get(LOW_MASS, 0)

    @property
    def ok(self) -> int:
        """Windows answered with a complete permutation."""
        return self.outcomes.get(OK, 0)

    @property
    def repaired(self) -> int:
        """Windows whose answer was repaired (duplicates or unknown ids dropped, missing ones appended)."""
        return self.outcomes.get(REPAIRED, 0)

    @property
    def fallback(self) -> int:
        """Windows whose answer held no usable ranking (they kept their input order)."""
        return self.outcomes.get(FALLBACK, 0)

    @property
    def failed(self) -> int:
        """Windows whose request failed after every retry (they kept their input order)."""
        return self.outcomes.get(FAILED, 0)

    def priced(self, price_per_1k_tokens: float | None) -> LLMStats:
        cost = None if price_per_1k_tokens is None else round(self.tokens / 1000 * price_per_1k_tokens, 6)
        return replace(self, pricing=Pricing(price_per_1k_tokens, cost))

    def to_json(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "queries": self.queries, "windows": self.windows, **self.outcomes,
                               "repairs": dict(self.repairs), "prompt_tokens": self.prompt_tokens,
                               "completion_tokens": self.completion_tokens, "retries": self.retries,
                               "model_seconds": round(self.model_seconds, 3),
                               "seconds_per_query": round(self.seconds_per_query, 3),
                               "windows_from_cache": self.windows_from_cache}  # fmt: skip
        if self.candidates is not None:
            out["candidates"] = self.candidates
        if self.reproducibility is not None:
            out["reproducibility"] = self.reproducibility
        if self.pairs is not None:
            out["pairs"] = {str(n): v for n, v in self.pairs.items()}
        if self.seconds is not None:
            out["seconds"] = {str(n): v for n, v in self.seconds.items()}
        if self.pricing is not None:
            out["price_per_1k_tokens"] = self.pricing.price_per_1k_tokens
            out["cost"] = self.pricing.cost
        if self.method != "listwise":
            out["method"] = self.method
        if self.label_mass is not None:
            out["label_mass"] = self.label_mass
        if self.wall_seconds is not None:
            out["wall_seconds"] = round(self.wall_seconds, 3)
        return out

    @classmethod
    def from_json(cls, d: dict) -> LLMStats:
        priced = "price_per_1k_tokens" in d or "cost" in d
        return cls(
            queries=int(d.get("queries", 0)), windows=int(d["windows"]), outcomes={k: int(d.get(k, 0)) for k in OUTCOMES},
            repairs={k: int(v) for k, v in d.get("repairs", dict.fromkeys(REPAIRS, 0)).items()},
            prompt_tokens=int(d["prompt_tokens"]), completion_tokens=int(d["completion_tokens"]),
            retries=int(d.get("retries", 0)), model_seconds=float(d.get("model_seconds", 0.0)),
            seconds_per_query=float(d.get("seconds_per_query", 0.0)), windows_from_cache=int(d.get("windows_from_cache", 0)),
            candidates=d.get("candidates"), reproducibility=d.get("reproducibility"),
            pairs=_depth_map(d["pairs"], int) if "pairs" in d else None,
            seconds=_depth_map(d["seconds"], float) if "seconds" in d else None,
            pricing=Pricing(d.get("price_per_1k_tokens"), d.get("cost")) if priced else None,
            method=str(d.get("method", "listwise")), label_mass=d.get("label_mass"),
            wall_seconds=None if d.get("wall_seconds") is None else float(d["wall_seconds"]),
        )  # fmt: skip


Stats = RerankStats | LLMStats
_STATS: dict[str, type[RerankStats] | type[LLMStats]] = {RerankStats.kind: RerankStats, LLMStats.kind: LLMStats}


def stats_from_json(d: dict | None, where: str) -> Stats | None:
    if d is None:
        return None
    if not isinstance(d, dict) or d.get("kind") not in _STATS:
        raise StagebenchError(f"{where}: stage stats of an unknown kind ({d.get('kind') if isinstance(d, dict) else d!r})")
    try:
        return _STATS[d["kind"]].from_json(d)
    except (KeyError, TypeError, ValueError) as exc:
        raise StagebenchError(f"{where}: unreadable stage stats ({type(exc).__name__}: {exc})") from None


def depth_run_name(stage: str, depth: int) -> str:
    """The name of a stage's run at an extra depth (its file: ``runs/<stage>@<depth>.trec``)."""
    return f"{stage}@{depth}"


@dataclass(frozen=True)
class StageRecord:
    """One stage of a run: what it is, how its run was obtained, what it did besides."""

    name: str
    type: str
    inputs: list[str]
    key: str  # its cache key
    reorders_input: bool  # a reranker: reorders the candidates of its one input
    candidate_depth: int | None  # a reranker's top_n
    status: str  # computed | cached
    seconds: float
    computed_seconds: float
    peak_rss_mb: float | None
    computed_peak_rss_mb: float | None
    run_digest: str
    stats: Stats | None = None
    depth_runs: list[str] = field(default_factory=list)  # its runs at other depths, by name
    #: milliseconds to serve each sampled query alone, warm (``None``: not measured); see
    #: :func:`stagebench.execute.measure_latency`
    latency_ms: dict[str, float] | None = None
    #: a model stage: what ran its model - device, precision and why, the CPU class that choice was made
    #: for, the model variant and the runtime (:meth:`stagebench.stages.neural.ModelStage.what_runs`)
    placement: dict[str, str] | None = None

    @property
    def is_reranker(self) -> bool:
        return self.reorders_input and bool(self.inputs)

    @property
    def depths(self) -> list[int]:
        return [int(n.rsplit("@", 1)[1]) for n in self.depth_runs]

    def to_json(self) -> dict:
        r3 = lambda v: round(v, 3) if isinstance(v, float) else v  # noqa: E731
        out: dict[str, Any] = {"name": self.name, "type": self.type, "inputs": list(self.inputs), "key": self.key,
                               "reorders_input": self.reorders_input, "candidate_depth": self.candidate_depth,
                               "status": self.status, "seconds": r3(self.seconds),
                               "computed_seconds": r3(self.computed_seconds), "peak_rss_mb": r3(self.peak_rss_mb),
                               "computed_peak_rss_mb": r3(self.computed_peak_rss_mb), "run_digest": self.run_digest}  # fmt: skip
        if self.stats is not None:
            out["stats"] = self.stats.to_json()
        if self.depth_runs:
            out["depth_runs"] = list(self.depth_runs)
        if self.latency_ms is not None:
            out["latency_ms"] = {q: round(v, 3) for q, v in self.latency_ms.items()}
        if self.placement is not None:
            out["placement"] = dict(self.placement)
        return out

    @classmethod
    def from_json(cls, d: dict, where: str) -> StageRecord:
        try:
            return cls(name=d["name"], type=d["type"], inputs=list(d["inputs"]), key=d.get("key", ""),
                       reorders_input=bool(d.get("reorders_input")), candidate_depth=d.get("candidate_depth"),
                       status=d.get("status", "computed"), seconds=d.get("seconds", 0.0),
                       computed_seconds=d.get("computed_seconds", d.get("seconds", 0.0)), peak_rss_mb=d.get("peak_rss_mb"),
                       computed_peak_rss_mb=d.get("computed_peak_rss_mb"), run_digest=d.get("run_digest", ""),
                       stats=stats_from_json(d.get("stats"), where), depth_runs=list(d.get("depth_runs", [])),
                       latency_ms=_latency(d.get("latency_ms"), where),
                       placement={str(k): str(v) for k, v in d["placement"].items()} if isinstance(d.get("placement"), dict) else None)  # fmt: skip
        except (KeyError, TypeError) as exc:
            raise StagebenchError(f"{where}: a stage record lacks {exc}") from None


@dataclass(frozen=True)
class EvaluationRecord:
    """How the stages were scored (the config's ``evaluation:`` section as the run resolved it)."""

    metrics: list[str]
    relevance_threshold: int
    gain: Any  # a gain name or a grade -> gain table
    baseline: str | None
    test: str
    alpha: float
    permutations: int
    bootstrap: int
    seed: int
    segments: tuple[str, ...] = ()  # the segments table's segmentations (built-in names and files)
    matrix: MatrixRecord | None = None  # the reranker-by-pool matrix the config asked for
    comparisons: tuple[str, ...] = ("inputs", "siblings", "baseline")  # the pairs tested (evaluation.comparisons)
    ceiling: str = CEILING_MEASURE  # the measure of the ceilings, the depth sweep and the matrix (evaluation.ceiling)

    @classmethod
    def from_json(cls, d: dict) -> EvaluationRecord:
        return cls(metrics=list(d["metrics"]), relevance_threshold=int(d["relevance_threshold"]), gain=d["gain"],
                   baseline=d.get("baseline"), test=d.get("test", "randomization"), alpha=float(d.get("alpha", 0.05)),
                   permutations=int(d.get("permutations", 10000)), bootstrap=int(d.get("bootstrap", 2000)),
                   seed=int(d.get("seed", 42)), segments=tuple(d.get("segments", ())),
                   matrix=MatrixRecord.from_json(d["matrix"]) if d.get("matrix") else None,
                   comparisons=tuple(d.get("comparisons", ("inputs", "siblings", "baseline"))),
                   ceiling=d.get("ceiling", CEILING_MEASURE))  # fmt: skip


@dataclass(frozen=True)
class MatrixRecord:
    """The reranker-by-pool matrix of a run (built by the config's ``matrix:`` expansion):
    ``cells[reranker][pool]`` is the stage that reranks that pool - the reranker itself over its own
    input, a copy named ``<reranker>_on_<pool>`` over every other pool."""

    rerankers: list[str]
    pools: list[str]
    cells: dict[str, dict[str, str]]
    oracle: str | None  # the oracle pool's stage, when one of the pools

    def to_json(self) -> dict:
        return {"rerankers": self.rerankers, "pools": self.pools, "cells": self.cells, "oracle": self.oracle}

    @classmethod
    def from_json(cls, d: dict) -> MatrixRecord:
        return cls(rerankers=list(d["rerankers"]), pools=list(d["pools"]), cells={r: dict(c) for r, c in d["cells"].items()},
                   oracle=d.get("oracle"))  # fmt: skip


@dataclass(frozen=True)
class DatasetRecord:
    """What the run's dataset was: its name, size, scope and the fingerprints that identify it."""

    name: str
    documents: int
    corpus_scope: str
    label_names: dict[int, str]  # grade -> label (E/S/C/I); empty: the dataset names none
    fingerprint: str | None  # corpus: ids + indexed texts
    queries_fingerprint: str | None
    qrels_fingerprint: str | None

    @classmethod
    def from_json(cls, d: dict) -> DatasetRecord:
        return cls(name=d["name"], documents=int(d["documents"]), corpus_scope=d["corpus_scope"],
                   label_names={int(k): v for k, v in d.get("label_names", {}).items()},
                   fingerprint=d.get("fingerprint"), queries_fingerprint=d.get("queries_fingerprint"),
                   qrels_fingerprint=d.get("qrels_fingerprint"))  # fmt: skip


@dataclass(frozen=True)
class JudgeRecord:
    """What the LLM judge did for a folder: who judged (its identity and settings), which pairs it
    was asked (the holes in every stage's top ``depth``, and a sample of judged pairs to measure its
    agreement), how its answers were read, and what it cost. Its grades are ``judgments`` (a file of
    the folder, verified like every other)."""

    params: dict  # the judge: section, resolved (an API key is never in it, only the variable's name)
    identity: dict  # the model (a server's own description) and the prompt's digest
    scale: dict[int, str]  # grade -> the label the judge answered with
    depth: int
    stages: list[str]  # the stages whose top depth was pooled
    holes: int  # unjudged pairs asked
    sample: int  # judged pairs asked, for the agreement (never shown the human label)
    outcomes: dict[str, int]  # ok / repaired / unusable / failed -> pairs
    from_cache: int
    prompt_tokens: int
    completion_tokens: int
    retries: int
    model_seconds: float  # the answers' compute time, whether computed now or read from the cache
    seconds: float  # wall time of the judge step in this run
    cost: float | None  # tokens / 1000 * price_per_1k_tokens; None: no price given
    reproducibility: str = ""
    judgments: str = "judge/judgments.tsv"

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["scale"] = {str(g): v for g, v in self.scale.items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> JudgeRecord:
        return cls(**{**{k: d[k] for k in cls.__dataclass_fields__ if k in d},
                      "scale": {int(g): v for g, v in d["scale"].items()}})  # fmt: skip


def _latency(raw: Any, where: str) -> dict[str, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                                            for v in raw.values()):  # fmt: skip
        raise StagebenchError(f"{where}: a stage's latency_ms is not a map of query ids to milliseconds")
    return {str(q): float(v) for q, v in raw.items()}


@dataclass(frozen=True)
class TunedBaseline:
    """A stage's tuned variant on the test queries: its params, where they were chosen, and per
    measure the default and tuned means with the Holm-corrected p of their paired test."""

    stage: str
    params: dict[str, Any]
    chosen_on: str
    measures: dict[str, dict[str, Any]]  # measure -> default, tuned, p_holm, significant
    folder: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> TunedBaseline:
        return cls(stage=d["stage"], params=dict(d["params"]), chosen_on=d["chosen_on"], measures=dict(d["measures"]),
                   folder=d["folder"])  # fmt: skip

    def beats(self) -> list[str]:
        """The measures on which the tuned variant is significantly better."""
        return [m for m, r in self.measures.items() if r["significant"] and r["tuned"] > r["default"]]


@dataclass
class Manifest:
    """A results folder's ``manifest.json``: the JSON object as written (``raw``, kept so that it is
    written back unchanged) and its typed views."""

    raw: dict
    path: Path | None = None

    @property
    def where(self) -> str:
        return str(self.path or MANIFEST)

    @property
    def version(self) -> str:
        return self.raw["stagebench_version"]

    @property
    def written_by(self) -> str:
        """The code that wrote the folder, as a line says it: the version and the commit (``+dirty`` where
        tracked files differed from it); folders written before commits were recorded say so."""
        code = self.raw.get("code")
        if not isinstance(code, dict) or "commit" not in code:
            return f"stagebench {self.version} (no commit recorded: written before issue 93)"
        if not code.get("commit"):
            return f"stagebench {self.version} (not from a git checkout)"
        return f"stagebench {self.version} at commit {code['commit'][:12]}{'+dirty' if code.get('dirty') else ''}"

    @property
    def name(self) -> str:
        """The config's name."""
        return (self.raw.get("config") or {}).get("name", "")

    @property
    def config_path(self) -> str | None:
        return self.raw.get("config_path")

    @property
    def config(self) -> dict:
        """The config as the user wrote it."""
        return self.raw.get("config") or {}

    @property
    def dataset_source(self) -> tuple[str, str | None]:
        """The config's dataset loader and where it read from (``path``, or ``id`` for ir_datasets)."""
        ds = self.config.get("dataset") or {}
        return str(ds.get("loader") or ""), ds.get("path") or ds.get("id")

    @property
    def tuned_on(self) -> list[tuple[str, str]]:
        """Each stage whose config says where its params were tuned (``tuned_on``), with that dataset."""
        return [(str(s.get("name")), str(s["tuned_on"])) for s in self.config.get("stages") or []
                if isinstance(s, dict) and s.get("tuned_on")]  # fmt: skip

    @property
    def stages(self) -> list[StageRecord]:
        return [StageRecord.from_json(s, self.where) for s in self.raw["stages"]]

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    @property
    def evaluation(self) -> EvaluationRecord:
        return EvaluationRecord.from_json(self.raw["evaluation"])

    @property
    def dataset(self) -> DatasetRecord:
        return DatasetRecord.from_json(self.raw["dataset"])

    @property
    def judge(self) -> JudgeRecord | None:
        """The LLM judge's record (None: no judge was run on this folder)."""
        j = self.raw.get("judge")
        return None if j is None else JudgeRecord.from_json(j)

    def with_judge(self, record: JudgeRecord) -> Manifest:
        return Manifest({**self.raw, "judge": record.to_json()}, self.path)

    @property
    def tuned_baselines(self) -> list[TunedBaseline]:
        """What ``stagebench tune`` had found for this run's stages when it ran (stagebench.results.baselines)."""
        return [TunedBaseline.from_json(d) for d in self.raw.get("tuned_baselines", [])]

    def with_tuned_baselines(self, found: list[TunedBaseline]) -> Manifest:
        return Manifest({**self.raw, "tuned_baselines": [b.to_json() for b in found]}, self.path)

    @property
    def files(self) -> dict[str, str]:
        """Every file the run wrote into the folder (relative path) -> its sha256."""
        return self.raw["files"]

    @property
    def wall_seconds(self) -> float | None:
        return self.raw.get("wall_seconds")

    @property
    def recorded_files(self) -> dict[str, str]:
        """The files recorded so far (none in a manifest not yet written)."""
        return self.raw.get("files", {})

    def with_files(self, files: dict[str, str]) -> Manifest:
        return Manifest({**self.raw, "files": files}, self.path)

    def finished(self, finished: str, wall_seconds: float, peak_rss_mb: float) -> Manifest:
        return Manifest({**self.raw, "finished": finished, "wall_seconds": wall_seconds,
                         "peak_rss_mb_process": peak_rss_mb}, self.path)  # fmt: skip

    def dumps(self) -> str:
        return json.dumps(self.raw, indent=2, default=str) + "\n"

    @classmethod
    def new(cls, *, version: str, config_path: str, config: dict, resolved: dict, evaluation: dict, cache: dict,
            started: str, python: str, platform: str, machine: dict, packages: dict, dataset: dict,
            stages: list[StageRecord], code: dict | None = None) -> Manifest:  # fmt: skip
        """A finished run's record (``files`` and the end times are added when the folder is written);
        ``code``: the commit of the source tree that wrote it (:func:`stagebench.runtime.system.code_commit`)."""
        return cls({"complete": True, "stagebench_version": version, "code": code or {"commit": None, "dirty": None},
                    "config_path": config_path, "config": config,
                    "resolved": resolved, "evaluation": evaluation, "cache": cache, "started": started,
                    "python": python, "platform": platform, "machine": machine, "packages": packages,
                    "dataset": dataset, "stages": [s.to_json() for s in stages]})  # fmt: skip

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        """A results folder's manifest; absent, unreadable or not stagebench's is one clear error."""
        mpath = folder / MANIFEST
        if not mpath.is_file():
            raise StagebenchError(f"{folder}: not a stagebench results folder (no {MANIFEST})")
        try:
            raw = json.loads(mpath.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise StagebenchError(f"{mpath}: not a readable stagebench manifest ({exc})") from None
        if not isinstance(raw, dict) or "stagebench_version" not in raw or not isinstance(raw.get("stages"), list):
            raise StagebenchError(f"{mpath}: not a stagebench manifest (no stagebench_version / stages)")
        if not isinstance(raw.get("files"), dict):
            raise StagebenchError(f"{mpath}: written by an older stagebench ({raw['stagebench_version']}) that recorded "
                                  "no file digests, so nothing in the folder can be verified; run its config again into "
                                  "a new folder")  # fmt: skip
        missing = [k for k in MANIFEST_KEYS if k not in raw]
        if missing:
            raise StagebenchError(f"{mpath}: not a complete stagebench manifest (no {', '.join(missing)})")
        m = cls(raw, mpath)
        try:
            m.stages, m.evaluation, m.dataset, m.judge  # noqa: B018 - every record readable, or one error now
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StagebenchError(f"{mpath}: not a readable stagebench manifest ({type(exc).__name__}: {exc})") from None
        return m


#: the record of a tuning folder (``stagebench tune``), and the rule for replacing one: every file in it
#: is one ``tuning.json`` lists
TUNING_RECORD = "tuning.json"
TUNED = Owned("tuning folder", TUNING_RECORD, json_record(TUNING_RECORD, "a tuning folder"))
#: the record of a model folder ``stagebench train-reranker`` wrote, and the rule for replacing one
TRAINING_RECORD = "stagebench_training.json"
MODEL = Owned("trained model", TRAINING_RECORD, json_record(TRAINING_RECORD, "a model folder stagebench trained"))


__all__ = ["MODEL", "TRAINING_RECORD", "TUNED", "TUNING_RECORD", "DatasetRecord", "EvaluationRecord", "JudgeRecord", "LLMStats", "MANIFEST", "MANIFEST_KEYS", "Manifest", "Pricing", "RerankStats",
           "StageRecord", "Stats", "depth_run_name", "stats_from_json"]

