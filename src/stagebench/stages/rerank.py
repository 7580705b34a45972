"""Reranking stages: the built-in cross-encoder and user plug-ins, one mechanism.

Both take one input run, rerank the top ``top_n`` documents of every query with a
:class:`stagebench.rerankers.Reranker`, and return **every** candidate of the input:

* the reranked head, ordered by the reranker's scores (optionally passed through a
  sigmoid), then
* the unreranked tail in its original order, with scores strictly below the lowest head
  score whatever the sign of the scores (``tail_j = min(head) - 1 - j``).

A reranker with ``score_pairs`` scores each query's candidates in **rank bands on a fixed grid**
(:data:`BAND_EDGES`: ranks 1-10, 11-20, 21-50, 51-100, 101-200, 201-500, ...; a band longer than
``pairs_per_call`` is cut in pieces of that size), one call per band. A pair's score thus never
depends on how deep the stage reranks: the pairs scored for depth 200 include, with the same
scores, those for 10, 20, 50 and 100. It matters in practice: the bundled INT8 cross-encoder
quantizes activations per batch, and one pair's logit moved by up to 0.41 when its batch mates
changed. With ``depths: [10, 20, 50, 100, 200]`` the stage scores the largest depth once and
derives the run at each depth by reordering only the top N (the tail kept below), exactly the run
``top_n: N`` gives; its own ``top_n`` run is the stage's output. A reranker with only
``score(query, docs)`` (or ``per_query: true``) is called once per query with its whole head, and
once per depth: its scores may depend on the list it is shown.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from stagebench.cache import module_source_hash
from stagebench.devices import HardwareParams
from stagebench.errors import ConfigError, StagebenchError
from stagebench.finetune import Fitted, TrainingData, fine_tune
from stagebench.params import PositiveFloat, PositiveInt, build, param
from stagebench.rerankers import CrossEncoderReranker, check_kwargs, import_target
from stagebench.runs import Run, ranked, ranked_ids
from stagebench.models import resolve_model
from stagebench.stages.base import ModelStage, Stage, StageContext

log = logging.getLogger("stagebench")


#: rank-band edges of the scoring grid; beyond the last edge the bands go on growing x2, x2.5, x2
BAND_EDGES = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def band_edges(n: int) -> list[tuple[int, int]]:
    """The grid's bands ``[lo, hi)`` covering ranks ``[0, n)``."""
    edges, k = list(BAND_EDGES), 0
    while edges[-1] < n:
        edges.append(edges[-1] * (2 if k % 3 != 1 else 5) // (1 if k % 3 != 1 else 2))
        k += 1
    out, lo = [], 0
    for e in edges:
        if lo >= n:
            break
        out.append((lo, min(e, n)))
        lo = e
    return out


@dataclass
class RerankCommon:
    top_n: PositiveInt = param(50, "candidates reranked per query; the rest keep their order below")
    activation: Literal["none", "sigmoid"] = param("none", "sigmoid maps scores to (0, 1); the order stays the logits'")
    pairs_per_call: PositiveInt = param(512, "most pairs per score_pairs call (a query's rank bands 1-10, 11-20, 21-50, "
                                        "...; longer bands are cut in pieces of this size)")  # fmt: skip
    per_query: bool = param(False, "call score(query, docs) once per query with its whole head (slower; for comparison)")
    depths: list[PositiveInt] | None = param(None, "also derive the run at each of these depths from one scoring pass "
                                             "at the largest (the depth table; docs/report.md)")  # fmt: skip
    tail: Literal["below", "scaled_input"] = param("below", "below: the candidates past top_n stay strictly below the "
                                                   "head; scaled_input: they keep their input score x tail_scale, as "
                                                   "search-ranking-stack does (they can rise above negative head "
                                                   "scores; docs/reproductions.md)")  # fmt: skip
    tail_scale: PositiveFloat = param(0.01, "tail: scaled_input: the factor")

    def validate(self) -> list[tuple[str, str]]:
        if self.depths is not None:
            if not self.depths:
                return [("depths", "give at least one depth, or leave it out")]
            if len(set(self.depths)) != len(self.depths):
                return [("depths", f"{self.depths}: a depth is listed twice")]
        if self.tail == "below" and self.tail_scale != 0.01:
            return [("tail_scale", "applies to tail: scaled_input")]
        return []


@dataclass
class CrossEncoderParams(RerankCommon, HardwareParams):
    model: str = param("cross-encoder/ms-marco-MiniLM-L-12-v2", "a public name, a local folder (e.g. a fine-tuned model) or a hub id")
    source: str = param("auto", "where the model comes from: auto | bundled | hub (docs/models.md)")
    max_length: PositiveInt = param(256, "tokens of query + document; longer pairs are truncated")
    batch_size: PositiveInt = param(32, "pairs per model batch")
    # model/source are checked by the config loader (stagebench.config.parse_config)


def merge_head_tail(head: dict[str, float], tail: list[str]) -> dict[str, float]:
    """Head scores as given; tail documents strictly below, in the given order."""
    out = dict(head)
    if not tail:
        return out
    base = min(head.values()) if head else 0.0
    scores = [base - 1.0 - j for j in range(len(tail))]
    if len(set(scores)) < len(scores) or scores[0] >= base:  # float precision ran out (|base| ~ 1e16)
        ordered = [d for d, _ in ranked(head)] + tail
        return {d: float(len(ordered) - i) for i, d in enumerate(ordered)}
    out.update(zip(tail, scores))
    return out


def split_head(run: Run, top_n: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each query's ranked doc ids split into the head a reranker reorders (the top ``top_n``)
    and the tail it keeps in order below."""
    heads: dict[str, list[str]] = {}
    tails: dict[str, list[str]] = {}
    for qid, docs in run.items():
        order = ranked_ids(docs)
        heads[qid], tails[qid] = order[:top_n], order[top_n:]
    return heads, tails


def sigmoid_keeping_order(logits: np.ndarray) -> np.ndarray:
    """sigmoid(logits), except where it saturates: two different logits whose sigmoids round
    to the same float (1.0 for every logit above about 37) would become a false tie that the
    tie rule then breaks by doc id. There the lower one is moved down by the smallest step a
    float allows, so the order is exactly the logits' order; equal logits stay tied."""
    x = np.asarray(logits, dtype=np.float64)
    out = 1.0 / (1.0 + np.exp(-x))
    order = np.argsort(-x, kind="stable")
    for a, b in zip(order[:-1], order[1:]):
        if x[b] < x[a] and out[b] >= out[a]:
            out[b] = np.nextafter(out[a], -np.inf)
        elif x[b] == x[a]:
            out[b] = out[a]
    return out


class ScoreTask:
    """An engine task (:mod:`stagebench.engine`): one unit of a reranking stage -> its raw scores.

    A unit is ``(qids, query_texts, doc_inputs)`` of one ``score_pairs`` call (``batched``) or of
    one query's ``score(query, docs)`` call. ``factory`` builds the reranker, once per process, on
    first use; it must be picklable for the Ray engine (a class and its arguments, a partial)."""

    def __init__(self, factory: Callable[[], Any], batched: bool, stage: str, label: str, loaded: Any = None,
                 wants_fields: bool = False) -> None:  # fmt: skip
        self.factory, self.batched, self.stage, self.label = factory, batched, stage, label
        self.wants_fields = wants_fields
        self._reranker: Any = loaded  # already built here (the local engine), or None

    @classmethod
    def of(cls, reranker: Any, per_query: bool, stage: str, label: str, factory: Callable[[], Any] | None = None,
           kind: Any = None) -> ScoreTask:  # fmt: skip
        """The task of a reranker object (``kind``: the class, when only the class is at hand): batched
        when it has ``score_pairs``, unless ``per_query`` or it ``wants_fields``."""
        kind = reranker if kind is None else kind
        wants_fields = bool(getattr(kind, "wants_fields", False))
        batched = callable(getattr(kind, "score_pairs", None)) and not per_query and not wants_fields
        return cls(factory or (lambda: reranker), batched, stage, label, reranker, wants_fields)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reranker": None}

    @property
    def reranker(self) -> Any:
        if self._reranker is None:
            self._reranker = self.factory()
        return self._reranker

    def __call__(self, unit: tuple[list[str], list[str], list[Any]]) -> Any:
        qids, queries, docs = unit
        method = "score_pairs" if self.batched else "score"
        try:
            if self.batched:
                return self.reranker.score_pairs(list(zip(queries, docs)))
            return self.reranker.score(queries[0], docs)
        except (StagebenchError, MemoryError):  # out of memory is the machine's, not the plug-in's: said as such
            raise
        except Exception as exc:
            raise _failed(self.stage, self.label, method, list(dict.fromkeys(qids)), exc) from exc


@dataclass
class Reranked:
    """A reranking stage's output: its ``top_n`` run, and the run at each extra depth with the pairs
    each needed and the seconds they took (measured, or pro-rated by pairs from one pass)."""

    run: Run
    depths: dict[int, Run]
    pairs: dict[int, int]
    seconds: dict[int, float]


def rerank_run(run: Run, reranker: Any, ctx: StageContext, p: RerankCommon, stage: str, label: str) -> Run:
    """Rerank each query's top ``p.top_n`` of ``run`` with ``reranker`` (a :class:`ScoreTask`, whose
    units run on ``ctx.engine``, or a reranker object, run here)."""
    return rerank_depths(run, reranker, ctx, p, stage, label).run


def rerank_depths(run: Run, reranker: Any, ctx: StageContext, p: RerankCommon, stage: str, label: str) -> Reranked:
    """:func:`rerank_run` at ``p.top_n`` and at every depth of ``p.depths`` (see the module docstring)."""
    ds = ctx.dataset
    task = reranker if isinstance(reranker, ScoreTask) else ScoreTask.of(reranker, p.per_query, stage, label)
    wants_fields = task.wants_fields

    def doc_input(d: str):
        text = ds.doc_text.get(d, "")
        return {"id": d, "text": text, **ds.corpus.get(d, {})} if wants_fields else text

    depths = sorted({p.top_n, *(p.depths or ())})
    deepest = depths[-1]
    heads, tails = split_head(run, deepest)
    qids = [q for q in run if heads[q]]

    def unit(chunk: list[tuple[str, str]]):
        return [q for q, _ in chunk], [ds.queries[q] for q, _ in chunk], [doc_input(d) for _, d in chunk]

    def score(chunks: list[list[tuple[str, str]]], what: str) -> dict[tuple[str, str], float]:
        got = ctx.engine.map(task, [unit(c) for c in chunks], desc=f"{stage}: {what}", unit="pair",
                             sizes=[len(c) for c in chunks])  # fmt: skip
        out: dict[tuple[str, str], float] = {}
        for g, c in zip(got, chunks):
            out.update(zip(c, _check_scores(g, c, stage, label).tolist()))
        return out

    pairs = {n: sum(min(n, len(heads[q])) for q in qids) for n in depths}
    seconds: dict[int, float] = {}
    per_depth: dict[int, dict[tuple[str, str], float]] = {}
    t0 = time.perf_counter()
    if task.batched:  # one pass at the deepest depth, in rank bands
        chunks = []
        for q in qids:
            for lo, hi in band_edges(len(heads[q])):
                band = [(q, d) for d in heads[q][lo:hi]]
                chunks += [band[i : i + p.pairs_per_call] for i in range(0, len(band), p.pairs_per_call)]
        scores = score(chunks, "rerank" if len(depths) == 1 else f"rerank (depths {', '.join(map(str, depths))})")
        dt = time.perf_counter() - t0
        for n in depths:
            per_depth[n] = scores
            seconds[n] = dt * pairs[n] / max(pairs[deepest], 1)
    else:  # the whole head shown at once: its scores may depend on it, so one call per query and depth
        for n in depths:
            t1 = time.perf_counter()
            per_depth[n] = score([[(q, d) for d in heads[q][:n]] for q in qids], f"rerank top {n}")
            seconds[n] = time.perf_counter() - t1
        dt = time.perf_counter() - t0
    scored = pairs[deepest] if task.batched else sum(pairs.values())
    sweep = "" if len(depths) == 1 else f"; depths {', '.join(map(str, depths))}" + (" from one pass" if task.batched else "")
    log.info("stage %s: reranked %d pairs (%d queries, top %d%s) in %.1fs: %.0f pairs/s (%s%s)", stage, scored,
             len(qids), p.top_n, sweep, dt, scored / max(dt, 1e-9),
             "rank bands of each query" if task.batched else "one query at a time",
             "; on Ray" if ctx.engine.remote else "")  # fmt: skip
    runs: dict[int, Run] = {}
    for n in depths:
        result: Run = {}
        for qid, docs in run.items():
            order = heads[qid] + tails[qid]  # split_head covers every query of the run
            head, tail = order[:n], order[n:]
            s = np.asarray([per_depth[n][(qid, d)] for d in head], dtype=np.float64)
            if p.activation == "sigmoid":
                s = sigmoid_keeping_order(s)
            if p.tail == "scaled_input":  # the published setup some pipelines use (not order-safe)
                result[qid] = {**dict(zip(head, s.tolist())), **{d: docs[d] * p.tail_scale for d in tail}}
            else:
                result[qid] = merge_head_tail(dict(zip(head, s.tolist())), tail)
        runs[n] = result
    return Reranked(runs[p.top_n], {n: r for n, r in runs.items() if p.depths and n in p.depths}, pairs, seconds)


def _failed(stage: str, label: str, method: str, queries: list[str], exc: Exception) -> StagebenchError:
    """A reranker that raised: one line naming the stage, the call and the query (or queries)."""
    which = f"query {queries[0]!r}" if len(queries) == 1 else \
        f"a batch of {len(queries)} queries ({queries[0]!r} ... {queries[-1]!r})"  # fmt: skip
    return StagebenchError(f"stage {stage}: {label} raised in {method}() on {which}: {type(exc).__name__}: {exc}")


def _check_scores(got: Any, chunk: list[tuple[str, str]], stage: str, label: str) -> np.ndarray:
    try:
        arr = np.asarray(got, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise StagebenchError(f"stage {stage}: {label} returned scores that are not numbers ({exc})") from exc
    if arr.shape[0] != len(chunk):
        raise StagebenchError(
            f"stage {stage}: {label} returned {arr.shape[0]} scores for {len(chunk)} documents (query {chunk[0][0]!r})"
        )
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        q, d = chunk[int(bad[0])]
        raise StagebenchError(f"stage {stage}: {label} returned {arr[bad[0]]} for query {q!r} document {d!r}")
    return arr


class DepthsMixin:
    """Records a reranking pass's runs at extra depths (``side_runs``) and its pairs and seconds per
    depth (``stats``), which the cache and the manifest keep with the stage's run."""

    def keep(self, r: Reranked) -> Run:
        self.side_runs = {depth_run_name(self.name, n): run for n, run in r.depths.items()}  # type: ignore[attr-defined]
        self.stats = {"kind": "rerank", "pairs": {str(n): v for n, v in r.pairs.items()},  # type: ignore[attr-defined]
                      "seconds": {str(n): round(v, 3) for n, v in r.seconds.items()}}  # fmt: skip
        return r.run


def depth_run_name(stage: str, depth: int) -> str:
    """The name of a stage's run at an extra depth (its file: ``runs/<stage>@<depth>.trec``)."""
    return f"{stage}@{depth}"


class CrossEncoderStage(DepthsMixin, ModelStage):
    type_name = "cross_encoder"
    Params = CrossEncoderParams
    min_inputs = max_inputs = 1
    reorders_input = True
    code_modules = (*Stage.code_modules, "stagebench.stages.rerank", "stagebench.rerankers", "stagebench.encoders",
                    "stagebench.models", "stagebench.devices")  # fmt: skip
    packages = ("numpy", *("onnxruntime", "tokenizers", "sentence-transformers", "transformers", "torch"))

    def fit(self, data: TrainingData, recipe: Any, work: Path) -> Fitted:
        """Fine-tune this stage's model on ``data`` (PyTerrier's ``Estimator.fit``): the recipe is a
        config's ``training:`` section; see :mod:`stagebench.finetune`."""
        return fine_tune(self.params.model, self.params.source, data, recipe, work)

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: CrossEncoderParams = self.params
        placement = self.placement()
        resolved = resolve_model(p.model, p.source)
        task = ScoreTask(partial(CrossEncoderReranker.placed, resolved, p.source, placement, p.max_length, p.batch_size),
                         not p.per_query, self.name, f"cross-encoder {p.model}")  # fmt: skip
        where = "Ray workers" if ctx.engine.remote else task.reranker.model.runs_on
        log.info("stage %s: model %s resolved to %s; runs on %s (%s, %s)", self.name, p.model, resolved.origin, where,
                 placement.device, placement.precision)  # fmt: skip
        return self.keep(rerank_depths(inputs[0], task, ctx, p, self.name, task.label))


@dataclass
class PluginParams(RerankCommon):
    target: str = param("", "the plug-in class, package.module:Class (a stage key beside type)")
    kwargs: dict[str, Any] | None = param(None, "the class's constructor arguments: every other params key")


class PluginStage(DepthsMixin, Stage):
    """``type: plugin`` with ``target: "pkg.module:Class"``; see :mod:`stagebench.rerankers`."""

    type_name = "plugin"
    Params = PluginParams
    min_inputs = max_inputs = 1
    reorders_input = True
    uses_engine = True
    code_modules = (*Stage.code_modules, "stagebench.stages.rerank", "stagebench.rerankers")
    reads_qrels = True  # a plug-in gets the whole dataset; key on the judgments too, to be safe

    def identity(self) -> dict:
        """The plug-in module's source hash, and whatever its optional ``cache_identity(**kwargs)``
        returns (e.g. a hash of model files it loads by path)."""

        p: PluginParams = self.params
        factory = import_target(p.target, f"stage {self.name}.target")
        out: dict = {"plugin_source": module_source_hash(p.target.partition(":")[0])}
        extra = getattr(factory, "cache_identity", None)
        if callable(extra):
            out["plugin_identity"] = extra(**(p.kwargs or {}))
        return out

    @classmethod
    def build_params(cls, raw: Any, where: str, target: str | None) -> PluginParams:
        if not target:
            raise ConfigError(f"{where.rsplit('.', 1)[0]}.target: a plugin stage needs target: 'package.module:Class'")
        raw = dict(raw or {})
        common = {f.name for f in fields(RerankCommon)}
        stage_keys = {k: raw.pop(k) for k in list(raw) if k in common}
        factory = import_target(target, where.rsplit(".", 1)[0] + ".target")
        check_kwargs(factory, raw, where)
        base = build(RerankCommon, stage_keys, where)
        return PluginParams(**{f.name: getattr(base, f.name) for f in fields(RerankCommon)}, target=target, kwargs=raw)

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: PluginParams = self.params
        factory = import_target(p.target, f"stage {self.name}.target")
        build_it = partial(build_plugin, p.target, p.kwargs or {}, self.name, os.getcwd())
        # what the reranker offers (score_pairs, wants_fields) is read from the instance built here;
        # on Ray, from the class, so that the driver does not load a model its workers will load
        loaded = None if ctx.engine.remote and inspect.isclass(factory) else build_it()
        task = ScoreTask.of(loaded, p.per_query, self.name, f"plug-in {p.target}", build_it,
                            kind=factory if loaded is None else None)  # fmt: skip
        return self.keep(rerank_depths(inputs[0], task, ctx, p, self.name, task.label))


def build_plugin(target: str, kwargs: dict, stage: str, cwd: str) -> Any:
    """A plug-in reranker, constructed where it runs (this process or a Ray worker, whose
    working directory ``cwd`` - the run's - is importable as it is here)."""
    if cwd not in sys.path and Path(cwd).is_dir():
        sys.path.append(cwd)
    factory = import_target(target, f"stage {stage}.target")
    try:
        reranker = factory(**kwargs)
    except Exception as exc:
        raise StagebenchError(f"stage {stage}: plug-in {target} raised when constructed: "
                              f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    if not callable(getattr(reranker, "score", None)):
        raise StagebenchError(f"stage {stage}: {target} instance has no score(query, docs) method")
    return reranker


__all__ = ["CrossEncoderStage", "PluginStage", "Reranked", "ScoreTask", "band_edges", "build_plugin", "depth_run_name",
           "merge_head_tail", "rerank_depths", "rerank_run", "split_head"]
