"""``stagebench eval -m`` with measures stagebench does not implement: computed by ir_measures,
named as delegated, averaged over stagebench's query set."""

from __future__ import annotations

import json

import pytest

from stagebench.cli import main

irm = pytest.importorskip("ir_measures", reason="the interop extra is not installed (pip install 'stagebench[interop]')")

QRELS = "q1 0 d1 2\nq1 0 d2 1\nq1 0 d3 0\nq2 0 d4 1\nq2 0 d5 2\nq3 0 d6 1\nq4 0 d7 0\n"
RUN = "q1 Q0 d3 1 3.0 t\nq1 Q0 d1 2 2.0 t\nq1 Q0 d2 3 2.0 t\nq2 Q0 d5 1 1.5 t\nq2 Q0 d9 2 1.0 t\nq4 Q0 d7 1 1.0 t\n"


def files(tmp_path):
    (tmp_path / "qrels").write_text(QRELS)
    (tmp_path / "run").write_text(RUN)
    return str(tmp_path / "qrels"), str(tmp_path / "run")


def test_a_measure_only_ir_measures_knows_is_delegated_named_and_averaged_over_our_query_set(tmp_path, capsys):
    qrels, run = files(tmp_path)
    assert main(["eval", qrels, run, "-m", "nDCG@10", "Bpref", "infAP", "--per-query"]) == 0
    cap = capsys.readouterr()
    assert f"# delegated to ir_measures {irm.__version__}: Bpref (pytrec_eval), infAP (pytrec_eval)" in cap.err
    rows = {tuple(line.split("\t")[:2]): float(line.split("\t")[2]) for line in cap.out.splitlines()}
    # ir_measures' own per-query values; q3 (judged, positive, no results) scored 0; q4 (no positive grade) left out
    theirs = {(str(m.measure), m.query_id): m.value for m in irm.iter_calc(
        [irm.Bpref, irm.infAP], irm.read_trec_qrels(qrels), irm.read_trec_run(run))}  # fmt: skip
    for name in ("Bpref", "infAP"):
        for q in ("q1", "q2"):
            assert rows[name, q] == pytest.approx(theirs[name, q], abs=5e-5)
        assert rows[name, "q3"] == 0.0 and (name, "q4") not in rows
        assert rows[name, "all"] == pytest.approx((theirs[name, "q1"] + theirs[name, "q2"]) / 3, abs=5e-5)
    assert rows["nDCG@10", "all"] > 0  # ours beside them, in the same output
    assert main(["eval", qrels, run, "-m", "Bpref", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["Bpref"] == pytest.approx(rows["Bpref", "all"], abs=5e-5)


def test_an_unknown_measure_and_a_view_ir_measures_has_not_are_one_line(tmp_path, capsys):
    qrels, run = files(tmp_path)
    assert main(["eval", qrels, run, "-m", "Nonsense@10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stagebench: error: -m Nonsense@10:")
    assert main(["eval", qrels, run, "-m", "Bpref", "--view", "bounds"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--view bounds: ir_measures' measures (Bpref) count an unjudged document as irrelevant only" in err[0]


def test_our_own_families_are_never_delegated():
    from stagebench.metrics import claims

    assert claims("nDCG@10") and claims("P(rel=0)@1") and claims("nDCG(gain=esci)@10") and claims("mrr@10")
    assert claims("ERR@10") and claims("ERR(max_grade=3)@5")  # native since issue 68 (metrics/families.py)
    assert not claims("infAP") and not claims("nDCG(judged_only=True)@10") and not claims("ERR(p=0.8)@10")
    assert not claims("P(rel=2,judged_only=True)@5") and claims("RBP(p=0.8)")  # RBP native since issue 77
    assert not claims("RBP(p=0.8,judged_only=True)")
