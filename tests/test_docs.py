"""docs/config.md's parameter reference is generated from the declarations and current, and
every declared parameter has a description."""

from __future__ import annotations

import dataclasses

from stagebench import docgen
from stagebench.config import EvaluationConfig, NegativesConfig, TrainingConfig
from stagebench.data import LOADERS
from stagebench.params import describe
from stagebench.stages import STAGE_TYPES


def test_the_parameter_reference_in_docs_config_md_is_current():
    text = docgen.DOC.read_text(encoding="utf-8")
    assert docgen.BEGIN in text and docgen.END in text
    assert docgen.updated(text) == text, "docs/config.md is stale: run python -m stagebench.docgen"


def test_every_declared_parameter_has_a_description():
    sections = [*(c.Params for c in STAGE_TYPES.values()), *(lo.options for lo in LOADERS.values()), EvaluationConfig,
                TrainingConfig, NegativesConfig]  # fmt: skip
    for cls in sections:
        assert dataclasses.is_dataclass(cls)
        for name, _, _, doc in describe(cls):
            assert doc, f"{cls.__name__}.{name} has no description (declare it with stagebench.params.param)"
