"""``type: rerankers``: any reranker the `rerankers` library (AnswerDotAI) loads, in one config entry.

That library puts one API (``Reranker(model, model_type=...)``, then ``rank(query, docs)``) over
cross-encoders, T5 rerankers (monoT5, InRanker), ColBERT, FlashRank, RankLLM/RankGPT listwise models and
the hosted reranking APIs (Cohere, Jina, Voyage, mixedbread.ai, Pinecone). The stage hands each query's
``top_n`` candidates to one ``rank`` call (the library's unit: its scores may depend on the list, so the
stage is per query, like a plug-in's ``score``) and merges the scores as every pointwise reranker does
(:mod:`stagebench.rerank.pointwise`).

* **Models**: a name the project's resolver knows (the bundled cross-encoder, a local folder) is loaded
  from what it resolves to - a dynamic INT8 ONNX carrier as its weights dequantized into a transformers
  model at fp32 (:func:`stagebench.models.variants.transformers_folder`) - so it runs offline and its
  weights are keyed by their hash; any other name (a hub id, a hosted API's model) goes to the library as
  written, keyed by its name.
* **Keys**: the API key of a hosted reranker is read from the environment variable ``api_key_env`` names
  (by default the provider's usual one), never from the config, and is handed only to the library, which
  sends it to that provider; a missing key is refused before any stage runs.
* **Cache**: keyed like the cross-encoder - the model's identity, ``model_type``, the library's version
  (``packages``), the params that change a score.
* **Scores**: a result without a score (a listwise model returns an order) is scored by its rank
  (``-rank``), said in the log. The first query's first pairs are also ranked alone (a list of one) and
  the largest difference from the list's scores is logged (a local model only: a hosted API is asked
  nothing the run does not need):
  what the list's padding moves a score by.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from stagebench.errors import ConfigError, StagebenchError
from stagebench.models.resolve import ResolvedModel, resolve_model
from stagebench.models.variants import transformers_folder
from stagebench.optional import need
from stagebench.params import PositiveInt, param
from stagebench.rerank.pointwise import RerankCommon, ScoreTask, rerank_depths
from stagebench.runs import Run
from stagebench.stages.base import Server, Stage, StageContext, StageOutput
from stagebench.stages.rerank import reranked_output, serve_reranking

log = logging.getLogger("stagebench")

#: the environment variable each hosted provider's key is read from unless ``api_key_env`` names another
KEY_ENV = {"cohere": "COHERE_API_KEY", "jina": "JINA_API_KEY", "voyage": "VOYAGE_API_KEY",
           "mixedbread.ai": "MXBAI_API_KEY", "pinecone": "PINECONE_API_KEY", "isaacus": "ISAACUS_API_KEY",
           "rankgpt": "OPENAI_API_KEY", "rankgpt3": "OPENAI_API_KEY", "rankgpt4": "OPENAI_API_KEY",
           "rankllm": "OPENAI_API_KEY"}  # fmt: skip
#: pairs of the first query scored alone against its list's scores (where the library scores a pair alone)
ALONE_CHECK = 4


@dataclass
class RerankersParams(RerankCommon):
    model: str = param("cross-encoder/ms-marco-MiniLM-L-12-v2", "a name the project resolves (bundled, a local folder), "
                                                               "a hub id, or a hosted API's model")  # fmt: skip
    model_type: str | None = param(None, "the library's model_type (cross-encoder, t5, colbert, flashrank, rankllm, "
                                         "cohere, jina, voyage, ...; None: the library guesses from the name)")  # fmt: skip
    batch_size: PositiveInt = param(16, "pairs per model batch (local models)")
    max_length: PositiveInt | None = param(None, "tokens of query + document a local transformers model reads (its "
                                                 "tokenizer's model_max_length; None: the model's own, often 512)")  # fmt: skip
    dtype: Literal["fp32", "bf16", "fp16"] = param("fp32", "what a local torch model computes at")
    device: Literal["cpu", "cuda", "auto"] = param("auto", "where a local model runs (auto: the library's choice, CUDA when there is one)")
    api_key_env: str = param("", "a hosted reranker: the environment variable its key is read from (default: the "
                                 "provider's usual one, e.g. COHERE_API_KEY); a key is never read from a config",
                             affects=())  # fmt: skip
    url: str = param("", "a hosted reranker: the endpoint asked (default: the provider's own); its key goes only there")
    lang: str = param("en", "the language the library picks a default model for")


def provider(p: RerankersParams) -> str | None:
    """The hosted provider a config names (by ``model_type`` or by ``model``), or None: a local model."""
    for name in (p.model_type, p.model):
        if name and name.lower() in KEY_ENV:
            return name.lower()
    return None


def _resolved(p: RerankersParams) -> ResolvedModel | None:
    """The project's resolution of ``p.model`` where it has one and the model type loads transformers weights."""
    if provider(p) is not None or (p.model_type not in (None, "cross-encoder", "transformer")):
        return None
    try:
        return resolve_model(p.model)
    except StagebenchError:
        return None


