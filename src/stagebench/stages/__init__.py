"""Stage types by the name a config's ``stages[].type`` uses."""

from __future__ import annotations

from stagebench.errors import ConfigError
from stagebench.stages.base import Stage, StageContext
from stagebench.stages.bm25 import BM25Stage

STAGE_TYPES: dict[str, type[Stage]] = {
    BM25Stage.type_name: BM25Stage,
}


def stage_class(type_name: str, target: str | None, where: str) -> type[Stage]:
    """The Stage class for a type name. ``target`` is only for plug-in stages."""
    if target is not None:
        raise ConfigError(f"{where}: 'target' only applies to type: plugin")
    return STAGE_TYPES[type_name]


__all__ = ["STAGE_TYPES", "Stage", "StageContext", "stage_class"]
