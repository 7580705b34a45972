"""Our measures against pytrec_eval (trec_eval) on random graded qrels/run pairs, ties included."""

from __future__ import annotations

import random

import pytest
import pytrec_eval

from stagebench.metrics import evaluate

CUTS = (1, 3, 5, 10, 20)
# ours -> pytrec_eval measure name
PAIRS = {f"nDCG@{k}": f"ndcg_cut_{k}" for k in CUTS}
PAIRS |= {f"P@{k}": f"P_{k}" for k in CUTS}
PAIRS |= {f"R@{k}": f"recall_{k}" for k in CUTS}
PAIRS |= {f"AP@{k}": f"map_cut_{k}" for k in CUTS}
PAIRS |= {"AP": "map", "RR": "recip_rank", "Rprec": "Rprec", "nDCG": "ndcg"}
TREC_MEASURES = {"ndcg_cut." + ",".join(map(str, CUTS)), "P." + ",".join(map(str, CUTS)),
                 "recall." + ",".join(map(str, CUTS)), "map_cut." + ",".join(map(str, CUTS)),
                 "map", "recip_rank", "Rprec", "ndcg"}  # fmt: skip


def random_case(rng: random.Random):
    n_docs = rng.randint(1, 40)
    docs = [f"d{rng.randint(0, 60)}" for _ in range(n_docs)]
    # coarse scores so that ties are common
    run = {"q": {d: float(rng.choice([rng.randint(0, 5), rng.random()])) for d in docs}}
    judged = rng.sample(range(61), rng.randint(1, 25))
    qrels = {"q": {f"d{j}": rng.choice([0, 0, 1, 2, 3, 4]) for j in judged}}
    if not any(g > 0 for g in qrels["q"].values()):
        qrels["q"][f"d{judged[0]}"] = rng.randint(1, 4)
    return qrels, run


@pytest.mark.parametrize("rel", [1, 2])
def test_agrees_with_pytrec_eval_on_250_random_cases(rel):
    rng = random.Random(1234 + rel)
    checked = without_relevant = 0
    for case in range(250):
        qrels, run = random_case(rng)
        # queries with no document at grade >= rel are scored too (binary measures 0 there, as trec_eval)
        without_relevant += not any(g >= rel for g in qrels["q"].values())
        ref = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES, relevance_level=rel).evaluate(run)["q"]
        ours = evaluate(qrels, run, list(PAIRS), relevance_threshold=rel)
        for name, tname in PAIRS.items():
            got = ours.per_query[name]["q"]
            assert got == pytest.approx(ref[tname], abs=1e-9), (case, name, qrels, run)
        checked += 1
    assert checked == 250 and (rel == 1 or without_relevant >= 5)


def test_rr_at_10_is_cut_where_recip_rank_is_not():
    qrels = {"q1": {"rel": 1}, "q2": {"rel": 1}}
    ranking_q1 = [f"n{i}" for i in range(11)] + ["rel"]  # first relevant at rank 12
    ranking_q2 = ["n0", "n1", "rel"]  # first relevant at rank 3
    run = {
        "q1": {d: float(100 - i) for i, d in enumerate(ranking_q1)},
        "q2": {d: float(100 - i) for i, d in enumerate(ranking_q2)},
    }
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    ours = evaluate(qrels, run, ["RR@10", "RR"])
    assert ref["q1"]["recip_rank"] == pytest.approx(1 / 12)
    assert ours.per_query["RR"]["q1"] == pytest.approx(1 / 12)
    assert ours.per_query["RR@10"]["q1"] == 0.0  # differs: below rank 10
    assert ours.per_query["RR@10"]["q2"] == pytest.approx(ref["q2"]["recip_rank"]) == pytest.approx(1 / 3)
