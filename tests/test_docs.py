"""docs/config.md's parameter reference is generated from the declarations and current, and
every declared parameter has a description."""

from __future__ import annotations

import dataclasses
import doctest
import re
from pathlib import Path

import pytest

from stagebench import docgen
from stagebench.config import EvaluationConfig, NegativesConfig, TrainingConfig, TuneConfig
from stagebench.data import LOADERS
from stagebench.params import describe
from stagebench.stages import STAGE_TYPES


def test_the_parameter_reference_in_docs_config_md_is_current():
    text = docgen.DOC.read_text(encoding="utf-8")
    assert docgen.BEGIN in text and docgen.END in text
    assert docgen.updated(text) == text, "docs/config.md is stale: run python -m stagebench.docgen"


def test_the_stage_type_table_of_docs_config_md_names_every_type():
    text = docgen.DOC.read_text(encoding="utf-8").split("## Stages", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([a-z_0-9]+)` \|", text, flags=re.M)
    assert sorted(listed) == sorted(STAGE_TYPES), f"docs/config.md's stage-type table lists {listed}"


def test_every_declared_parameter_has_a_description():
    sections = [*(c.Params for c in STAGE_TYPES.values()), *(lo.options for lo in LOADERS.values()), EvaluationConfig,
                TrainingConfig, NegativesConfig, TuneConfig]  # fmt: skip
    for cls in sections:
        assert dataclasses.is_dataclass(cls)
        for name, _, _, doc in describe(cls):
            assert doc, f"{cls.__name__}.{name} has no description (declare it with stagebench.params.param)"


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_notebook_session_in_docs_python_md_runs(embedded_dataset, tmp_path, monkeypatch, session_cache):
    """docs/python.md's session, as written (the dataset and the output folder moved to where this
    test has them): opens the committed folders, compares them, and composes a cascade whose table
    equals its YAML twin's."""
    text = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```pycon\n(.*?)```", text, re.S))
    code = code.replace('DATA, OUT = "data/synthetic-esci", Path("build/notebook")',
                        f'DATA, OUT = {str(embedded_dataset)!r}, Path({str(tmp_path / "notebook")!r})')
    assert str(embedded_dataset) in code, "the session no longer sets DATA and OUT as this test expects"
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("STAGEBENCH_CACHE", str(session_cache))  # the session's cache, not the user's
    (tmp_path / "notebook").mkdir()
    test = doctest.DocTestParser().get_doctest(code, {}, "docs/python.md", "docs/python.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    assert len(test.examples) >= 18


def test_figures_a_doc_quotes_from_a_results_folder_are_that_folders():
    """A paragraph of the docs that names a committed results folder or file (`results/default`,
    `results/default/segments.txt`) quotes its 3- and 4-decimal figures from that folder's tables: each
    one is some number of the folder's .txt tables at the quoted precision. (docs/report.md's negation
    paragraph kept the figures of an untuned BM25 for months: issue 70.)"""
    import re

    stale = []
    for doc in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        for para in re.split(r"\n\s*\n", doc.read_text(encoding="utf-8")):
            if para.lstrip().startswith("|"):  # tables hold figures of many origins (published, measured)
                continue
            cited = set(re.findall(r"`(results/[\w\-]+)(?:/[\w\-.]+\.(?:txt|md|csv|json))?`", para))
            tables = sorted({t for c in cited if (REPO / c).is_dir() for t in (REPO / c).glob("*.txt")})
            if not tables:
                continue
            have = {abs(float(x)) for t in tables for x in re.findall(r"[-+]?\d+\.\d+", t.read_text(encoding="utf-8"))}
            for quoted in re.findall(r"(?<![\w.])([-+]?0\.\d{3,4})(?!\d)", para):
                places = len(quoted.split(".")[1])
                if not any(round(h, places) == round(abs(float(quoted)), places) for h in have):
                    stale.append(f"{doc.name}: {quoted} (paragraph citing {', '.join(sorted(cited))})")
    assert not stale, stale
