"""A config's ``judge:`` section, validated: the judge's params (:class:`~stagebench.judge.ask.JudgeParams`),
its model resolved at load, the stages it pools and, for the rules judge, a dataset it can read."""

from __future__ import annotations

from typing import Any

from stagebench.data import DatasetConfig
from stagebench.errors import ConfigError
from stagebench.judge.ask import JudgeParams
from stagebench.judge.rules import RULES, dataset_problem
from stagebench.models.resolve import check_stage_model
from stagebench.params import build


def parse_judge(raw: Any, where: str | None, stage_names: list[str], dataset: DatasetConfig) -> JudgeParams:
    """The ``judge:`` section, validated: its keys, its model (resolved now), the stages it pools
    among ``stage_names``, and for backend rules a ``dataset`` generate-data wrote. ``where``: the
    file to name in an error (None: the caller adds it)."""
    try:
        params = build(JudgeParams, raw, "judge")
        if params.backend == RULES and (why := dataset_problem(dataset.loader, dataset.options)):
            raise ConfigError(f"judge.backend: {why}")
        for j, s in enumerate(params.stages or []):
            if s not in stage_names:
                raise ConfigError(f"judge.stages[{j}]: unknown stage {s!r} (known: {', '.join(stage_names)})")
        check_stage_model(params, "judge")
    except ConfigError as exc:
        raise ConfigError(str(exc) if where is None else f"{where}: {exc}") from None
    return params
