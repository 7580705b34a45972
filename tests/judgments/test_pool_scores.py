"""The grade model's scores beyond the cross-encoder's pool (issue 69): a pair in some stage's top 10
that the cross-encoder never scored (outside its input's top ``top_n``) is scored by the stage's own
model once, through the stage cache, and gets the score that model gives it - the score a deeper
cross-encoder of the same folder gave the same pair; the tail's placeholder scores (below the head,
not the model's) never reach the grade model. Real model, tiny dataset."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from stagebench import api
from stagebench.api.ground import estimation, ground, model_scores
from tests.conftest import seed_models

pytestmark = pytest.mark.slow  # the cross-encoder runs (about 500 pairs)


@pytest.fixture(scope="module")
def shallow_pool(tmp_path_factory, tiny_synthetic, model_variants):
    root = tmp_path_factory.mktemp("pool-scores")
    cache = seed_models(model_variants, root / "cache")
    cfg = {"name": "pool", "output": str(root / "pool"), "cache_dir": str(cache),
           "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"},
           "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 20}},
                      {"name": "shallow", "type": "cross_encoder", "inputs": ["bm25"], "params": {"top_n": 4}},
                      {"name": "deep", "type": "cross_encoder", "inputs": ["bm25"], "params": {"top_n": 20}}],
           "evaluation": {"metrics": ["nDCG@10"], "permutations": 100, "bootstrap": 100, "latency_queries": 0}}  # fmt: skip
    return api.run(cfg).output, cache


def test_pairs_outside_the_pool_get_the_models_own_score_once_and_the_tail_none(shallow_pool, caplog):
    folder, cache = shallow_pool
    g = ground(folder)
    runs = g.rf.runs()
    with caplog.at_level(logging.INFO, logger="stagebench"):
        scores = model_scores(g, "shallow", str(cache))
    said = caplog.text
    assert "outside stage shallow's pool" in said and "computed run" in said, said[-2000:]
    pool = {q: set(g.ranked["bm25"][q][:4]) for q in g.queries}
    tops = {q: {d for s in g.ranked for d in g.ranked[s][q][:10]} for q in g.queries}
    outside = [(q, d) for q in g.queries for d in tops[q] - pool[q]]
    assert len(outside) > 50  # the chain leaves most of the top 10s outside the pool
    for q in g.queries:
        assert set(scores[q]) == pool[q] | tops[q]  # the pool and every top-10 pair; no tail placeholder
        for d in pool[q]:
            assert scores[q][d] == runs["shallow"][q][d]
    # the deep cross-encoder scored every one of them in its own pool: the same model, the same score
    got = np.array([scores[q][d] for q, d in outside])
    deep = np.array([runs["deep"][q][d] for q, d in outside])
    np.testing.assert_allclose(got, deep, rtol=0, atol=1e-5)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="stagebench"):
        again = model_scores(g, "shallow", str(cache))
    assert again == scores and "cached run" in caplog.text and "computed run" not in caplog.text


def test_a_sampling_round_predicts_with_those_scores(shallow_pool, tmp_path, caplog):
    """plan-judgments --strategy sample with the shallow cross-encoder as the grade model: its pairs outside
    the pool are scored (read back from the cache here), not left in the unscored bin."""
    folder, cache = shallow_pool
    with caplog.at_level(logging.INFO, logger="stagebench"):
        sheet = api.plan_judgments(folder, 30, tmp_path / "s.csv", strategy="sample", predictor="shallow",
                                   cache_dir=str(cache))  # fmt: skip
    assert sheet.pairs > 0 and "outside stage shallow's pool" in caplog.text, caplog.text[-2000:]


def test_the_learned_grade_models_features_read_the_models_scores_not_the_tails_placeholders(shallow_pool):
    """--predictor learned reads every cross-encoder's scores among its features: for the shallow stage, the pairs
    outside its pool carry its model's own score (the deep stage's, the same model), never the placeholder its
    run holds for them (below its pool's scores), and its tail below the top 10s is not read at all."""
    folder, cache = shallow_pool
    g = ground(folder)
    est = estimation(g, "learned", cache_dir=str(cache))
    assert est.predictor == "learned" and est.features is not None
    runs = g.rf.runs()
    read = est.features.runs["shallow"]
    pool = {q: set(g.ranked["bm25"][q][:4]) for q in g.queries}
    tops = {q: {d for s in g.ranked for d in g.ranked[s][q][:10]} for q in g.queries}
    outside = [(q, d) for q in g.queries for d in tops[q] - pool[q]]
    got = np.array([read[q][d] for q, d in outside])
    np.testing.assert_allclose(got, [runs["deep"][q][d] for q, d in outside], rtol=0, atol=1e-5)
    assert not np.allclose(got, [runs["shallow"][q][d] for q, d in outside], atol=1e-3)  # the placeholders differ
    assert all(set(read[q]) == pool[q] | tops[q] for q in g.queries)
    assert est.features.runs["deep"] == runs["deep"]  # a stage that scored its whole input: its run as it is
