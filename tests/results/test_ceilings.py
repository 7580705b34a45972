from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebench.results.ceilings import ceiling, lost, oracle_ranking, top_labels
from stagebench.metrics import compute, parse_measure
from stagebench.runs import from_ranking

NDCG10 = parse_measure("nDCG@10")


def test_pool_holding_all_relevant_gives_oracle_one():
    qrels = {"q": {"e1": 3, "e2": 3, "s1": 2, "i1": 0}}
    inp = from_ranking({"q": ["i1", "x", "s1", "y", "e2", "e1", "z"]})
    c = ceiling(inp, inp, qrels, ["q"], depth=7, rel=1, gain="linear", measure=NDCG10)
    assert c.oracle == 1.0 and c.pool_recall == 1.0
    assert c.headroom_captured == 0.0  # output == input: nothing captured


def test_ideal_reranker_captures_100_percent_and_partial_pool_caps_oracle():
    qrels = {"q": {"e1": 3, "e2": 3, "s1": 2}}
    inp = from_ranking({"q": ["x", "e1", "y", "s1", "z", "e2"]})
    ideal = from_ranking({"q": ["e1", "s1", "x", "y", "z", "e2"]})  # the best order of the top-4 pool
    c = ceiling(inp, ideal, qrels, ["q"], depth=4, rel=1, gain="linear", measure=NDCG10)
    assert c.pool_recall == 2 / 3  # e2 never reached the pool
    assert c.oracle < 1.0
    assert c.achieved == c.oracle and c.headroom_captured == 1.0


def test_half_way_reranker():
    qrels = {"q": {"a": 1}}
    inp = from_ranking({"q": ["x", "y", "a"]})
    out = from_ranking({"q": ["x", "a", "y"]})
    c = ceiling(inp, out, qrels, ["q"], depth=3, rel=1, gain="linear", measure=NDCG10)
    expected = (1 / compute.discount(2) - 1 / compute.discount(3)) / (1 - 1 / compute.discount(3))
    assert abs(c.headroom_captured - expected) < 1e-12


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 30), st.sampled_from(["linear", "exp"]))
def test_oracle_is_never_below_any_reordering_of_the_pool(seed, depth, gain):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(rng.randint(1, 40))]
    judgments = {d: rng.choice([0, 0, 1, 2, 3]) for d in docs if rng.random() < 0.6}
    ranking = docs[:]
    rng.shuffle(ranking)
    best = compute.ndcg(oracle_ranking(ranking, judgments, depth, NDCG10, gain), judgments, 10, gain)
    for _ in range(10):
        pool = ranking[:depth]
        rng.shuffle(pool)
        other = pool + ranking[depth:]
        assert compute.ndcg(other, judgments, 10, gain) <= best + 1e-12


def test_top_labels_and_lost():
    qrels = {"q1": {"a": 3, "b": 0}, "q2": {"c": 2}}
    run = {"q1": {"a": 3.0, "b": 2.0, "u": 1.0}, "q2": {"u": 1.0}}
    shares = top_labels(run, qrels, ["q1", "q2"], {3: "E", 2: "S", 1: "C", 0: "I"})
    assert shares == {"E": 0.25, "S": 0.0, "C": 0.0, "I": 0.25, "unjudged": 0.5}
    assert lost(run, qrels, ["q1", "q2"], rel=1) == 1
    assert lost(run, qrels, ["q1", "q2"], rel=1, depth=0) == 2


def test_ceiling_means_over_several_queries_against_a_direct_computation():
    """Pool recall, input, achieved and oracle nDCG@10 are means over the queries, each
    worked out here from the kernels directly (not through ceiling())."""
    rng = random.Random(9)
    qrels, inp, out = {}, {}, {}
    for qi in range(6):
        q = f"q{qi}"
        docs = [f"d{i}" for i in range(30)]
        qrels[q] = {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, 12)}
        qrels[q][docs[25]] = 3  # one relevant document below the pool
        order = rng.sample(docs, 30)
        inp[q] = order
        out[q] = sorted(order[:8], key=lambda d: -qrels[q].get(d, 0)) + order[8:]  # a good reranker of the top 8
    c = ceiling(from_ranking(inp), from_ranking(out), qrels, sorted(qrels), depth=8, rel=2, gain="linear", measure=NDCG10)
    n = len(qrels)
    want_pool = sum(compute.recall(inp[q], qrels[q], 8, 2) for q in qrels) / n
    want_in = sum(compute.ndcg(inp[q], qrels[q], 10, "linear") for q in qrels) / n
    want_out = sum(compute.ndcg(out[q], qrels[q], 10, "linear") for q in qrels) / n
    want_orc = sum(compute.ndcg(oracle_ranking(inp[q], qrels[q], 8, NDCG10, "linear"), qrels[q], 10, "linear") for q in qrels) / n
    assert (c.pool_recall, c.input, c.achieved, c.oracle) == pytest.approx((want_pool, want_in, want_out, want_orc))
    assert c.depth == 8 and set(c.per_query_oracle) == set(qrels)
    assert c.per_query_oracle["q0"] == pytest.approx(
        compute.ndcg(oracle_ranking(inp["q0"], qrels["q0"], 8, NDCG10, "linear"), qrels["q0"], 10, "linear"))
    # a query missing from both runs still counts in the denominator
    c2 = ceiling({}, {}, qrels, sorted(qrels), depth=8, rel=2, gain="linear", measure=NDCG10)
    assert (c2.pool_recall, c2.input, c2.achieved, c2.oracle) == (0.0, 0.0, 0.0, 0.0)
    # exponential gain orders the pool by 2^g - 1, so the oracle differs from linear's only in value
    ce = ceiling(from_ranking(inp), from_ranking(out), qrels, sorted(qrels), depth=8, rel=2, gain="exp", measure=NDCG10)
    assert ce.oracle == pytest.approx(sum(compute.ndcg(oracle_ranking(inp[q], qrels[q], 8, NDCG10, "exp"), qrels[q], 10, "exp")
                                          for q in qrels) / n)


