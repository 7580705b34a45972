"""Every mechanic of the estimated view against its definition, each on a hand-made case small enough to
follow (issue 78): the refit's 1/pi weights and its cross-fitting (no drawn unit corrected by a model its
own grades fitted), the variance, its floor, the Welch-Satterthwaite degrees of freedom, the rule that
fixes a query's ideal, the census, and the coverage count. Each test recomputes the quantity by its
formula, written out here, and holds the code to it."""

from __future__ import annotations

import numpy as np
import pytest

from stagebench.judgments.coverage import covered, orders
from stagebench.judgments.design import Sampler
from stagebench.judgments.estimate import FLOOR_DF, FLOOR_DF_SHARE, FLOOR_PRIOR, MIN_REFIT, estimate, frame
from stagebench.metrics.compute import gain_map

LINEAR = gain_map("linear")


def refit_by_hand(means, sampled, gains, w, low=0.0, high=3.0):
    """The refit written out: the normal equations of sum w (g - a - b m)^2 over the sampled holes, solved by
    hand (never through the code's own least squares), the line applied to every hole, clipped to the scale."""
    m, g = means[sampled], gains
    sw, swm, swmm, swg, swmg = w.sum(), (w * m).sum(), (w * m * m).sum(), (w * g).sum(), (w * m * g).sum()
    b = (sw * swmg - swm * swg) / (sw * swmm - swm**2)
    a = (swg - b * swm) / sw
    return np.clip(a + b * means, low, high)


def cross_fitted_by_hand(fr, means, pi, drawn, truth, weight=lambda p: 1 / p):
    """The refitted difference estimator unit by unit: drawn units alternate between two halves; each half's
    residuals use the model refitted (weights 1/pi) on the other half's holes only (one hole a unit here);
    every unit's prediction is the mean of the two refits."""
    halves = [[j for j in range(len(drawn)) if j % 2 == h] for h in (0, 1)]
    models = []
    for h in (0, 1):
        sampled = np.array([fr.spans[drawn[j]][0] for j in halves[1 - h]])
        models.append(refit_by_hand(means, sampled, truth[sampled], weight(pi[drawn[halves[1 - h]]])))
    known, F = fr.contributions(truth)
    P = [fr.contributions(m)[1] for m in models]
    want = known + (P[0] + P[1]).sum(axis=1) / 2
    for h in (0, 1):
        for j in halves[h]:
            u = drawn[j]
            want = want + (F[:, u] - P[h][:, u]) / pi[u]
    return want, P


def fixed_ideal_case(queries: int = 24):
    """``queries`` queries whose ideal is fixed (3 judged Exacts at k = 3), each with 3 holes over two
    stages: every hole is a unit of its own (72 units), enough for the refit on either half."""
    ranked: dict[str, dict[str, list[str]]] = {"a": {}, "b": {}}
    qrels = {}
    for i in range(queries):
        q = f"q{i}"
        qrels[q] = {"e1": 3, "e2": 3, "e3": 3}
        ranked["a"][q] = [f"h1{q}", f"h2{q}", "e1"]
        ranked["b"][q] = [f"h3{q}", "e1", f"h1{q}"]
    fr = frame(ranked, qrels, list(qrels), 3, LINEAR, 3)
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 4, len(fr.holes())).astype(float)
    means = np.clip(truth * 0.6 + 0.7 + rng.normal(0, 0.4, len(truth)), 0, 3)  # biased: the refit matters
    pi = rng.uniform(0.2, 0.9, len(fr.units))
    return fr, truth, means, pi


def test_the_fixed_ideal_rule_needs_k_judged_documents_at_the_top_grade():
    """A query's ideal is fixed - its holes single units - only when k judged documents already have the top
    gain; one Exact (the best judged grade is the top one) or k judged with the k-th below the top: the
    query is one unit."""
    ranked = {"a": {"full": ["h1", "e1", "h2"], "one": ["g1", "x1", "g2"], "low": ["f1", "y1", "f2"]},
              "b": {"full": ["e1", "h2", "e2"], "one": ["x1", "g3", "g1"], "low": ["y1", "f1", "y2"]}}  # fmt: skip
    qrels = {"full": {"e1": 3, "e2": 3, "e3": 3}, "one": {"x1": 3}, "low": {"y1": 3, "y2": 3, "y3": 2}}
    fr = frame(ranked, qrels, list(qrels), 3, LINEAR, 3)
    units = {(u.qid, u.single, len(u.holes)) for u in fr.units}
    assert units == {("full", True, 1), ("one", False, 3), ("low", False, 2)}
    assert [q.fixed_ideal is not None for q in fr.queries] == [True, False, False]


