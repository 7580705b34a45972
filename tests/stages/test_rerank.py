"""Rerank stage mechanics with real (deterministic) rerankers - no model mocks needed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stagebench.data.dataset import Dataset
from stagebench.errors import StagebenchError
from stagebench.runs import ranked_ids
from stagebench.stages.base import StageContext
from stagebench.rerank.merge import merge_head_tail
from stagebench.rerank.pointwise import RerankCommon, rerank_depths, rerank_run


def dataset(n_docs=10, n_queries=3):
    corpus = {f"d{i}": {"text": f"doc number {i} " + "word " * i} for i in range(n_docs)}
    queries = {f"q{j}": f"query {j}" for j in range(n_queries)}
    return Dataset("t", corpus, queries, {q: {"d0": 1} for q in queries}, "{text}")


class NegativeLength:
    """Every score negative: -(length of the doc text)."""

    def score(self, query, docs):
        return [-float(len(d)) for d in docs]


class Batched(NegativeLength):
    def __init__(self):
        self.calls = []

    def score_pairs(self, pairs):
        self.calls.append(len(pairs))
        return [-float(len(d)) for _, d in pairs]


def input_run(ds):
    # positive input scores; d9 ranked first ... d0 last
    return {q: {f"d{i}": 100.0 + i for i in range(10)} for q in ds.queries}


def test_negative_head_scores_stay_above_positive_tail():
    ds = dataset()
    ctx = StageContext(ds)
    out = rerank_run(input_run(ds), NegativeLength(), ctx, RerankCommon(top_n=4), "s", "t")
    for q, docs in out.items():
        order = ranked_ids(docs)
        head = order[:4]
        assert set(head) == {"d9", "d8", "d7", "d6"}  # the input's top 4, reranked
        assert head == ["d6", "d7", "d8", "d9"]  # shortest text = least negative first
        assert all(docs[d] < 0 for d in head)
        assert order[4:] == ["d5", "d4", "d3", "d2", "d1", "d0"]  # tail in its input order
        assert max(docs[d] for d in order[4:]) < min(docs[d] for d in head)
        assert len(docs) == 10  # every candidate kept


def test_merge_head_tail_precision_fallback():
    out = merge_head_tail({"a": 1e17, "b": 2e17}, ["c", "d"])
    assert ranked_ids(out) == ["b", "a", "c", "d"]
    # at 1e16, min(head) - 1 rounds back to min(head) although the tail scores stay distinct
    out = merge_head_tail({"a": 1e16}, ["c", "d"])
    assert ranked_ids(out) == ["a", "c", "d"] and out["c"] < out["a"]


class Recording(Batched):
    """Keeps every score_pairs call's pairs."""

    def __init__(self):
        super().__init__()
        self.units = []

    def score_pairs(self, pairs):
        self.units.append(list(pairs))
        return super().score_pairs(pairs)


def test_batched_rerankers_score_every_query_together_by_length_and_equal_per_query():
    ds = dataset(n_docs=30)
    run = {q: {f"d{i}": 100.0 + i for i in range(30)} for q in ds.queries}
    ctx = StageContext(ds)
    b = Recording()
    batched = rerank_run(run, b, ctx, RerankCommon(top_n=25, pairs_per_call=7), "s", "t")
    assert b.calls == [7] * 10 + [5]  # 3 queries x 25 pairs, across queries, at most 7 a call
    sizes = [len(q) + len(d) for unit in b.units for q, d in unit]
    assert sizes == sorted(sizes, reverse=True)  # the longest first
    assert len({q for q, _ in b.units[0]}) == 3  # a call holds pairs of several queries
    # each query's top 25 (d29 .. d5) scored exactly once, nothing else
    assert sorted((q, d) for unit in b.units for q, d in unit) == sorted(
        (ds.queries[q], ds.doc_text[f"d{i}"]) for q in run for i in range(5, 30))
    per_query = rerank_run(run, Batched(), ctx, RerankCommon(top_n=25, per_query=True), "s", "t")
    assert batched == per_query


