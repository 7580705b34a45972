"""Stage types by the name a config's ``stages[].type`` uses."""

from __future__ import annotations

from stagebench.errors import ConfigError
from stagebench.stages.base import Stage, StageContext, StageOutput
from stagebench.stages.bm25 import BM25Stage
from stagebench.stages.dense import DenseStage
from stagebench.stages.fusion import RRFStage, ScoreFusionStage
from stagebench.stages.llm_rerank import LLMRerankStage
from stagebench.stages.oracle import OraclePoolStage
from stagebench.stages.pyterrier import PyTerrierStage
from stagebench.stages.rerank import CrossEncoderStage, PluginStage
from stagebench.stages.rerankers_adapter import RerankersStage
from stagebench.stages.run_file import RunFileStage

STAGE_TYPES: dict[str, type[Stage]] = {
    cls.type_name: cls
    for cls in (BM25Stage, DenseStage, RunFileStage, RRFStage, ScoreFusionStage, OraclePoolStage, CrossEncoderStage,
                PluginStage, LLMRerankStage, PyTerrierStage, RerankersStage)
}


def stage_class(type_name: str, target: str | None, where: str) -> type[Stage]:
    """The Stage class for a type name. ``target`` is only for stages that run user code."""
    cls = STAGE_TYPES[type_name]
    if target is not None and not cls.takes_target:
        raise ConfigError(f"{where}: 'target' only applies to "
                          f"{' and '.join('type: ' + n for n, c in STAGE_TYPES.items() if c.takes_target)}")
    return cls


__all__ = ["STAGE_TYPES", "Stage", "StageContext", "StageOutput", "stage_class"]
