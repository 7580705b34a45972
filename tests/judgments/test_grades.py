"""The grade model (issue 69), recomputed from its definitions: histogram binning with smoothing
towards the overall frequencies, the unscored pairs' own bin, and quality measured by cross-fitting
(each fold predicted by a model fitted without it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stagebench.judgments.grades import SMOOTHING, BinnedScores, Constant, cross_fitted_quality, _fold

GRADES = [0, 1]


def test_binned_scores_are_each_bins_frequencies_smoothed_towards_the_overall_ones():
    labelled = {("q", "a"): 0, ("q", "b"): 0, ("q", "c"): 1, ("q", "d"): 1, ("q", "e"): 1, ("q", "u"): 0}
    scores = {("q", "a"): 0.1, ("q", "b"): 0.2, ("q", "c"): 0.3, ("q", "d"): 0.8, ("q", "e"): 0.9}  # u: unscored
    model = BinnedScores.fit(scores, labelled, GRADES, bins=2)
    overall = (np.array([3, 3]) + 0.5) / (6 + 1)  # every judged pair's frequencies, one uniform pseudo-count
    # the cut at the median score, 0.3: a score equal to a cut point is in the bin above it
    low = (np.array([2, 0]) + SMOOTHING * overall) / (2 + SMOOTHING)  # a, b
    high = (np.array([0, 3]) + SMOOTHING * overall) / (3 + SMOOTHING)  # c, d, e
    unscored = (np.array([1, 0]) + SMOOTHING * overall) / (1 + SMOOTHING)  # u
    got = model.distributions([("q", "a"), ("q", "e"), ("q", "u"), ("x", "never")])
    np.testing.assert_allclose(got, [low, high, unscored, unscored], atol=1e-12)


def test_quality_is_measured_on_pairs_each_predicted_by_a_model_fitted_without_their_query():
    labelled = {(f"q{i}", "d"): i % 2 for i in range(40)}
    q = cross_fitted_quality(lambda L: Constant.fit(L, GRADES), labelled, GRADES)
    want_ll, hits = 0.0, 0
    for (qid, d), g in labelled.items():
        train = [x for (o, _), x in labelled.items() if _fold(o, 5) != _fold(qid, 5)]
        p = (np.array([train.count(0), train.count(1)]) + 0.5) / (len(train) + 1)
        want_ll -= math.log(p[g])
        hits += int(np.argmax(p) == g)
    assert q.pairs == 40 and q.log_loss == pytest.approx(want_ll / 40, abs=1e-9) and q.accuracy == hits / 40
    assert q.baseline_log_loss == pytest.approx(q.log_loss, abs=1e-12)  # the model is the constant one


def test_the_refit_is_weighted_least_squares_of_the_sampled_gains_on_the_predictions_clipped_to_the_scale():
    from stagebench.judgments.estimate import MIN_REFIT, recalibrated

    rng = np.random.default_rng(0)
    means = rng.uniform(0, 3, 60)
    sampled = np.arange(0, 60, 2)[: max(MIN_REFIT, 25)]
    gains = np.clip(0.5 * means[sampled] - 0.2 + rng.normal(0, 0.3, len(sampled)), 0, 3)
    w = rng.uniform(1, 5, len(sampled))
    # the normal equations of sum w (g - a - b m)^2, solved by hand
    m, g = means[sampled], gains
    sw, swm, swmm, swg, swmg = w.sum(), (w * m).sum(), (w * m * m).sum(), (w * g).sum(), (w * m * g).sum()
    b = (sw * swmg - swm * swg) / (sw * swmm - swm**2)
    a = (swg - b * swm) / sw
    np.testing.assert_allclose(recalibrated(means, sampled, gains, w, 0.0, 3.0), np.clip(a + b * means, 0, 3), atol=1e-9)
    few = sampled[: MIN_REFIT - 1]
    assert recalibrated(means, few, gains[: len(few)], w[: len(few)], 0.0, 3.0) is means  # too few: as they were


def test_the_learned_model_s_features_are_each_stage_s_rank_and_score_and_the_shared_words():
    from stagebench.judgments.grades import PairFeatures

    runs = {"a": {"q": {"d1": 3.0, "d2": 1.0, "d3": 2.0}}, "b": {"q": {"d2": 5.0}}}
    f = PairFeatures(runs, {"q": "red wool socks"}, {"d1": "Red socks", "d2": "blue hat", "d3": "wool red socks pair"})
    X = f.matrix([("q", "d1"), ("q", "d2"), ("q", "d9")])
    assert f.names == ["a:discount", "a:score", "a:top10", "b:discount", "b:score", "b:top10", "stages in top 10",
                       "query words held", "word overlap"]  # fmt: skip
    sd = np.std([3.0, 1.0, 2.0])
    np.testing.assert_allclose(X[0], [1.0, 1.0 / sd, 1.0, 0.0, np.nan, 0.0, 1.0, 2 / 3, 2 / 3])
    np.testing.assert_allclose(X[1], [0.5, -1.0 / sd, 1.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0])  # b's one score: std 0 -> 1
    np.testing.assert_allclose(X[2], [0.0, np.nan, 0.0, 0.0, np.nan, 0.0, 0.0, 0.0, 0.0])  # unknown everywhere


def test_the_learned_model_learns_what_the_features_say_and_beats_the_constant_one_on_pairs_it_did_not_see():
    """Grades that follow the shared words and the rank (with noise): cross-fitted by query, the learned
    model's log-loss is well under the constant model's; its rows are distributions with no zero."""
    from stagebench.judgments.grades import LEARNED_PRIOR, LearnedGrades, PairFeatures

    rng = np.random.default_rng(3)
    runs, queries, docs, labelled = {"s": {}}, {}, {}, {}
    for i in range(40):
        q = f"q{i}"
        queries[q] = f"word{i} thing{i}"
        run = {}
        for j in range(12):
            d = f"{q}d{j}"
            shared = j % 3
            docs[d] = " ".join([f"word{i}", f"thing{i}"][:shared] + [f"other{j}"])
            run[d] = float(12 - j) + rng.normal(0, 0.5)
            labelled[(q, d)] = int(min(3, shared + (j < 4) + (rng.random() < 0.1)))
        runs["s"][q] = run
    features = PairFeatures(runs, queries, docs)
    q = cross_fitted_quality(lambda L: LearnedGrades.fit(features, L, [0, 1, 2, 3], rounds=25), labelled, [0, 1, 2, 3])
    assert q.log_loss < 0.6 * q.baseline_log_loss and q.accuracy > 0.8, q
    model = LearnedGrades.fit(features, labelled, [0, 1, 2, 3], rounds=25)
    p = model.distributions(list(labelled)[:50])
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert p.min() >= LEARNED_PRIOR * model.prior.min() - 1e-12 and p.min() > 0
