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

import logging
import time
from dataclasses import dataclass, fields
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
from stagebench.stages.base import ModelStage, Stage, StageContext
from stagebench.ui import progress

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


def rerank_run(run: Run, reranker: Any, ctx: StageContext, p: RerankCommon, stage: str, label: str) -> Run:
    ds = ctx.dataset
    wants_fields = bool(getattr(reranker, "wants_fields", False))

    def doc_input(d: str):
        text = ds.doc_text.get(d, "")
        return {"id": d, "text": text, **ds.corpus.get(d, {})} if wants_fields else text

    heads, tails = split_head(run, p.top_n)
    qids = [q for q in run if heads[q]]
    n_pairs = sum(len(heads[q]) for q in qids)
    batched = hasattr(reranker, "score_pairs") and not p.per_query and not wants_fields
    scores: dict[str, np.ndarray] = {}
    t0 = time.perf_counter()
    with progress(n_pairs, f"{stage}: rerank", "pair") as bar:
        if batched:
            flat = [(q, d) for q in qids for d in heads[q]]
            out = np.empty(len(flat), dtype=np.float64)
            for i in range(0, len(flat), p.pairs_per_call):
                chunk = flat[i : i + p.pairs_per_call]
                try:
                    got = reranker.score_pairs([(ds.queries[q], doc_input(d)) for q, d in chunk])
                except Exception as exc:
                    queries = list(dict.fromkeys(q for q, _ in chunk))
                    raise _failed(stage, label, "score_pairs", queries, exc) from exc
                out[i : i + len(chunk)] = _check_scores(got, chunk, stage, label)
                bar.update(len(chunk))
            pos = 0
            for q in qids:
                scores[q] = out[pos : pos + len(heads[q])]
                pos += len(heads[q])
        else:
            for q in qids:
                try:
                    got = reranker.score(ds.queries[q], [doc_input(d) for d in heads[q]])
                except Exception as exc:
                    raise _failed(stage, label, "score", [q], exc) from exc
                scores[q] = _check_scores(got, [(q, d) for d in heads[q]], stage, label)
                bar.update(len(heads[q]))
    dt = time.perf_counter() - t0
    log.info("stage %s: reranked %d pairs (%d queries, top %d) in %.1fs: %.0f pairs/s (%s)",
             stage, n_pairs, len(qids), p.top_n, dt, n_pairs / max(dt, 1e-9),
             "batched across queries" if batched else "one query at a time")  # fmt: skip
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
        rr = CrossEncoderReranker(p.model, p.source, p.max_length, p.batch_size, p.device, p.precision)
        log.info("stage %s: model %s resolved to %s; runs on %s", self.name, p.model, rr.resolved.origin,
                 rr.model.runs_on)  # fmt: skip
        return rerank_run(inputs[0], rr, ctx, p, self.name, f"cross-encoder {p.model}")


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
        try:
            reranker = factory(**(p.kwargs or {}))
        except Exception as exc:
            raise StagebenchError(f"stage {self.name}: plug-in {p.target} raised when constructed: "
                                  f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
        if not callable(getattr(reranker, "score", None)):
            raise StagebenchError(f"stage {self.name}: {p.target} instance has no score(query, docs) method")
        return rerank_run(inputs[0], reranker, ctx, p, self.name, f"plug-in {p.target}")


__all__ = ["CrossEncoderStage", "PluginStage", "merge_head_tail", "rerank_run", "split_head"]