def test_the_refit_is_weighted_by_1_over_pi_and_cross_fitted_over_two_halves():
    """The estimate written out unit by unit (cross_fitted_by_hand), the refit's least squares by hand."""
    fr, truth, means, pi = fixed_ideal_case()
    drawn = np.flatnonzero(np.random.default_rng(9).random(len(pi)) < pi)
    assert len(drawn) >= 2 * MIN_REFIT
    holes = np.concatenate([np.arange(a, b) for a, b in (fr.spans[i] for i in drawn)])
    got = estimate(fr, means, pi, drawn, truth[holes], 0.0, 3.0, refit=True)
    want, P = cross_fitted_by_hand(fr, means, pi, drawn, truth)
    np.testing.assert_allclose(got.value, want, atol=1e-12)
    # neither one refit on every drawn hole nor an unweighted one gives it
    whole = refit_by_hand(means, holes, truth[holes], 1 / pi[drawn])
    assert not np.allclose(fr.contributions(whole)[1].sum(axis=1), (P[0] + P[1]).sum(axis=1) / 2, atol=1e-6)
    for other in (lambda p: np.ones_like(p), lambda p: 1 / np.sqrt(p)):  # the weights matter here
        assert not np.allclose(cross_fitted_by_hand(fr, means, pi, drawn, truth, other)[0], want, atol=1e-4)


def test_the_sampler_every_command_goes_through_refits_by_weighted_least_squares():
    """Sampler.estimate on the query design (the path plan-judgments, add-judgments and --simulate take) with
    enough drawn holes for the refit: its value is the cross-fitted estimator with the 1/pi-weighted least
    squares solved by hand, so a refit scaled otherwise (the design matrix by 1/pi, the target by
    1/sqrt(pi); weights other than 1/pi) anywhere on the path moves it."""
    fr, truth, means, pi = fixed_ideal_case()
    gains = np.arange(4.0)
    dist = np.full((len(truth), 4), 0.1)
    dist[np.arange(len(truth)), np.clip(np.round(means), 0, 3).astype(int)] = 0.7
    m = dist @ gains
    drawn = np.flatnonzero(np.random.default_rng(9).random(len(pi)) < pi)
    holes = np.array([fr.spans[i][0] for i in drawn])
    assert len(holes) >= 2 * MIN_REFIT
    got = Sampler("query", fr, dist, gains).estimate(pi, drawn, truth[holes])
    want, _ = cross_fitted_by_hand(fr, m, pi, drawn, truth)
    np.testing.assert_allclose(got.value, want, atol=1e-12)


def pooled_by_hand(r: np.ndarray, p: np.ndarray, A_all: np.ndarray, A_drawn: np.ndarray, pi: np.ndarray,
                   M4_drawn: np.ndarray | None = None):  # fmt: skip
    """The pooled variance and its degrees of freedom, written out: the sample's variance sum (1 - p) / p^2 r^2
    and its Welch-Satterthwaite df; the floor s2 * sum over every unit of (1 - pi) / pi * A, s2 the weighted
    mean of x = r^2 / A over the drawn units (weights w = 1/p) and FLOOR_PRIOR more units of the mean weight
    at x = 1; pooled (df * var + FLOOR_DF * floor) / (df + FLOOR_DF). With the model's fourth moments: the
    floor's df FLOOR_DF_SHARE * min(2 (sum w)^2 / sum w^2 (kappa - 1), (sum w)^2 / sum w^2), kappa = M4 / A^2,
    and the pooled df Satterthwaite's over the two weighted parts, never below the sample's; without them,
    the sample's."""
    each = (1 - p) / p**2 * r**2
    var = each.sum(axis=1)
    df = var**2 / (each**2).sum(axis=1)
    x, w = r**2 / A_drawn, 1 / p
    wbar = w.mean()
    s2 = ((w * x).sum(axis=1) + FLOOR_PRIOR * wbar) / (w.sum() + FLOOR_PRIOR * wbar)
    floor = s2 * ((1 - pi) / pi * A_all).sum(axis=1)
    pooled = (df * var + FLOOR_DF * floor) / (df + FLOOR_DF)
    if M4_drawn is None:
        return var, df, floor, pooled, df
    kappa = M4_drawn / A_drawn**2
    df_floor = FLOOR_DF_SHARE * np.minimum(2 * w.sum() ** 2 / (w**2 * (kappa - 1)).sum(axis=1), w.sum() ** 2 / (w**2).sum())
    parts = (df / (df + FLOOR_DF) * var) ** 2 / df + (FLOOR_DF / (df + FLOOR_DF) * floor) ** 2 / df_floor
    return var, df, floor, pooled, np.maximum(df, pooled**2 / parts)


