"""Reranking stages: the built-in cross-encoder and user plug-ins, one mechanism.

Both take one input run, rerank the top ``top_n`` documents of every query with a
:class:`stagebench.rerankers.Reranker`, and return **every** candidate of the input:

* the reranked head, ordered by the reranker's scores (optionally passed through a
  sigmoid), then
* the unreranked tail in its original order, with scores strictly below the lowest head
  score whatever the sign of the scores (``tail_j = min(head) - 1 - j``).

Pairs are batched across queries (``pairs_per_call`` pairs per call of ``score_pairs``)
unless the reranker only has ``score(query, docs)`` or ``per_query: true`` is set.
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
from stagebench.params import PositiveInt, build, param
from stagebench.rerankers import CrossEncoderReranker, check_kwargs, import_target
from stagebench.runs import Run, ranked, ranked_ids
from stagebench.models import resolve_model
from stagebench.stages.base import ModelStage, Stage, StageContext

log = logging.getLogger("stagebench")


@dataclass
class RerankCommon:
    top_n: PositiveInt = param(50, "candidates reranked per query; the rest keep their order below")
    activation: Literal["none", "sigmoid"] = param("none", "sigmoid maps scores to (0, 1); the order stays the logits'")
    pairs_per_call: PositiveInt = param(512, "pairs per score_pairs call, batched across queries")
    per_query: bool = param(False, "call the reranker one query at a time (slower; for comparison)")


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
        except StagebenchError:
            raise
        except Exception as exc:
            raise _failed(self.stage, self.label, method, list(dict.fromkeys(qids)), exc) from exc


def rerank_run(run: Run, reranker: Any, ctx: StageContext, p: RerankCommon, stage: str, label: str) -> Run:
    """Rerank each query's top ``p.top_n`` of ``run`` with ``reranker`` (a :class:`ScoreTask`, whose
    units run on ``ctx.engine``, or a reranker object, run here)."""
    ds = ctx.dataset
    task = reranker if isinstance(reranker, ScoreTask) else ScoreTask.of(reranker, p.per_query, stage, label)
    wants_fields = task.wants_fields

    def doc_input(d: str):
        text = ds.doc_text.get(d, "")
        return {"id": d, "text": text, **ds.corpus.get(d, {})} if wants_fields else text

    heads, tails = split_head(run, p.top_n)
    qids = [q for q in run if heads[q]]
    n_pairs = sum(len(heads[q]) for q in qids)
    if task.batched:
        flat = [(q, d) for q in qids for d in heads[q]]
        chunks = [flat[i : i + p.pairs_per_call] for i in range(0, len(flat), p.pairs_per_call)]
    else:
        chunks = [[(q, d) for d in heads[q]] for q in qids]
    units = [([q for q, _ in c], [ds.queries[q] for q, _ in c], [doc_input(d) for _, d in c]) for c in chunks]
    t0 = time.perf_counter()
    got = ctx.engine.map(task, units, desc=f"{stage}: rerank", unit="pair", sizes=[len(c) for c in chunks])
    dt = time.perf_counter() - t0
    out = np.concatenate([_check_scores(g, c, stage, label) for g, c in zip(got, chunks)]) if chunks else np.empty(0)
    scores: dict[str, np.ndarray] = {}
    pos = 0
    for q in qids:
        scores[q] = out[pos : pos + len(heads[q])]
        pos += len(heads[q])
    log.info("stage %s: reranked %d pairs (%d queries, top %d) in %.1fs: %.0f pairs/s (%s%s)",
             stage, n_pairs, len(qids), p.top_n, dt, n_pairs / max(dt, 1e-9),
             "batched across queries" if task.batched else "one query at a time",
             "; on Ray" if ctx.engine.remote else "")  # fmt: skip
    result: Run = {}
    for qid in run:
        s = scores.get(qid, np.empty(0))
        if p.activation == "sigmoid":
            s = sigmoid_keeping_order(s)
        result[qid] = merge_head_tail(dict(zip(heads[qid], s.tolist())), tails[qid])
    return result


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


class CrossEncoderStage(ModelStage):
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
        return rerank_run(inputs[0], task, ctx, p, self.name, task.label)


@dataclass
class PluginParams(RerankCommon):
    target: str = param("", "the plug-in class, package.module:Class (a stage key beside type)")
    kwargs: dict[str, Any] | None = param(None, "the class's constructor arguments: every other params key")


class PluginStage(Stage):
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
        return rerank_run(inputs[0], task, ctx, p, self.name, task.label)


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


__all__ = ["CrossEncoderStage", "PluginStage", "ScoreTask", "build_plugin", "merge_head_tail", "rerank_run", "split_head"]
