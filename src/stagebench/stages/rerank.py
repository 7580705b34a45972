"""The pointwise reranking stages: the built-in cross-encoder and user plug-ins (thin: the
reranking itself is :mod:`stagebench.rerank.pointwise`, the plug-in protocol
:mod:`stagebench.rerank.plugins`)."""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

from stagebench.cache import module_source_hash
from stagebench.runtime.devices import HardwareParams, StreamParams
from stagebench.errors import ConfigError
from stagebench.params import PositiveInt, build, param
from stagebench.rerank.plugins import build_plugin, check_kwargs, import_target, target_identity
from stagebench.rerank.pointwise import CrossEncoderReranker, RerankCommon, Reranked, ScoreTask, rerank_depths
from stagebench.runs import Run
from stagebench.record import RerankStats
from stagebench.stages.base import Server, Stage, StageContext, StageOutput
from stagebench.stages.neural import ModelStage

log = logging.getLogger("stagebench")


@dataclass
class CrossEncoderParams(RerankCommon, HardwareParams, StreamParams):
    model: str = param("cross-encoder/ms-marco-MiniLM-L-12-v2", "a public name, a local folder (e.g. a fine-tuned model) or a hub id")
    source: str = param("auto", "where the model comes from: auto | bundled | hub (docs/models.md)")
    max_length: PositiveInt = param(256, "tokens of query + document; longer pairs are truncated")
    batch_size: PositiveInt = param(32, "pairs per model batch")
    # model/source are checked by the config loader (stagebench.config.parse_config)


def reranked_output(r: Reranked) -> StageOutput:
    """A pointwise reranking pass as a stage's output: its ``top_n`` run, its runs at the other
    depths, and the pairs and seconds of each depth."""
    return StageOutput(r.run, r.depths, RerankStats(r.pairs, r.seconds))


class CrossEncoderStage(ModelStage):
    type_name = "cross_encoder"
    Params = CrossEncoderParams
    min_inputs = max_inputs = 1
    reorders_input = True
    packages = ("numpy", *("onnxruntime", "tokenizers", "sentence-transformers", "transformers", "torch"))

    def _task(self, ctx: StageContext) -> ScoreTask:
        p: CrossEncoderParams = self.params
        resolved, placement = self.model_to_run(ctx)
        task = ScoreTask(partial(CrossEncoderReranker.placed, resolved, p.source, placement, p.max_length, p.batch_size, p.streams),
                         not p.per_query, self.name, f"cross-encoder {p.model}")  # fmt: skip
        where = "Ray workers" if ctx.engine.remote else task.reranker.model.runs_on
        log.info("stage %s: model %s resolved to %s; runs on %s (%s, %s)", self.name, p.model, resolved.origin, where,
                 placement.device, placement.precision)  # fmt: skip
        return task

    def apply(self, ctx: StageContext, inputs: list[Run]) -> StageOutput:
        task = self._task(ctx)
        return reranked_output(rerank_depths(inputs[0], task, ctx, self.params, self.name, task.label,
                                             shared=ctx.shared_scores))  # fmt: skip

    def server(self, ctx: StageContext) -> Server:
        return serve_reranking(self._task(ctx), ctx, self.params, self.name)


def serve_reranking(task: ScoreTask, ctx: StageContext, p: RerankCommon, stage: str) -> Server:
    """One query's ``top_n`` candidates scored (one call when the reranker is batched) and merged;
    the depth sweep's other depths are not served."""
    one_depth = replace(p, depths=None)
    return lambda qid, inputs: rerank_depths(inputs[0], task, ctx, one_depth, stage, task.label, quiet=True).run


@dataclass
class PluginParams(RerankCommon):
    target: str = param("", "the plug-in class, package.module:Class (a stage key beside type)")
    kwargs: dict[str, Any] | None = param(None, "the class's constructor arguments: every other params key")


class PluginStage(Stage):
    """``type: plugin`` with ``target: "pkg.module:Class"``; see :mod:`stagebench.rerank.plugins`."""

    type_name = "plugin"
    Params = PluginParams
    min_inputs = max_inputs = 1
    reorders_input = True
    uses_engine = True
    takes_target = True
    reads_qrels = True  # a plug-in gets the whole dataset; key on the judgments too, to be safe

    def identity(self) -> dict:
        """The plug-in module's source hash, and whatever its optional ``cache_identity(**kwargs)``
        returns (e.g. a hash of model files it loads by path)."""

        p: PluginParams = self.params
        factory = import_target(p.target, f"stage {self.name}.target")
        return {"plugin_source": module_source_hash(p.target.partition(":")[0]), **target_identity(factory, p.kwargs or {})}

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

    def _task(self, ctx: StageContext) -> ScoreTask:
        p: PluginParams = self.params
        factory = import_target(p.target, f"stage {self.name}.target")
        build_it = partial(build_plugin, p.target, p.kwargs or {}, self.name, os.getcwd())
        # what the reranker offers (score_pairs, wants_fields) is read from the instance built here;
        # on Ray, from the class, so that the driver does not load a model its workers will load
        loaded = None if ctx.engine.remote and inspect.isclass(factory) else build_it()
        return ScoreTask.of(loaded, p.per_query, self.name, f"plug-in {p.target}", build_it,
                            kind=factory if loaded is None else None)  # fmt: skip

    def apply(self, ctx: StageContext, inputs: list[Run]) -> StageOutput:
        task = self._task(ctx)
        return reranked_output(rerank_depths(inputs[0], task, ctx, self.params, self.name, task.label,
                                             shared=ctx.shared_scores))  # fmt: skip

    def server(self, ctx: StageContext) -> Server:
        return serve_reranking(self._task(ctx), ctx, self.params, self.name)


__all__ = ["CrossEncoderParams", "CrossEncoderStage", "PluginParams", "PluginStage"]