def test_the_variance_its_floor_and_the_degrees_of_freedom_by_their_formulas():
    """Without the refit, r = F - P on the drawn units: the pooled variance of :func:`pooled_by_hand`, and
    with no fourth moments given the sample's own degrees of freedom. Here few units are drawn, so the floor
    is the larger and lifts the variance."""
    fr, truth, means, pi = fixed_ideal_case()
    pi = np.full(len(fr.units), 0.5)
    drawn = np.arange(0, len(fr.units), 6)  # 12 of 72 units
    holes = np.array([fr.spans[i][0] for i in drawn])
    variances = np.full(len(truth), 0.8)
    got = estimate(fr, means, pi, drawn, truth[holes], 0.0, 3.0, refit=False, variances=variances)
    known, F = fr.contributions(truth)
    P = fr.contributions(means)[1]
    r = F[:, drawn] - P[:, drawn]
    p = pi[drawn]
    A = fr.sensitivity(means, variances)
    var, df, floor, pooled, df_pooled = pooled_by_hand(r, p, A, A[:, drawn], pi)
    assert np.all(floor > var)  # the case the floor is for: the few drawn units understate the spread
    np.testing.assert_allclose(got.se**2, pooled, rtol=1e-12)
    assert np.all((var < got.se**2) & (got.se**2 < floor))
    np.testing.assert_allclose(got.df, df, rtol=1e-12)
    assert np.all((5 < got.df) & (got.df <= len(drawn)))  # about the drawn units' count, never the holes'
    np.testing.assert_allclose(got.value, known + P.sum(axis=1) + (r / p).sum(axis=1), atol=1e-12)


def test_ten_equal_variance_terms_give_ten_degrees_of_freedom():
    """Welch-Satterthwaite on n equal terms is n: ten drawn units whose residuals on stage a's mean are all
    0.01 (each hole's judged gain its prediction plus 0.01 over its coefficient), at one probability."""
    fr, truth, means, _ = fixed_ideal_case()
    n = len(fr.holes())
    coef = fr.contributions(np.ones(n))[1][0] - fr.contributions(np.zeros(n))[1][0]  # stage a, per unit
    drawn = np.flatnonzero(coef != 0)[:10]
    assert len(drawn) == 10
    gains = means[[fr.spans[i][0] for i in drawn]] + 0.01 / coef[drawn]
    e = estimate(fr, means, np.full(len(fr.units), 0.5), drawn, gains, -10.0, 10.0, refit=False)
    assert e.df[0] == pytest.approx(10.0, rel=1e-9)
    assert e.se[0] == pytest.approx(np.sqrt(10 * (1 - 0.5) / 0.5**2 * 0.01**2), rel=1e-9)


def test_coverage_counts_an_interval_only_when_it_holds_the_truth_at_both_ends():
    theta = np.array([0.5, 0.0, -0.2])
    low = np.array([[0.4, -0.1, -0.3], [0.6, 0.0, -0.1], [0.0, 0.1, -0.5]])
    high = np.array([[0.6, 0.1, -0.1], [0.9, 0.2, 0.0], [0.4, 0.3, -0.3]])
    np.testing.assert_array_equal(covered(low, high, theta), [[True, True, True], [False, True, False],
                                                              [False, False, False]])  # fmt: skip
    right, wrong = orders(low, high, theta)
    np.testing.assert_array_equal(right, [[True, False, True], [True, False, False], [False, False, True]])
    np.testing.assert_array_equal(wrong, [[False, False, False], [False, False, False], [False, True, False]])


def test_the_sampler_every_command_goes_through_applies_the_floor_by_its_formula():
    """Sampler.estimate - the path plan-judgments, add-judgments and --simulate take - on the query design: the
    grade model's distributions give the means and variances, and the squared standard error is the pooled
    floor of test_the_variance_its_floor_and_the_degrees_of_freedom_by_their_formulas, by hand (12 holes:
    below MIN_REFIT, so no refit), and the degrees of freedom pooled with the floor's, whose kurtosis the
    model's distributions give hole by hole."""
    fr, truth, means, _ = fixed_ideal_case()
    gains = np.arange(4.0)
    dist = np.full((len(truth), 4), 0.1)
    dist[np.arange(len(truth)), np.clip(np.round(means), 0, 3).astype(int)] = 0.7
    smp = Sampler("query", fr, dist, gains)
    pi = np.full(len(fr.units), 0.5)
    drawn = np.arange(0, len(fr.units), 6)
    holes = np.array([fr.spans[i][0] for i in drawn])
    assert len(holes) < MIN_REFIT
    got = smp.estimate(pi, drawn, truth[holes])
    m = dist @ gains
    v = dist @ gains**2 - m**2
    known, F = fr.contributions(truth)
    r = F[:, drawn] - fr.contributions(m)[1][:, drawn]
    A = fr.sensitivity(m, v)
    # every unit a single hole of a fixed ideal: its residual c (g - m), so its fourth moment c^4 mu4
    coef = fr.contributions(np.ones(len(m)))[1] - fr.contributions(np.zeros(len(m)))[1]
    mu4 = ((gains[None, :] - m[:, None]) ** 4 * dist).sum(axis=1)
    M4 = coef[:, drawn] ** 4 * mu4[[fr.spans[i][0] for i in drawn]]
    var, df, floor, pooled, df_pooled = pooled_by_hand(r, pi[drawn], A, A[:, drawn], pi, M4)
    np.testing.assert_allclose(got.se**2, pooled, rtol=1e-10)
    np.testing.assert_allclose(got.df, df_pooled, rtol=1e-10)
    assert np.all(got.df >= df * (1 - 1e-12)) and np.any(got.df > df * 1.1)  # the floor's lifts the sample's
    assert np.all(got.se**2 != var)  # the floor moved it: a Sampler that skipped it would give var


