from __future__ import annotations

import re

import pytest

from stagebench.errors import StagebenchError
from stagebench.metrics import compute, evaluate, parse_measure
from stagebench.runs import from_ranking

ESCI = {"E": 3, "S": 2, "C": 1, "I": 0}


def test_worked_example_graded_ndcg_at_3_linear_and_exponential():
    # ranking E, S, C; the pool also holds another E, so the ideal top 3 is E, E, S
    qrels = {"q": {"e1": 3, "s1": 2, "c1": 1, "e2": 3}}
    run = from_ranking({"q": ["e1", "s1", "c1"]})
    lin = evaluate(qrels, run, ["nDCG@3"]).means["nDCG@3"]
    exp = evaluate(qrels, run, ["nDCG@3"], gain="exp").means["nDCG@3"]
    assert round(lin, 3) == 0.808
    assert round(exp, 3) == 0.727
    assert evaluate(qrels, run, ["nDCG(gain=exp)@3"]).means["nDCG(gain=exp)@3"] == pytest.approx(exp)


def test_queries_with_judgments_but_no_results_count_as_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}}
    ev = evaluate(qrels, run, ["nDCG@10", "RR@10", "R@100"])
    assert ev.missing_queries == ["q2"]
    assert ev.means == {"nDCG@10": 0.5, "RR@10": 0.5, "R@100": 0.5}


def test_the_query_set_is_every_query_with_a_positive_grade_whatever_the_threshold():
    qrels = {"q1": {"a": 2}, "q2": {"b": 0}, "q3": {"c": 1}}
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}, "q3": {"c": 1.0}, "q9": {"x": 1.0}}
    for rel in (1, 2, 3):
        ev = evaluate(qrels, run, ["P@1", "nDCG@10"], relevance_threshold=rel)
        assert ev.scored_queries == ["q1", "q3"]  # q2 has no positive grade; q9 is not judged
        assert ev.excluded == {"judged, no positive grade": 1, "in the run, not judged": 1}
        assert ev.means["nDCG@10"] == 1.0  # the threshold never applies to nDCG
    # a query with no document at the binary measure's rel scores 0 there, and stays in the average
    assert evaluate(qrels, run, ["P@1"], relevance_threshold=2).means["P@1"] == 0.5
    assert evaluate(qrels, run, ["P@1"], relevance_threshold=1).means["P@1"] == 1.0


def test_relevance_threshold_in_name_overrides_default():
    qrels = {"q": {"e": 3, "c": 1}}
    run = from_ranking({"q": ["c", "e"]})
    ev = evaluate(qrels, run, ["P@1", "P(rel=2)@1", "RR(rel=3)@10"])
    assert ev.means == {"P@1": 1.0, "P(rel=2)@1": 0.0, "RR(rel=3)@10": 0.5}


def test_ties_are_broken_by_docid_descending():
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0}}  # tie: "b" > "a", so b ranks first
    assert evaluate(qrels, run, ["RR@10"]).means["RR@10"] == 0.5


def test_judged_at_k_counts_any_judgment_including_zero():
    qrels = {"q": {"a": 0, "b": 2}}
    run = from_ranking({"q": ["a", "x", "b", "y"]})
    assert evaluate(qrels, run, ["Judged@4", "Hit@2", "Hit@3"]).means == {"Judged@4": 0.5, "Hit@2": 0.0, "Hit@3": 1.0}
    run = from_ranking({"q": ["a", "b", "x", "y", "z"]})  # 2 of 5 judged, 3 unjudged: not symmetric
    assert evaluate(qrels, run, ["Judged@5", "Judged@1"]).means == {"Judged@5": 0.4, "Judged@1": 1.0}


def test_kernels_on_a_query_without_a_positive_grade_and_without_cutoffs():

    assert compute.ndcg(["a", "b"], {"a": 0, "b": 0}, 10, "linear") == 0.0  # IDCG = 0: 0, not 1
    assert compute.ndcg(["a", "b"], {"b": 1}, None, "linear") == pytest.approx(1 / 1.584962500721156)
    ranking = [f"n{i}" for i in range(30)] + ["r"]
    assert compute.reciprocal_rank(ranking, {"r": 1}, None, 1) == pytest.approx(1 / 31)
    assert compute.average_precision(ranking, {"r": 1}, None, 1) == pytest.approx(1 / 31)
    assert compute.gain_of(0, "exp") == 0.0 and compute.gain_of(-1, "linear") == 0.0 and compute.gain_of(3, "exp") == 7.0


def test_evaluate_takes_measure_objects_and_reports_its_settings():
    ms = [parse_measure("nDCG@2"), parse_measure("P(rel=2)@1")]
    ev = evaluate({"q": {"a": 1, "b": 2}}, {"q": {"a": 2.0, "b": 1.0}}, ms, relevance_threshold=2, gain="exp")
    assert ev.measures == ms and ev.relevance_threshold == 2 and ev.gain == compute.Gain("exponential")
    assert ev.means["P(rel=2)@1"] == 0.0 and ev.means["nDCG@2"] == pytest.approx((1 + 3 / 1.584962500721156) / (3 + 1 / 1.584962500721156))
    with pytest.raises(StagebenchError, match="gain: unknown gain 'log' \\(known: linear, exponential, esci"):
        evaluate({"q": {"a": 1}}, {}, ["nDCG@2"], gain="log")


@pytest.mark.parametrize(
    "name,canonical",
    [("nDCG@10", "nDCG@10"), ("MRR@10", "RR@10"), ("Recall@100", "R@100"), ("P(rel=2)@5", "P(rel=2)@5"),
     ("R-Prec", "Rprec"), ("AP", "AP"), ("nDCG(gain=exp)@10", "nDCG(gain=exp)@10"), ("p(rel=1)@3", "P(rel=1)@3"),
     ("ndcg(GAIN=EXP)@5", "nDCG(gain=exp)@5"), ("success@5", "Hit@5"), ("judged@10", "Judged@10")],
)  # fmt: skip
def test_measure_names(name, canonical):
    assert str(parse_measure(name)) == canonical


@pytest.mark.parametrize("bad,why", [
    ("nDCG@0", "cutoff must be >= 1"), ("R", "R needs a cutoff"), ("Foo@10", "unknown family 'Foo' (known: nDCG, nDCG_Burges, RR"),
    ("Rprec@10", "Rprec takes no cutoff"), ("nDCG(rel=2)@10", "parameter 'rel' does not apply to nDCG"),
    ("P(gain=exp)@5", "parameter 'gain' does not apply to P"), ("nDCG@ten", "not of the form"),
    ("P(rel=0)@5", "rel must be >= 1"), ("P(rel=x)@5", "rel expected an integer"),
    ("nDCG(gain=log)@5", "gain must be one of linear, exp"),
])  # fmt: skip
def test_bad_measure_names(bad, why):
    with pytest.raises(StagebenchError, match=re.escape(f"measure '{bad}'") + ".*" + re.escape(why)):
        parse_measure(bad)
