"""The stage protocol: small transformers over runs (PyTerrier-style).

A stage receives the dataset (corpus texts and queries) and the runs of its inputs,
and returns a new run ``{qid: {docid: score}}``. Retrievers have no inputs; rerankers
and fusers have one or more. Each stage type declares a ``Params`` dataclass, which
the config loader validates (unknown keys, wrong types) before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from stagebench.data.model import Dataset
    from stagebench.run import Run


@dataclass
class StageContext:
    """What a stage may use besides its inputs: the dataset and a cache folder."""

    dataset: Dataset
    cache_dir: Path


class Stage:
    """Base class. Subclasses set ``type_name``, ``Params``, input arity, and ``__call__``."""

    type_name: ClassVar[str] = ""
    Params: ClassVar[type] = object
    min_inputs: ClassVar[int] = 0
    max_inputs: ClassVar[int | None] = 0
    #: whether the stage reorders the candidates of a single input (a reranker)
    reorders_input: ClassVar[bool] = False

    def __init__(self, name: str, params: Any) -> None:
        self.name = name
        self.params = params

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:  # pragma: no cover - abstract
        raise NotImplementedError