def test_the_hole_designs_prior_shift_aims_at_the_drawn_holes_shares_weighted_by_1_over_pi():
    """Through the Sampler (hole design, 36 drawn holes, unequal probabilities): the estimate is the one of the
    model's distributions shifted, beforehand and by hand, to the drawn holes' grade shares weighted by 1/pi
    (prior_shift; the unweighted shares differ here and give another estimate)."""
    from stagebench.judgments.design import Sampler
    from stagebench.judgments.grades import prior_shift
    from stagebench.judgments.linear import estimate_units

    ranked: dict[str, dict[str, list[str]]] = {"a": {}, "b": {}}
    qrels = {}
    for i in range(24):
        q = f"q{i}"
        qrels[q] = {"e1": 3, "e2": 3, "e3": 3}
        ranked["a"][q] = [f"h1{q}", f"h2{q}", "e1"]
        ranked["b"][q] = [f"h3{q}", "e1", f"h1{q}"]
    fr = frame(ranked, qrels, list(qrels), 3, LINEAR, 3, design="hole")
    rng = np.random.default_rng(8)
    levels = rng.integers(0, 4, len(fr.holes()))
    dist = rng.dirichlet(np.ones(4), len(levels))
    gains = np.arange(4.0)
    pi = np.where(levels >= 2, 0.3, 0.8)  # the high grades drawn less often: weighting matters
    drawn = np.arange(0, len(fr.units), 2)
    assert len(drawn) >= MIN_REFIT
    got = Sampler("hole", fr, dist, gains).estimate(pi, drawn, gains[levels[drawn]])
    w = 1 / pi[drawn]
    weighted = np.bincount(levels[drawn], weights=w, minlength=4) / w.sum()
    plain = np.bincount(levels[drawn], minlength=4) / len(drawn)
    assert np.abs(weighted - plain).max() > 0.05
    want = estimate_units(fr, prior_shift(dist, weighted), gains, pi, drawn, gains[levels[drawn]], shift=False)
    np.testing.assert_allclose(got.value, want.value, atol=1e-12)
    other = estimate_units(fr, prior_shift(dist, plain), gains, pi, drawn, gains[levels[drawn]], shift=False)
    assert np.abs(other.value - got.value).max() > 1e-4


def test_a_whole_querys_fourth_moment_is_that_of_its_linear_residual_over_every_grading():
    """Frame.fourth for a unit judged whole: the fourth central moment of sum_h c_h (g_h - m_h), c_h the
    unit's linear sensitivity to hole h (its weights over the predicted ideal, projected to each target),
    computed over every grading of the query's holes weighted by its probability (4 levels, 3 holes: 64)."""
    import itertools

    ranked = {"a": {"q": ["h1", "j1", "h2"]}, "b": {"q": ["h3", "h2", "j1"]}}
    fr = frame(ranked, {"q": {"j1": 1}}, ["q"], 3, LINEAR, 3)
    assert len(fr.units) == 1 and not fr.units[0].single and fr.units[0].cost == 3
    gains = np.arange(4.0)
    dist = np.array([[0.5, 0.2, 0.2, 0.1], [0.1, 0.1, 0.2, 0.6], [0.7, 0.1, 0.1, 0.1]])
    m = dist @ gains
    v = dist @ gains**2 - m**2
    mu4 = ((gains[None, :] - m[:, None]) ** 4 * dist).sum(axis=1)
    A = fr.sensitivity(m, v)
    q = fr.queries[0]
    c = fr.project @ q.weights / (q.ideal(m) * len(fr.queries))  # (targets, holes): the sensitivity to each hole
    want = np.zeros(len(fr.targets))
    for levels in itertools.product(range(4), repeat=3):
        prob = np.prod([dist[h, l] for h, l in enumerate(levels)])
        want += prob * (c @ (gains[list(levels)] - m)) ** 4
    np.testing.assert_allclose(fr.fourth(m, v, mu4)[:, 0], want, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(A[:, 0], (c**2) @ v, rtol=1e-12)
