"""The planted-bug catalogue (benchmarks/planted.py, ``make planted``) stays in step with the code:
each bug's text occurs exactly once in its file (else it would plant nothing, or in the wrong
place), the planted text differs, and the tests it names exist."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO


def catalogue():
    spec = importlib.util.spec_from_file_location("planted", REPO / "benchmarks" / "planted.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod.BUGS


def test_every_planted_bug_applies_once_and_names_tests_that_exist():
    bugs = catalogue()
    assert len({b.name for b in bugs}) == len(bugs) >= 20
    for b in bugs:
        text = (REPO / b.file).read_text(encoding="utf-8")
        assert text.count(b.old) == 1, f"{b.name}: {b.file} holds its text {text.count(b.old)} times"
        assert b.new != b.old and b.tests
        for t in b.tests:
            path, _, test = t.partition("::")
            assert (REPO / path).is_file(), t
            assert not test or f"def {test}(" in (REPO / path).read_text(encoding="utf-8"), t
