"""``stagebench eval`` at the edges trec_eval 10 defines (issue 77): the threshold reaches ir_measures'
measures, a query the run lacks is scored as trec_eval -c scores it, the query set is a switch, input
trec_eval reads is read, and what cannot be scored or named is one line. The values themselves are held
against trec_eval 10's own output in tests/parity/test_trec_eval_suite.py; these are the small cases."""

from __future__ import annotations

import pytest
import pytrec_eval

from stagebench.cli import main

irm = pytest.importorskip("ir_measures", reason="the interop extra is not installed (pip install 'stagebench[interop]')")

# q1: grades 3, 2, 1, 0; q2: grades 2, 1 (its run holds nothing relevant at 2); q3: judged, not in the run
QRELS = "q1 0 a 3\nq1 0 b 2\nq1 0 c 1\nq1 0 d 0\nq2 0 e 2\nq2 0 f 1\nq3 0 g 1\nq3 0 h 2\n"
RUN = "q1 Q0 c 1 4.0 t\nq1 Q0 x 2 3.0 t\nq1 Q0 a 3 2.0 t\nq1 Q0 d 4 1.0 t\nq2 Q0 f 1 2.0 t\nq2 Q0 y 2 1.0 t\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "qrels").write_text(QRELS)
    (tmp_path / "run").write_text(RUN)
    return str(tmp_path / "qrels"), str(tmp_path / "run")


def rows(out: str) -> dict[tuple[str, str], float]:
    return {tuple(line.split("\t")[:2]): float(line.split("\t")[2]) for line in out.splitlines() if "\t" in line}


def test_the_relevance_threshold_reaches_a_delegated_measure_and_the_header_names_what_was_computed(files, capsys):
    qrels, run = files
    assert main(["eval", qrels, run, "-m", "Bpref", "SetP", "P@2", "--rel", "2", "--per-query", "--queries", "run"]) == 0
    cap = capsys.readouterr()
    got = rows(cap.out)
    q = {qid: {d: int(g) for _, _, d, g in (ln.split() for ln in QRELS.splitlines() if ln.startswith(qid))} for qid in ("q1", "q2")}
    r = {"q1": {"c": 4.0, "x": 3.0, "a": 2.0, "d": 1.0}, "q2": {"f": 2.0, "y": 1.0}}
    ref = pytrec_eval.RelevanceEvaluator(q, {"bpref", "set_P", "P_2"}, relevance_level=2).evaluate(r)
    for qid in ("q1", "q2"):  # trec_eval -l2 on every measure, ours and ir_measures'
        assert got["Bpref", qid] == pytest.approx(ref[qid]["bpref"], abs=5e-5)
        assert got["SetP", qid] == pytest.approx(ref[qid]["set_P"], abs=5e-5)
        assert got["P@2", qid] == pytest.approx(ref[qid]["P_2"], abs=5e-5)
    assert got["SetP", "q1"] == 0.25  # at --rel 1 it would be 0.5 (c and a): the threshold reached it
    assert "Bpref (pytrec_eval, as Bpref(rel=2)), SetP (pytrec_eval, as SetP(rel=2))" in cap.err
    assert "2 scored queries (the judged queries with a positive grade the run holds, as trec_eval without -c)" in cap.err


def test_a_query_the_run_lacks_keeps_what_its_judgments_say_and_scores_0_on_the_rest(files, capsys):
    qrels, run = files
    assert main(["eval", qrels, run, "-m", "NumRel", "NumQ", "NumRet", "Hits", "Bpref", "nDCG@10", "-c", "--per-query"]) == 0
    cap = capsys.readouterr()
    got = rows(cap.out)
    assert (got["NumRel", "q3"], got["NumQ", "q3"], got["NumRet", "q3"], got["Hits", "q3"]) == (2.0, 1.0, 0.0, 0.0)
    assert got["Bpref", "q3"] == 0.0 and got["nDCG@10", "q3"] == 0.0
    assert got["NumRel", "all"] == pytest.approx((3 + 2 + 2) / 3, abs=5e-5)  # the mean: trec_eval prints the sum
    assert "3 scored queries (every judged query with a positive grade, as trec_eval -c" in cap.err
    assert "1 of them without results (scored on an empty ranking)" in cap.err


