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
