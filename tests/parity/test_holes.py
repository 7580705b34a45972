"""The treatments of unjudged documents (stagebench.metrics.holes) against independent computations:
judged only = pytrec_eval with ``judged_docs_only_flag`` (trec_eval -J) on random cases with holes;
top grade = pytrec_eval on qrels where the holes in the top k were added at the top grade; the bounds
of monotone measures hold every grading of the holes (brute force)."""

from __future__ import annotations

import itertools
import random

import pytest
import pytrec_eval

from stagebench.metrics import evaluate
from stagebench.metrics.compute import gain_map
from stagebench.metrics.holes import bounds, top_grade
from stagebench.runs import ranked_ids
from tests.parity.test_pytrec_eval import CUTS, PAIRS, TREC_MEASURES, random_case


@pytest.mark.parametrize("rel", [1, 2])
def test_judged_only_agrees_with_trec_eval_dash_J_on_random_cases_with_holes(rel):
    rng = random.Random(2026 + rel)
    with_holes = 0
    for case in range(250):
        qrels, run = random_case(rng)
        with_holes += any(d not in qrels["q"] for d in run["q"])
        ref = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES, relevance_level=rel,
                                             judged_docs_only_flag=True).evaluate(run)  # fmt: skip
        ours = evaluate(qrels, run, list(PAIRS), relevance_threshold=rel, holes="judged_only")
        if "q" not in ref:  # nothing judged was retrieved: trec_eval -J leaves the query out of the run
            ref = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES, relevance_level=rel).evaluate({"q": {}})
        for name, tname in PAIRS.items():
            assert ours.per_query[name]["q"] == pytest.approx(ref["q"][tname], abs=1e-9), (case, name, qrels, run)
    assert with_holes > 200


def test_judged_only_differs_where_holes_sit_above_judged_documents():
    qrels = {"q": {"a": 2, "b": 0}}
    run = {"q": {"hole1": 9.0, "hole2": 8.0, "a": 7.0, "b": 6.0}}
    ev = evaluate(qrels, run, ["P@2", "RR@2", "Judged@2"], holes="judged_only")
    assert ev.per_query["P@2"]["q"] == 0.5 and ev.per_query["RR@2"]["q"] == 1.0
    assert ev.per_query["Judged@2"]["q"] == 0.0  # the run's own judged share, whatever the treatment
    base = evaluate(qrels, run, ["P@2", "RR@2"])
    assert base.per_query["P@2"]["q"] == 0.0 and base.per_query["RR@2"]["q"] == 0.0


@pytest.mark.parametrize("gain", ["linear", "esci"])
def test_top_grade_is_trec_eval_on_qrels_filled_at_the_top_grade_within_the_cut(gain):
    rng = random.Random(7 if gain == "linear" else 8)
    for case in range(150):
        qrels, run = random_case(rng)
        if gain == "esci":
            qrels = {"q": {d: min(g, 3) for d, g in qrels["q"].items()}}
        top = top_grade(qrels, gain_map(gain))
        assert top == (3 if gain == "esci" else max(qrels["q"].values()))
        ranking = ranked_ids(run["q"])
        names = [f"nDCG@{k}" for k in CUTS] + [f"P@{k}" for k in CUTS] + [f"R@{k}" for k in CUTS]
        ours = evaluate(qrels, run, names, holes="top_grade", gain=gain)
        for k in CUTS:
            filled = {"q": {**qrels["q"], **{d: top for d in ranking[:k] if d not in qrels["q"]}}}
            if gain == "esci":  # trec_eval's gains are the grades: map E/S/C/I to integer gains (x100)
                filled = {"q": {d: round(100 * gain_map("esci")(g)) for d, g in filled["q"].items()}}
            ref = pytrec_eval.RelevanceEvaluator(filled, {f"ndcg_cut.{k}", f"P.{k}", f"recall.{k}"},
                                                 relevance_level=1).evaluate(run)["q"]  # fmt: skip
            assert ours.per_query[f"nDCG@{k}"]["q"] == pytest.approx(ref[f"ndcg_cut_{k}"], abs=1e-9), (case, k)
            if gain == "linear":
                assert ours.per_query[f"P@{k}"]["q"] == pytest.approx(ref[f"P_{k}"], abs=1e-9), (case, k)
                assert ours.per_query[f"R@{k}"]["q"] == pytest.approx(ref[f"recall_{k}"], abs=1e-9), (case, k)


def test_every_grading_of_the_holes_lies_within_the_bounds_of_monotone_measures():
    """Brute force over every grading of up to 6 holes in the top 5 (grades 0..3)."""
    rng = random.Random(99)
    names = ["P@5", "R@5", "RR@5", "Hit@5", "Hits@5", "F1@5"]
    checked = 0
    for _ in range(60):
        qrels, run = random_case(rng)
        ranking = ranked_ids(run["q"])
        holes = [d for d in ranking[:5] if d not in qrels["q"]]
        if not holes or len(holes) > 4:
            continue
        qrels = {"q": {d: min(g, 3) for d, g in qrels["q"].items()}}
        qrels["q"].setdefault("anchor", 3)  # the top grade is 3
        low = evaluate(qrels, run, names).per_query
        high = evaluate(qrels, run, names, holes="top_grade").per_query
        for grades in itertools.product(range(4), repeat=len(holes)):
            graded = {"q": {**qrels["q"], **dict(zip(holes, grades))}}
            values = evaluate(graded, run, names).per_query
            for n in names:
                lo, hi = bounds(low[n], high[n])
                assert lo["q"] - 1e-12 <= values[n]["q"] <= hi["q"] + 1e-12, (n, grades)
        checked += 1
    assert checked >= 20


def test_ndcg_is_not_monotone_in_a_holes_grade_so_the_bounds_are_the_two_scenarios_ordered():
    """A grade-1 document at rank 1 and nine holes: scored irrelevant, the ranking is ideal (1.0); at
    the top grade, the holes raise the ideal more than the ranking, so the value drops."""
    qrels = {"q": {"rel": 1}, "other": {"best": 3}}  # the qrels' top grade is 3
    run = {"q": {"rel": 10.0, **{f"h{i}": float(9 - i) for i in range(9)}}}
    low = evaluate(qrels, run, ["nDCG@10"]).per_query["nDCG@10"]
    high = evaluate(qrels, run, ["nDCG@10"], holes="top_grade").per_query["nDCG@10"]
    assert low["q"] == 1.0 and high["q"] < 1.0
    lo, hi = bounds(low, high)
    assert (lo["q"], hi["q"]) == (high["q"], 1.0)


def test_bounds_that_touch_at_one_point_leave_the_order_open():
    """Two stages' bounds overlap when they share a point, an end included: [a, b] and [b, c] do not
    settle which stage is better (the one at b could be either); disjoint ones do."""
    from stagebench.metrics.holes import overlap

    assert overlap((0.2, 0.5), (0.5, 0.8)) and overlap((0.5, 0.8), (0.2, 0.5))
    assert overlap((0.4, 0.4), (0.4, 0.9)) and overlap((0.3, 0.3), (0.3, 0.3))
    assert not overlap((0.2, 0.5), (0.5000001, 0.8)) and not overlap((0.6, 0.7), (0.1, 0.59))
