"""The measure registry (stagebench.metrics.families): every family declared once, and each
declaration carries what the rest of stagebench reads - a kernel that computes, a parity row against a
reference implementation, a row in docs/metrics.md's table, the parameters its names may take."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from stagebench.errors import StagebenchError
from stagebench.metrics import Delegated, Supports, claims, evaluate, parse_measure
from stagebench.metrics.families import ALIASES, FAMILIES, FAMILY
from stagebench.metrics import holes

REPO = Path(__file__).resolve().parents[2]

#: family -> the test that holds its parity with a reference implementation (trec_eval through
#: pytrec_eval, or ir_measures); a family added to the registry without one fails below
PARITY = {
    "nDCG": "tests/parity/test_pytrec_eval.py::test_agrees_with_pytrec_eval_on_250_random_cases",
    "RR": "tests/parity/test_pytrec_eval.py::test_agrees_with_pytrec_eval_on_250_random_cases",
    "R": "tests/parity/test_pytrec_eval.py::test_agrees_with_pytrec_eval_on_250_random_cases",
    "P": "tests/parity/test_pytrec_eval.py::test_agrees_with_pytrec_eval_on_250_random_cases",
    "AP": "tests/parity/test_pytrec_eval.py::test_agrees_with_pytrec_eval_on_250_random_cases",
    "Rprec": "tests/parity/test_pytrec_eval.py::test_agrees_with_pytrec_eval_on_250_random_cases",
    "nDCG_Burges": "tests/parity/test_new_measures.py::test_ndcg_burges_and_gain_tables_agree_with_trec_eval_on_mapped_grades",
    "F1": "tests/parity/test_new_measures.py::test_hits_and_f1_agree_with_trec_eval_on_the_run_cut_at_k",
    "Hits": "tests/parity/test_new_measures.py::test_hits_and_f1_agree_with_trec_eval_on_the_run_cut_at_k",
    "ERR": "tests/parity/test_new_measures.py::test_err_hit_and_judged_agree_with_ir_measures_on_random_cases",
    "Hit": "tests/parity/test_new_measures.py::test_err_hit_and_judged_agree_with_ir_measures_on_random_cases",
    "Judged": "tests/parity/test_new_measures.py::test_err_hit_and_judged_agree_with_ir_measures_on_random_cases",
    "RBP": "tests/parity/test_new_measures.py::test_binary_rbp_agrees_with_ir_measures_cwl_eval_and_graded_rbp_is_trec_eval_10s_rule",
    "NumQ": "tests/parity/test_trec_eval_suite.py::test_every_measure_stagebench_names_agrees_with_trec_eval_10_or_differs_as_pinned",
    "NumRel": "tests/parity/test_trec_eval_suite.py::test_every_measure_stagebench_names_agrees_with_trec_eval_10_or_differs_as_pinned",
    "NumRet": "tests/parity/test_trec_eval_suite.py::test_every_measure_stagebench_names_agrees_with_trec_eval_10_or_differs_as_pinned",
}  # fmt: skip


def _defined(node_id: str) -> bool:
    path, _, name = node_id.partition("::")
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def test_every_family_has_a_parity_test_that_exists_and_a_docs_row():
    assert set(PARITY) == set(FAMILY), set(PARITY) ^ set(FAMILY)
    assert all(_defined(t) for t in PARITY.values()), [t for t in PARITY.values() if not _defined(t)]
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([A-Za-z_0-9]+)(?:@k)?` \|", doc, flags=re.M))
    assert set(FAMILY) <= rows, f"families without a row in docs/metrics.md's table: {set(FAMILY) - rows}"


QRELS = {"q": {"a": 3, "b": 0, "c": 1, "d": 2, "e": 1}}
RUN = {"q": {"a": 0.9, "x": 0.8, "c": 0.7, "d": 0.6, "b": 0.5}}  # x is a hole
#: holes at ranks 1 and 3 around an irrelevant document: filling them at the top grade moves every family
HOLEY = {"q": {"x": 0.9, "b": 0.8, "y": 0.7, "c": 0.6, "a": 0.5}}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_declaration_parses_computes_and_treats_holes_as_declared(family):
    name = family.name + ("" if family.cutoff == "absent" else "@3")
    m = parse_measure(name)
    assert m.family == family.name and m.declared is family and m.name == name
    for alias in (family.name.lower(), *family.aliases):
        assert ALIASES[alias] == family.name and parse_measure(alias + name[len(family.name):]).name == name
    assert 0 < evaluate(QRELS, RUN, [name]).means[name] < 10  # the kernel computes something real
    views = {h: evaluate(QRELS, HOLEY, [name], holes=h).means[name] for h in holes.HOLES}
    if family.holes == "unaffected":
        assert len(set(views.values())) == 1
    else:  # the holes at ranks 1 and 3 move it when filled at the top grade
        assert views["top_grade"] > views["irrelevant"]
    assert (family.name in holes.MONOTONE) == (family.holes == "monotone")
    # the parameters its names take are the declared ones, and no other
    declared = [f.name for f in dataclasses.fields(family.params)]
    for key in declared:
        assert key in ("rel", "gain", "max_grade", "p", "graded")
    if not declared:  # not stagebench's to parse (ir_measures may know it: NumRet(rel=2) is its num_rel_ret)
        assert not claims(family.name + "(rel=2)" + name[len(family.name):])
    if family.cutoff == "required":
        with pytest.raises(Exception, match="needs a cutoff"):
            parse_measure(family.name)


def test_err_is_chapelles_cascade_by_hand():
    """ERR@3 on grades 3, hole, 1 with max_grade 4: R = 7/16, 0, 1/16."""
    want = 7 / 16 + (1 - 7 / 16) * 0 / 2 + (1 - 7 / 16) * (1 / 16) / 3
    assert evaluate(QRELS, RUN, ["ERR@3"]).means["ERR@3"] == pytest.approx(want, abs=1e-15)
    r3 = 7 / 8 + (1 - 7 / 8) * (1 / 8) / 3
    assert evaluate(QRELS, RUN, ["ERR(max_grade=3)@3"]).means["ERR(max_grade=3)@3"] == pytest.approx(r3, abs=1e-15)
    with pytest.raises(Exception, match=r"ERR\(max_grade=2\)@3: the qrels hold grade 3, above max_grade 2"):
        evaluate(QRELS, RUN, ["ERR(max_grade=2)@3"])


def test_what_a_measure_supports_is_read_from_its_declaration():
    """Every caller asks ``m.supports`` (issue 82): the capabilities follow the family's fields alone."""
    assert parse_measure("nDCG@10").supports == Supports(paired_bounds=True, estimable=True, reads_gain=True)
    assert not parse_measure("nDCG").supports.estimable  # no cut-off: not the estimated view's target
    assert not parse_measure("nDCG(gain=esci)@10").supports.reads_gain  # its own gain, not the evaluation's
    assert not parse_measure("nDCG_Burges@10").supports.reads_gain
    assert parse_measure("RR@10").supports == Supports()
    judged = parse_measure("Judged@10").supports
    assert not judged.holes_matter and not judged.ceiling and judged.views
    for f in FAMILIES:
        s = f.supports(10 if f.cutoff != "absent" else None, None)
        assert s.native and s.views and s.paired_bounds == f.paired, f.name
        assert s.holes_matter == s.ceiling == (f.holes != "unaffected"), f.name
    delegated = Delegated("Bpref", "pytrec_eval", None).supports
    assert delegated.provider == "pytrec_eval" and not delegated.native
    assert not (delegated.views or delegated.ceiling or delegated.paired_bounds or delegated.estimable)


def test_a_delegated_measure_that_takes_the_evaluations_gains_says_so_and_is_refused_where_none_is_positive():
    """ir_measures' nDCG with a parameter stagebench's own does not take (``judged_only=``) is delegated; it reads the
    evaluation's gain map (:func:`stagebench.metrics.delegate.under`), so a map under which no held grade is
    positive is refused for it as for a native nDCG, instead of a column of zeros."""
    pytest.importorskip("ir_measures")
    m = parse_measure("nDCG(judged_only=True)@10")
    assert m.supports.provider == "pytrec_eval" and m.supports.reads_gain
    assert not parse_measure("Bpref").supports.reads_gain
    qrels, run = {"q": {"a": 1, "b": 0}}, {"q": {"a": 2.0, "b": 1.0}}
    with pytest.raises(StagebenchError, match="no grade the qrels hold .1. has a positive gain"):
        evaluate(qrels, run, [m], gain={0: 0.0, 1: 0.0, 2: 1.0})
    assert evaluate(qrels, run, [m]).means[m.name] == pytest.approx(1.0)