def test_headroom_with_no_room_shows_the_change():
    from stagebench.report.tables import headroom_cell
    from stagebench.table import CeilingCells

    assert headroom_cell(CeilingCells(depth=50, pool_recall=0.5, input=0.8, achieved=0.75,
                                      oracle=0.8, change=-0.05, headroom_captured=None)) == "no room (-0.0500)"
    assert headroom_cell(CeilingCells(50, 0.5, 0.5, 0.55, 0.6, 0.05, 0.5)) == "50.0%"
    from stagebench.results.ceilings import Ceiling

    assert Ceiling(10, 1.0, 0.5, 0.49, 0.50005).headroom_captured is None  # a 5e-5 room is not a denominator
    assert Ceiling(10, 1.0, 0.5, 0.55, 0.6).headroom_captured == pytest.approx(0.5)


def test_recall_at_and_the_recall_curve_against_direct_counts():
    from stagebench.results.ceilings import recall_at, recall_curve

    qrels = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"x": 1}, "q3": {"y": 2}}
    run = from_ranking({"q1": ["c", "a", "z", "b"], "q2": ["w", "v", "x"]})  # q3 has no results; runs are 4 deep
    queries = ["q1", "q2", "q3"]
    # rel=1: q1 finds a at 2 and b at 4; q2 finds x at 3; q3 nothing
    assert recall_at(run, qrels, queries, 1, depths=(1, 2, 3, 10)) == pytest.approx(
        {"R@1": 0.0, "R@2": (0.5 + 0 + 0) / 3, "R@3": (0.5 + 1 + 0) / 3})  # R@10 dropped: deeper than the runs
    assert recall_at(run, qrels, queries, 2, depths=(2, 4)) == pytest.approx({"R@2": (1 + 0 + 0) / 3, "R@4": 1 / 3})
    assert recall_at({}, qrels, queries, 1, depths=(10, 100)) == {"R@10": 0.0}  # the first depth is always reported
    curve = recall_curve(run, qrels, queries, 1, 5)
    assert curve == pytest.approx([0.0, 0.5 / 3, 1.5 / 3, 2 / 3, 2 / 3])
    assert recall_curve(run, qrels, queries, 2, 2) == pytest.approx([0.0, 1 / 3])
    assert recall_curve(run, {"q1": {"a": 0}}, ["q1"], 1, 3) == [0.0, 0.0, 0.0]  # no relevant document: 0, not NaN


def test_lost_counts_a_grade_equal_to_the_threshold_as_relevant():
    qrels = {"q1": {"a": 2}, "q2": {"b": 1}}
    run = from_ranking({"q1": ["a"], "q2": ["x", "b"]})
    assert lost(run, qrels, ["q1", "q2"], 2) == 1  # q2 has nothing at grade >= 2
    assert lost(run, qrels, ["q1", "q2"], 1) == 0
    assert lost(run, qrels, ["q1", "q2"], 1, depth=1) == 1  # b is below the pool of 1


def test_top_labels_without_names_and_with_a_cut():
    qrels = {"q1": {"a": 3, "b": 1, "c": 4}}
    run = from_ranking({"q1": ["a", "b", "c", "x"]})
    # a grade the names do not cover is shown as itself; only the top k count
    assert top_labels(run, qrels, ["q1"], {3: "E", 1: "C"}, k=3) == pytest.approx(
        {"E": 1 / 3, "C": 1 / 3, "4": 1 / 3, "unjudged": 0.0})
    assert top_labels(run, qrels, ["q1"], None, k=4) == pytest.approx({"3": 0.25, "1": 0.25, "4": 0.25, "unjudged": 0.25})
    assert top_labels({}, qrels, ["q1"], {3: "E"}) == {"E": 0.0, "unjudged": 0.0}


def test_a_ceiling_in_another_measure_is_that_measures_best_reordering_of_the_pool():
    """evaluation.ceiling: RR@3 and P(rel=2)@2 over a pool of 4, worked by hand. The ideal order is by
    grade (a binary measure's relevant documents first at any threshold); nDCG's by the gain, which a
    gain table need not make rise with the grade."""
    qrels = {"q": {"a": 1, "b": 0, "c": 2, "d": 3}}
    inp = from_ranking({"q": ["b", "a", "x", "c", "d"]})  # d below the pool of 4
    out = from_ranking({"q": ["a", "b", "x", "c", "d"]})
    rr = ceiling(inp, out, qrels, ["q"], depth=4, rel=2, gain="linear", measure=parse_measure("RR@3"))
    assert (rr.input, rr.achieved, rr.oracle) == (0.0, 0.0, 1.0)  # grade 2 at rank 4 -> 0; the pool's best: c first
    assert rr.pool_recall == 0.5  # c of c, d (rel 2)
    p2 = ceiling(inp, out, qrels, ["q"], depth=4, rel=1, gain="linear", measure=parse_measure("P(rel=2)@2"))
    assert p2.oracle == 0.5 and p2.input == 0.0  # only c is relevant at 2 within the pool
    # a gain table under which grade 1 is worth more than grade 2: nDCG's ideal follows the gain
    table = {0: 0.0, 1: 5.0, 2: 1.0, 3: 2.0}
    assert oracle_ranking(["b", "c", "a"], qrels["q"], 3, NDCG10, table) == ["a", "c", "b"]
    assert oracle_ranking(["b", "c", "a"], qrels["q"], 3, parse_measure("P@2"), table) == ["c", "a", "b"]
