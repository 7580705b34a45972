"""F1@k, Hits@k, nDCG_Burges@k and nDCG under gain tables, against pytrec_eval (trec_eval) where
it computes them: Hits@k = num_rel_ret of the run cut at k; F1@k = set_F of the run cut at k
(when the run holds at least k documents: set measures divide by the documents retrieved, P@k by k);
nDCG_Burges = ndcg_cut over the grades mapped to 2^g - 1; a gain table = ndcg_cut over the
grades mapped to integer gains (the table scaled by 100: nDCG does not change with the scale)."""

from __future__ import annotations

import random

import pytest
import pytrec_eval

from stagebench.metrics import evaluate, parse_measure
from stagebench.runs import ranked
from tests.parity.test_pytrec_eval import CUTS, random_case


def cut(run: dict, k: int) -> dict:
    return {q: dict(ranked(docs)[:k]) for q, docs in run.items()}


def mapped(qrels: dict, table: dict[int, int]) -> dict:
    return {q: {d: table[g] for d, g in docs.items()} for q, docs in qrels.items()}


@pytest.mark.parametrize("rel", [1, 2])
def test_hits_and_f1_agree_with_trec_eval_on_the_run_cut_at_k(rel):
    rng = random.Random(77 + rel)
    f1_checked = 0
    for case in range(200):
        qrels, run = random_case(rng)
        ours = evaluate(qrels, run, [f"Hits@{k}" for k in CUTS] + [f"F1@{k}" for k in CUTS], relevance_threshold=rel)
        for k in CUTS:
            ref = pytrec_eval.RelevanceEvaluator(qrels, {"num_rel_ret", "set_F"}, relevance_level=rel).evaluate(cut(run, k))
            ref = ref.get("q", {"num_rel_ret": 0.0, "set_F": 0.0})
            assert ours.per_query[f"Hits@{k}"]["q"] == ref["num_rel_ret"], (case, k)
            if len(run["q"]) >= k:
                assert ours.per_query[f"F1@{k}"]["q"] == pytest.approx(ref["set_F"], abs=1e-9), (case, k)
                f1_checked += 1
    assert f1_checked > 300


@pytest.mark.parametrize("rel", [1, 2])
def test_f1_on_a_ranking_shorter_than_k_is_the_harmonic_mean_of_trec_eval_s_p_and_recall_at_k(rel):
    """trec_eval's set_F divides by the documents retrieved, so it is no reference for a ranking shorter
    than k; F1@k is defined on P@k (hits / k, trec_eval's P_k on the whole run) and R@k (recall_k)."""
    rng = random.Random(91 + rel)
    short = 0
    for case in range(300):
        qrels, run = random_case(rng)
        ours = evaluate(qrels, run, [f"F1@{k}" for k in CUTS], relevance_threshold=rel)
        ref = pytrec_eval.RelevanceEvaluator(qrels, {"P." + ",".join(map(str, CUTS)), "recall." + ",".join(map(str, CUTS))},
                                             relevance_level=rel).evaluate(run)["q"]  # fmt: skip
        for k in CUTS:
            p, r = ref[f"P_{k}"], ref[f"recall_{k}"]
            want = 2 * p * r / (p + r) if p + r > 0 else 0.0
            assert ours.per_query[f"F1@{k}"]["q"] == pytest.approx(want, abs=1e-9), (case, k)
            short += len(run["q"]) < k and want > 0
    assert short > 50  # the boundary case occurs, with hits


def test_ndcg_burges_and_gain_tables_agree_with_trec_eval_on_mapped_grades():
    rng = random.Random(5)
    measures = "ndcg_cut." + ",".join(map(str, CUTS))
    table = {0: 0.0, 1: 0.01, 2: 0.1, 3: 1.0, 4: 2.5}
    for case in range(200):
        qrels, run = random_case(rng)
        burges = evaluate(qrels, run, [f"nDCG_Burges@{k}" for k in CUTS])
        tab = evaluate(qrels, run, [f"nDCG@{k}" for k in CUTS], gain=table)
        ref_exp = pytrec_eval.RelevanceEvaluator(mapped(qrels, {g: 2**g - 1 for g in range(5)}), {measures})
        ref_tab = pytrec_eval.RelevanceEvaluator(mapped(qrels, {g: round(100 * v) for g, v in table.items()}), {measures})
        e, t = ref_exp.evaluate(run)["q"], ref_tab.evaluate(run)["q"]
        for k in CUTS:
            assert burges.per_query[f"nDCG_Burges@{k}"]["q"] == pytest.approx(e[f"ndcg_cut_{k}"], abs=1e-9), (case, k)
            assert tab.per_query[f"nDCG@{k}"]["q"] == pytest.approx(t[f"ndcg_cut_{k}"], abs=1e-9), (case, k)


def test_ndcg_under_a_gain_table_that_does_not_rise_with_the_grade_agrees_with_trec_eval():
    """A gain table may rank grades out of order (S above E): nDCG's ideal is the judged documents
    sorted by gain, not by grade, exactly as trec_eval computes it on the grades mapped to gains."""
    rng = random.Random(17)
    measures = {"ndcg_cut." + ",".join(map(str, CUTS)), "ndcg"}
    table = {0: 0.0, 1: 0.3, 2: 2.0, 3: 1.0, 4: 0.5}  # grade 2 is worth most, then 3, then 4
    differs = 0
    for case in range(200):
        qrels, run = random_case(rng)
        ours = evaluate(qrels, run, [f"nDCG@{k}" for k in CUTS] + ["nDCG"], gain=table)
        ref = pytrec_eval.RelevanceEvaluator(mapped(qrels, {g: round(10 * v) for g, v in table.items()}), measures)
        t = ref.evaluate(run)["q"]
        for k in CUTS:
            assert ours.per_query[f"nDCG@{k}"]["q"] == pytest.approx(t[f"ndcg_cut_{k}"], abs=1e-9), (case, k)
        assert ours.per_query["nDCG"]["q"] == pytest.approx(t["ndcg"], abs=1e-9), case
        by_grade = sorted(qrels["q"].values(), reverse=True)
        differs += [table[g] for g in by_grade] != sorted((table[g] for g in by_grade), reverse=True)
    assert differs > 100  # the ideal by grade and by gain differ in most cases