class LibraryReranker:
    """One loaded ``rerankers`` ranker as a pointwise reranker: ``score(query, docs)`` per query."""

    def __init__(self, name: str, model_type: str | None, kwargs: dict[str, Any], stage: str, hosted: bool = False) -> None:
        lib = need("rerankers", f"stage {stage} (type: rerankers)")
        self.stage = stage
        self.ranker = lib.Reranker(name, model_type=model_type, verbose=0, **kwargs)
        if self.ranker is None:  # the library prints what to install and returns None
            raise StagebenchError(f"stage {stage}: the rerankers library cannot load {name!r} (model_type "
                                  f"{model_type or 'guessed'}): its dependencies for that type are not installed "
                                  "(pip install 'rerankers[<type>]')")  # fmt: skip
        self.by_rank = False
        self.checked = hosted  # a hosted API is never asked more than the run asks

    def score(self, query: str, docs: list[str]) -> list[float]:
        got = self.ranker.rank(query=query, docs=list(docs), doc_ids=list(range(len(docs))))
        results = list(getattr(got, "results", got))
        scores: list[float | None] = [None] * len(docs)
        for r in results:
            i = int(r.document.doc_id)
            scores[i] = float(r.score) if r.score is not None else None
        if any(s is None for s in scores):  # an order, not scores (listwise): each by its rank
            if not self.by_rank:
                log.info("stage %s: the library returns an order without scores; each candidate is scored -rank", self.stage)
            self.by_rank = True
            scores = [0.0] * len(docs)
            for r in results:
                scores[int(r.document.doc_id)] = -float(r.rank)
        if not self.checked:
            self.checked = True
            self._check_alone(query, docs, scores)  # type: ignore[arg-type]
        return scores  # type: ignore[return-value]

    def _check_alone(self, query: str, docs: list[str], scores: list[float]) -> None:
        """The first pairs each ranked alone (a list of one) against their list's scores: what the list's
        padding moves a score by, logged (a check, not the run: a failure is said, not raised)."""
        if self.by_rank or len(docs) < 2:
            return
        try:
            alone = [float(list(getattr(got, "results", got))[0].score)
                     for got in (self.ranker.rank(query=query, docs=[d], doc_ids=[0]) for d in docs[:ALONE_CHECK])]  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            log.info("stage %s: its pairs could not be ranked alone for the check (%s: %s)", self.stage,
                     type(exc).__name__, exc)  # fmt: skip
            return
        moved = max(abs(a - s) for a, s in zip(alone, scores))
        log.info("stage %s: %d pairs ranked alone against their list's scores: largest difference %.2g (the list's "
                 "padding)", self.stage, len(alone), moved)  # fmt: skip


class RerankersStage(Stage):
    """``type: rerankers``: see the module docstring."""

    type_name = "rerankers"
    Params = RerankersParams
    min_inputs = max_inputs = 1
    reorders_input = True
    uses_engine = True
    packages = ("rerankers", "transformers", "torch", "sentence-transformers")

    def _key_env(self) -> str | None:
        p: RerankersParams = self.params
        prov = provider(p)
        return p.api_key_env or (KEY_ENV[prov] if prov else None)

    def preflight(self) -> None:
        need("rerankers", f"stage {self.name} (type: rerankers)")
        env = self._key_env()
        if env is not None and not os.environ.get(env):
            raise ConfigError(f"stage {self.name}: params.api_key_env: the environment variable {env} is not set "
                              f"(the key of {provider(self.params) or 'the hosted reranker'}; never put it in a config)")  # fmt: skip

    def identity(self) -> dict:
        """The model as resolved (its weights' hash) or as named, and the model type."""
        p: RerankersParams = self.params
        resolved = _resolved(p)
        return {"model": resolved.identity if resolved is not None else f"named:{p.model}", "model_type": p.model_type}

    def probe_refusal(self) -> str | None:
        prov = provider(self.params)
        return f"it asks {prov}'s API: a probe would send requests (which may cost)" if prov else None

    def _factory(self, ctx: StageContext) -> partial:
        p: RerankersParams = self.params
        resolved = _resolved(p)
        name = p.model
        if resolved is not None:
            name = transformers_folder(resolved, ctx.cache, f"stage {self.name}").path
            log.info("stage %s: model %s resolved to %s", self.name, p.model, resolved.origin)
        kwargs: dict[str, Any] = {"lang": p.lang}
        env = self._key_env()
        if env is not None:
            kwargs["api_key"] = os.environ.get(env, "")
            if p.url:
                kwargs["url"] = p.url
        else:
            kwargs.update(batch_size=p.batch_size, dtype={"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[p.dtype])
            if p.max_length is not None:
                kwargs["tokenizer_kwargs"] = {"model_max_length": p.max_length}
            if p.device != "auto":
                kwargs["device"] = p.device
        return partial(LibraryReranker, name, p.model_type, kwargs, self.name, env is not None)

    def _task(self, ctx: StageContext) -> ScoreTask:
        factory = self._factory(ctx)
        loaded = None if ctx.engine.remote else factory()
        return ScoreTask.of(loaded, True, self.name, f"rerankers {self.params.model}", factory, kind=LibraryReranker)

    def apply(self, ctx: StageContext, inputs: list[Run]) -> StageOutput:
        task = self._task(ctx)
        return reranked_output(rerank_depths(inputs[0], task, ctx, self.params, self.name, task.label))

    def server(self, ctx: StageContext) -> Server:
        return serve_reranking(self._task(ctx), ctx, self.params, self.name)


__all__ = ["RerankersParams", "RerankersStage", "LibraryReranker"]