def test_depths_derive_the_runs_a_separate_top_n_gives_from_one_pass():
    ds = dataset(n_docs=30)
    run = {q: {f"d{i}": 100.0 + i for i in range(30)} for q in ds.queries}
    ctx = StageContext(ds)
    b = Batched()
    r = rerank_depths(run, b, ctx, RerankCommon(top_n=10, depths=[5, 20, 25]), "s", "t")
    assert sum(b.calls) == 25 * 3  # one pass, at the largest depth
    assert sorted(r.depths) == [5, 20, 25] and r.pairs == {5: 15, 10: 30, 20: 60, 25: 75}
    for n in (5, 10, 20, 25):
        alone = rerank_run(run, Batched(), ctx, RerankCommon(top_n=n), "s", "t")
        assert (r.run if n == 10 else r.depths[n]) == alone, n
    # a reranker with score() only is shown each depth's head: one call per query and depth
    r = rerank_depths(run, NegativeLength(), ctx, RerankCommon(top_n=10, depths=[5, 20]), "s", "t")
    assert r.depths[20] == rerank_run(run, NegativeLength(), ctx, RerankCommon(top_n=20), "s", "t")


def test_sigmoid_activation_keeps_order():
    ds = dataset()
    ctx = StageContext(ds)
    raw = rerank_run(input_run(ds), NegativeLength(), ctx, RerankCommon(top_n=3), "s", "t")
    sig = rerank_run(input_run(ds), NegativeLength(), ctx, RerankCommon(top_n=3, activation="sigmoid"), "s", "t")
    assert [ranked_ids(raw[q]) for q in raw] == [ranked_ids(sig[q]) for q in sig]
    head = ranked_ids(sig["q0"])[:3]
    assert all(0 < sig["q0"][d] < 1 for d in head)
    assert sig["q0"][head[0]] == pytest.approx(1 / (1 + math.exp(-raw["q0"][head[0]])), rel=1e-9)


class WrongCount:
    def score(self, query, docs):
        return [0.0] * (len(docs) - 1)


class ReturnsNaN:
    def score(self, query, docs):
        return [float("nan")] + [0.0] * (len(docs) - 1)


@pytest.mark.parametrize("bad,msg", [(WrongCount(), r"returned 4 scores for 5 documents"), (ReturnsNaN(), r"returned nan for query")])
def test_bad_plugin_outputs(bad, msg):
    ds = dataset()
    with pytest.raises(StagebenchError, match=msg):
        rerank_run(input_run(ds), bad, StageContext(ds), RerankCommon(top_n=5), "s", "plug-in x")


def test_sigmoid_keeps_the_order_of_the_logits():
    from stagebench.runs import ranked_ids
    from stagebench.rerank.merge import sigmoid_keeping_order

    logits = np.array([40.0, 45.0, 38.0, 45.0, -3.0, 50.0])
    s = sigmoid_keeping_order(logits)
    docs = ["a", "b", "c", "d", "e", "f"]
    assert ranked_ids(dict(zip(docs, s.tolist()))) == ["f", "d", "b", "a", "c", "e"]  # b, d tie: docid desc
    assert s[1] == s[3] and np.all((s > 0) & (s <= 1)) and math.isclose(s[4], 1 / (1 + math.exp(3)))


def test_merge_head_tail_scores_are_as_documented():
    # tail_j = min(head) - 1 - j, whatever the sign of the head scores
    assert merge_head_tail({"a": 0.5, "b": -2.0}, ["c", "d"]) == {"a": 0.5, "b": -2.0, "c": -3.0, "d": -4.0}
    assert merge_head_tail({}, ["c", "d"]) == {"c": -1.0, "d": -2.0}  # no head: the tail starts below 0
    assert merge_head_tail({"a": 3.0}, []) == {"a": 3.0}


def test_the_scaled_input_tail_keeps_input_scores_times_the_factor_and_can_rise_above_the_head():
    ds = dataset()
    run = input_run(ds)  # positive input scores 100..109
    ctx = StageContext(ds)
    out = rerank_run(run, NegativeLength(), ctx, RerankCommon(top_n=3, tail="scaled_input", tail_scale=0.01), "s", "t")
    head = ranked_ids(run["q0"])[:3]
    for d, s in run["q0"].items():
        if d not in head:
            assert out["q0"][d] == s * 0.01  # the published setup: input score x 0.01
    # negative reranker scores: every tail document now ranks above the head (what `below` prevents)
    assert set(ranked_ids(out["q0"])[-3:]) == set(head)
    below = rerank_run(run, NegativeLength(), ctx, RerankCommon(top_n=3), "s", "t")
    assert set(ranked_ids(below["q0"])[:3]) == set(head)