def test_max_per_query_and_comment_lines_and_columns_after_the_tag(tmp_path, files, capsys, caplog):
    qrels, _ = files
    (tmp_path / "commented").write_text("# a comment\n" + RUN.replace("q1 Q0 c 1 4.0 t", "q1 Q0 c 1 4.0 t extra words"))
    (tmp_path / "qrels2").write_text("# judged by hand\n" + QRELS)
    assert main(["eval", str(tmp_path / "qrels2"), str(tmp_path / "commented"), "-m", "NumRet", "RR", "-M", "1",
                 "--per-query"]) == 0  # fmt: skip
    got = rows(capsys.readouterr().out)
    assert got["NumRet", "q1"] == 1.0 and got["RR", "q1"] == 1.0 and got["NumRet", "q2"] == 1.0
    assert "commented: 1 line(s) have columns after the run tag; ignored" in caplog.text
    assert main(["eval", qrels, str(tmp_path / "commented"), "-m", "RR", "-M", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("-M 0: the most documents a query keeps must be >= 1")


@pytest.mark.parametrize("measures, line", [
    (["RBP(rel=1,p=1.5)"], "measure 'RBP(rel=1,p=1.5)': p must be < 1, got 1.5"),
    (["RBP(rel=2,graded=true)"], "graded RBP has no relevance threshold"),
    (["nDCG@10", "ndcg_cut_10"], "-m: 'nDCG@10' and 'ndcg_cut_10' both name nDCG@10; keep one"),
    (["gm_map"], "trec_eval's gm_map has no name in stagebench or ir_measures (AP averaged geometrically"),
    (["ndgc@10"], "did you mean nDCG?"),
])  # fmt: skip
def test_a_measure_that_cannot_mean_one_thing_is_one_line_naming_it(files, capsys, measures, line):
    qrels, run = files
    assert main(["eval", qrels, run, "-m", *measures]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err


def test_the_docs_rbp_example_needs_no_optional_provider_and_trec_eval_names_are_read(files, capsys):
    qrels, run = files
    assert main(["eval", qrels, run, "-m", "RBP(p=0.8)", "rbp", "num_rel_ret", "bpref", "P.2", "--json"]) == 0
    got = __import__("json").loads(capsys.readouterr().out)
    assert set(got) == {"RBP", "RBP(p=0.9,graded=True)", "Hits", "Bpref", "P@2"}
    # q1: c (1) at rank 1, a (3) at 3 of grades up to 3; q2: f (1) at rank 1 of grades up to 2; q3: nothing
    graded = (0.1 * (1 / 3 + 0.81 * 1) + 0.1 * (1 / 2)) / 3
    assert got["RBP(p=0.9,graded=True)"] == pytest.approx(graded, abs=1e-6)
    assert got["RBP"] == pytest.approx((0.2 * (1 + 0.64) + 0.2) / 3, abs=1e-6)


def test_several_runs_an_empty_or_unmatched_run_is_refused_naming_its_file(tmp_path, files, capsys):
    qrels, run = files
    (tmp_path / "empty").write_text("# nothing here\n")
    (tmp_path / "other").write_text("z1 Q0 a 1 1.0 t\n")
    for bad, why in (("empty", "the run holds no document for any query"), ("other", "holds none of the 3 scored queries")):
        assert main(["eval", qrels, run, str(tmp_path / bad), "-m", "nDCG@10"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{tmp_path / bad}: " in err[0] and why in err[0], err
    assert main(["eval", qrels, str(tmp_path / "empty"), "-m", "nDCG@10"]) == 2  # one run too
    assert "nothing could be scored" in capsys.readouterr().err


def test_several_runs_keep_native_views_beside_a_delegated_measure_whose_marks_say_unsettled(tmp_path, capsys):
    """30 queries: ``good`` ranks the relevant document first, ``bad`` last: good beats bad on both
    measures; nDCG keeps its judged-only view and bounds, Bpref has none and its mark carries a '?'."""
    q = "".join(f"q{i} 0 r 1\nq{i} 0 n 0\n" for i in range(30))
    good = "".join(f"q{i} Q0 r 1 2.0 t\nq{i} Q0 n 2 1.0 t\nq{i} Q0 h 3 0.5 t\n" for i in range(30))
    bad = "".join(f"q{i} Q0 n 1 2.0 t\nq{i} Q0 h 2 1.5 t\nq{i} Q0 r 3 1.0 t\n" for i in range(30))
    for name, text in (("qrels", q), ("good", good), ("bad", bad)):
        (tmp_path / name).write_text(text)
    assert main(["eval", str(tmp_path / "qrels"), str(tmp_path / "good"), str(tmp_path / "bad"), "-m", "nDCG@10",
                 "Bpref", "--permutations", "500"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    main_table, judged = out.split("judged only")[0], out.split("judged only")[1].split("bounds")[0]
    assert "1.0000^b " in main_table + " " and "1.0000^b?" in main_table  # nDCG settled, Bpref not by the holes
    assert "nDCG@10" in judged and "Bpref" not in judged
    assert "computed by ir_measures: Bpref (pytrec_eval); no judged-only view and no bounds" in out


@pytest.mark.parametrize("name, line", [
    ("IPrec@1.5", "recall 1.5 is outside [0.0, 1.0]"),
    ("Compat(p=1.5)", "p 1.5 is outside (0.0, 1.0)"),
    ("SetP(rel=0)", "rel 0 is outside [1, inf) (grade 0 means not relevant)"),
    ("alpha_nDCG(alpha=2)@10", "ir_measures 0.4.3 knows the measure but not this form (invalid param alpha=2)"),
])  # fmt: skip
def test_a_delegated_measure_outside_its_range_is_refused_when_read(files, capsys, name, line):
    """ir_measures accepts IPrec@1.5 and Compat(p=1.5) and prints 0 for every query."""
    if "0.4.3" in line and irm.__version__ != "0.4.3":
        line = line.replace("0.4.3", irm.__version__)
    qrels, run = files
    assert main(["eval", qrels, run, "-m", name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err


def test_a_negative_grade_is_a_hole_as_trec_eval_reads_it():
    """trec_eval: a qrels grade below 0 is "in the pool, not judged" - not judged for Judged@k, removed by
    the judged-only view (-J), never relevant; ir_measures' infAP reads it as trec_eval does."""
    from stagebench.metrics import evaluate

    qrels = {"q": {"a": 1, "b": -1, "c": 0, "d": 2}}
    run = {"q": {"b": 4.0, "a": 3.0, "x": 2.0, "c": 1.5, "d": 1.0}}
    ev = evaluate(qrels, run, ["Judged@2", "P@2", "NumRel"])
    assert ev.per_query["Judged@2"]["q"] == 0.5 and ev.per_query["P@2"]["q"] == 0.5 and ev.per_query["NumRel"]["q"] == 2
    judged = evaluate(qrels, run, ["P@2", "P@3", "nDCG@3"], holes="judged_only").per_query
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"P.2,3", "ndcg_cut.3"}, judged_docs_only_flag=True).evaluate(run)["q"]
    assert (judged["P@2"]["q"], judged["P@3"]["q"]) == (ref["P_2"], ref["P_3"]) == (0.5, 2 / 3)
    assert judged["nDCG@3"]["q"] == pytest.approx(ref["ndcg_cut_3"], abs=1e-12)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"infAP"}).evaluate(run)["q"]["infAP"]
    assert evaluate(qrels, run, ["infAP"]).per_query["infAP"]["q"] == pytest.approx(theirs, abs=1e-12)