def numbered_cases(rng: random.Random, n: int) -> tuple[dict, dict]:
    """``n`` random queries with numeric ids (gdeval refuses others) and distinct scores (each library
    breaks ties its own way)."""
    qrels, run = {}, {}
    for q in range(1, n + 1):
        one_qrels, one_run = random_case(rng)
        qrels[str(q)], run[str(q)] = one_qrels["q"], {d: rng.random() for d in one_run["q"]}
    return qrels, run


def test_err_hit_and_judged_agree_with_ir_measures_on_random_cases():
    """ERR@k against ir_measures' ERR (gdeval.pl, which prints 5 decimals: equal once ours is rounded the
    same way, and within 5e-6 before); Hit@k against its Success@k and Judged@k against its Judged@k,
    to 1e-9. Numeric query ids: gdeval refuses others. Grades 0..4, gdeval's scale. Scores distinct:
    each library breaks ties its own way (ours is trec_eval's, tested above)."""
    irm = pytest.importorskip("ir_measures", reason="the interop extra is not installed")
    qrels, run = numbered_cases(random.Random(68), 150)
    names = [f"{f}@{k}" for f in ("ERR", "Hit", "Judged") for k in CUTS]
    ours = evaluate(qrels, run, names).per_query
    theirs: dict[str, dict[str, float]] = {n: {} for n in names}
    for m in irm.iter_calc([irm.parse_measure(n.replace("Hit@", "Success@")) for n in names], qrels, run):
        theirs[str(m.measure).replace("Success@", "Hit@")][m.query_id] = m.value
    for n in names:
        for q, v in ours[n].items():
            want = theirs[n].get(q, 0.0)
            if n.startswith("ERR"):
                assert float(f"{v:.5f}") == want and abs(v - want) <= 5e-6 + 1e-12, (n, q, v, want)  # printf, as gdeval.pl
            elif n.startswith("Judged") and len(run[q]) < int(n.split("@")[1]):
                # a run shorter than k: ours divides by k (docs/metrics.md), ir_measures by what was retrieved
                assert v == pytest.approx(want * len(run[q]) / int(n.split("@")[1]), abs=1e-9), (n, q, v, want)
            else:
                assert v == pytest.approx(want, abs=1e-9), (n, q, v, want)
    assert sum(v > 0 for v in ours["ERR@10"].values()) > 75  # real values, not zeros (94 of 150 here)


def test_binary_rbp_agrees_with_ir_measures_cwl_eval_and_graded_rbp_is_trec_eval_10s_rule():
    """Binary RBP(rel=r,p=x)[@k] against ir_measures' (cwl_eval computes it) on random cases, to 1e-9;
    graded RBP (trec_eval 10's rbp, which only trec_eval 10 computes: tests/parity/test_trec_eval_suite.py
    holds it against trec_eval's own output) by its definition on one hand-made query."""
    irm = pytest.importorskip("ir_measures", reason="the interop extra is not installed")
    qrels, run = numbered_cases(random.Random(77), 120)
    names = ["RBP(rel=1,p=0.8)", "RBP(rel=2,p=0.5)", "RBP(rel=1,p=0.95)"]
    ours = evaluate(qrels, run, names).per_query
    theirs: dict[str, dict[str, float]] = {}
    for m in irm.iter_calc([irm.parse_measure(n) for n in names], qrels, run):
        theirs.setdefault(str(m.measure), {})[m.query_id] = m.value
    for n in names:
        ours_n, theirs_n = ours[parse_measure(n).name], theirs[str(irm.parse_measure(n))]
        for q, v in ours_n.items():
            assert v == pytest.approx(theirs_n.get(q, 0.0), abs=1e-9), (n, q)
        assert sum(v > 0 for v in ours_n.values()) > 60, n
    # graded: grades 3, hole, 1, 0 with the query's top grade 3: (1 - p) (3/3 + 0 + p^2 1/3 + 0)
    graded = evaluate({"q": {"a": 3, "b": 1, "c": 0}}, {"q": {"a": 4.0, "x": 3.0, "b": 2.0, "c": 1.0}},
                      ["RBP(graded=true,p=0.9)"]).means["RBP(p=0.9,graded=True)"]  # fmt: skip
    assert graded == pytest.approx(0.1 * (1 + 0.81 / 3), abs=1e-15)
    cut = evaluate({"q": {"a": 1, "b": 1}}, {"q": {"a": 2.0, "x": 1.5, "b": 1.0}}, ["RBP(p=0.5)@2", "RBP(p=0.5)"]).means
    assert (cut["RBP(p=0.5)@2"], cut["RBP(p=0.5)"]) == (0.5, pytest.approx(0.5 + 0.5 * 0.25, abs=1e-15))
    # a query whose top grade is 1 keeps its gains (trec_eval scales only above 1)
    one = evaluate({"q": {"a": 1}}, {"q": {"x": 2.0, "a": 1.0}}, ["RBP(graded=true,p=0.5)"]).means
    assert one["RBP(p=0.5,graded=True)"] == pytest.approx(0.5 * 0.5, abs=1e-15)
