"""The hole design and the fixed-size draw (issue 78), each mechanic against its definition on a
hand-made case: the linearisation (exact at a sure model, its remainder second order), the estimator
unbiased for the linearised targets and its variance estimate unbiased over every Poisson sample, a census
exact, the capped draw (its exact inclusion probabilities against a brute-force enumeration, its rows
never above the budget nor under 95% of it), the prior shift's margins, and the judged share that decides which queries are judged whole."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stagebench.judgments.design import HOLE_WHEN, Sampler
from stagebench.judgments.capped import condition, exact as conditional
from stagebench.judgments.estimate import frame
from stagebench.judgments.grades import prior_shift
from stagebench.judgments.linear import cumulative, discounts, estimate_units, exact, judged_shares, linearise
from stagebench.metrics.compute import gain_map

LINEAR = gain_map("linear")
GAINS = np.arange(4.0)
# q1's ideal is fixed (3 judged Exacts at k = 3); q2's is not (one judged Substitute): in the hole design
# every hole is a unit all the same, q2's linearised
QRELS = {"q1": {"e1": 3, "e2": 3, "e3": 3}, "q2": {"j1": 2}}
RANKED = {"a": {"q1": ["h1", "e1", "h2"], "q2": ["g1", "j1", "g2"]},
          "b": {"q1": ["e1", "h2", "e2"], "q2": ["j1", "g3", "g1"]}}  # fmt: skip
TRUTH = {("q1", "h1"): 3, ("q1", "h2"): 0, ("q2", "g1"): 3, ("q2", "g2"): 1, ("q2", "g3"): 0}


def _case():
    fr = frame(RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3, design="hole")
    levels = np.array([TRUTH[h] for h in fr.holes()])
    return fr, levels


def test_every_hole_is_a_unit_and_the_cumulative_discount_is_dcg_of_ones():
    fr, _ = _case()
    assert [u.holes for u in fr.units] == [("h1",), ("h2",), ("g1",), ("g2",), ("g3",)]
    D = discounts(3)
    np.testing.assert_allclose(D, [0, 1, 1 + 1 / np.log2(3), 1 + 1 / np.log2(3) + 0.5])
    assert cumulative(1.25, D) == pytest.approx((1 + 0.25 / np.log2(3), 1 / np.log2(3)))
    assert cumulative(3.0, D) == (pytest.approx(D[3]), 0.0)  # a level full to k: the ideal cannot grow there


def test_the_linearisation_is_exact_at_a_sure_model_and_its_remainder_is_second_order():
    fr, levels = _case()
    y = GAINS[levels]
    sure = np.eye(4)[levels]
    lin = linearise(fr, sure, GAINS)
    np.testing.assert_allclose(lin.const, exact(fr, y), atol=1e-12)
    assert not lin.at(np.arange(5), levels).any()  # centred on a sure model: no residual
    wrong = np.tile([0.7, 0.1, 0.1, 0.1], (5, 1))  # a model that moves q2's ideal (the uniform one does not, here)
    rem = []
    for eps in (0.2, 0.1):
        point = (1 - eps) * sure + eps * wrong
        lin = linearise(fr, point, GAINS)
        rem.append(np.abs(lin.const + lin.at(np.arange(5), levels).sum(axis=1) - exact(fr, y)).max())
    assert rem[0] > 1e-3  # not linear: a remainder there is
    assert rem[1] == pytest.approx(rem[0] / 4, rel=0.1)  # halving the distance quarters it: second order


def _brute_force(fr, dist, levels, pi):
    """Every subset of the units, weighted by its Poisson probability: the mean estimate, the estimate's
    variance and the mean variance estimate (no shift, no floor: the estimator's own definition)."""
    spans = fr.spans
    out = [np.zeros(len(fr.targets)) for _ in range(3)]
    for mask in itertools.product([False, True], repeat=len(fr.units)):
        prob = np.prod([p if m else 1 - p for p, m in zip(pi, mask)])
        drawn = np.flatnonzero(mask)
        gains = np.concatenate([GAINS[levels[a:b]] for a, b in (spans[i] for i in drawn)]) if len(drawn) else np.zeros(0)
        e = estimate_units(fr, dist, GAINS, pi, drawn, gains, shift=False, floor=False)
        out[0] += prob * e.value
        out[1] += prob * e.value**2
        out[2] += prob * e.se**2
    return out[0], out[1] - out[0] ** 2, out[2]


DIST = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25] * 4, [0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]])


def test_the_estimator_is_unbiased_for_the_linearised_targets_over_every_poisson_sample():
    fr, levels = _case()
    lin = linearise(fr, DIST, GAINS)
    target = lin.const + lin.at(np.arange(5), levels).sum(axis=1)
    mean, variance, mean_var = _brute_force(fr, DIST, levels, np.array([0.3, 0.8, 0.45, 0.6, 0.5]))
    np.testing.assert_allclose(mean, target, atol=1e-12)
    np.testing.assert_allclose(mean_var, variance, atol=1e-12)


def test_a_query_judged_whole_is_exact_so_the_mixed_estimator_is_unbiased_for_the_truth():
    """q2 (its ideal on one judged Substitute) judged whole, q1's holes single (its ideal fixed, so exactly
    linear): over every sample the mean estimate is the true table, with no expansion left."""
    fr = frame(RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3, design="hole", whole={"q2"})
    assert [u.holes for u in fr.units] == [("h1",), ("h2",), ("g1", "g2", "g3")]
    levels = np.array([TRUTH[h] for h in fr.holes()])
    mean, variance, mean_var = _brute_force(fr, DIST, levels, np.array([0.3, 0.8, 0.45]))
    np.testing.assert_allclose(mean, exact(fr, GAINS[levels]), atol=1e-12)
    np.testing.assert_allclose(mean_var, variance, atol=1e-12)


def test_a_census_is_exact_in_the_hole_design():
    fr, levels = _case()
    dist = np.tile([0.7, 0.1, 0.1, 0.1], (5, 1))  # far from the grades: its expansion alone is 0.10 off
    e = estimate_units(fr, dist, GAINS, np.ones(5), np.arange(5), GAINS[levels])
    np.testing.assert_allclose(e.value, exact(fr, GAINS[levels]), atol=1e-12)
    assert not e.se.any()


def test_the_prior_shift_meets_the_target_shares_and_keeps_each_rows_odds():
    dist = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    target = np.array([0.5, 0.3, 0.2])
    out = prior_shift(dist, target, steps=500)
    np.testing.assert_allclose(out.mean(axis=0), target, atol=1e-9)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    ratio = (out / dist) / (out / dist)[:, :1]  # one factor a grade, the same for every row
    np.testing.assert_allclose(ratio, np.broadcast_to(ratio[0], ratio.shape), rtol=1e-9)


def test_the_samplers_plan_draw_and_estimate_agree_with_the_functions_they_wrap():
    fr, levels = _case()
    dist = np.full((5, 4), 0.25)
    smp = Sampler("hole", fr, dist, GAINS)
    design = smp.probabilities(3)
    pi = design.pi
    assert pi.sum() == pytest.approx(3)  # a capped draw of one-row units: exactly the budget, so its pi sum to it
    drawn = smp.draw(design, 0)
    assert len(drawn) == 3
    e = smp.estimate(pi, drawn, GAINS[levels[drawn]])
    want = estimate_units(fr, dist, GAINS, pi, drawn, GAINS[levels[drawn]])
    np.testing.assert_allclose(e.value, want.value)


def test_the_judged_share_of_an_ideal_is_its_judged_documents_dcg_over_the_expected_ideal():
    """q1's ideal is its judged documents' (share 1); q2's one judged Substitute against three holes of a
    uniform model: the expected counts at levels >= 1, 2, 3 are 1 + 2.25, 1 + 1.5 and 0.75."""
    flat = np.full((5, 4), 0.25)
    fr = frame(RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3)
    shares = judged_shares(fr, flat, GAINS)
    D = discounts(3)
    ideal = sum(cumulative(j + 3 * p, D)[0] for j, p in ((1, 0.75), (1, 0.5), (0, 0.25)))
    assert shares == {"q1": 1.0, "q2": pytest.approx(2 * 1.0 / ideal)}
    assert shares["q2"] < HOLE_WHEN


def test_the_capped_draws_inclusion_probabilities_are_exact_over_every_subset():
    """Every subset of 7 units of 1 to 4 rows, weighted by its Poisson probability, kept when its rows fall in
    [5, 7]: each unit's share of the kept mass is what the recursion says."""
    p = np.array([0.3, 0.6, 0.45, 0.2, 0.7, 0.5, 0.35])
    cost = np.array([1, 2, 1, 3, 2, 4, 1])
    kept, inside = 0.0, np.zeros(7)
    for mask in itertools.product([False, True], repeat=7):
        m = np.array(mask)
        if 5 <= cost[m].sum() <= 7:
            w = np.prod(np.where(m, p, 1 - p))
            kept += w
            inside += w * m
    got, Z = conditional(p, cost, 5, 7)
    assert Z == pytest.approx(kept, abs=1e-12)
    np.testing.assert_allclose(got, inside / kept, atol=1e-12)


def test_a_capped_draw_never_passes_the_budget_spends_95_percent_and_matches_its_probabilities():
    rng = np.random.default_rng(3)
    cost = rng.integers(1, 13, 120)
    weight = rng.uniform(0.1, 3.0, 120)
    for budget in (40, 150):
        target = np.minimum(weight * budget / (weight * cost).sum(), 1.0)
        capped = condition(target, cost, budget)
        assert np.abs(capped.pi - target).max() < 0.05  # the fixed point brings the exact ones near the allocation's
        gen = np.random.default_rng(1)
        hits, rows = np.zeros(len(cost)), set()
        for _ in range(4000):
            m = capped.draw(gen)
            rows.add(int(cost[m].sum()))
            hits += m
        assert min(rows) >= 0.95 * budget and max(rows) <= budget, (budget, min(rows), max(rows))
        assert np.abs(hits / 4000 - capped.pi).max() < 0.035  # the draw is the design: sampling error ~0.008
    ones = condition(np.full(50, 0.3), np.ones(50, dtype=int), 15)
    assert {int(ones.draw(np.random.default_rng(s)).sum()) for s in range(20)} == {15}  # one-row units: the budget


def test_the_hole_design_judges_whole_the_queries_whose_ideal_rests_on_their_holes():
    """Under the judged pairs' shares, q1's ideal is all judged (share 1: its holes single) and q2's mostly
    holes (share under 0.75: one unit)."""
    smp = Sampler.over("hole", RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3,
                       lambda holes: (np.full((len(holes), 4), 0.25), GAINS), prior=np.full(4, 0.25))  # fmt: skip
    assert [u.holes for u in smp.fr.units] == [("h1",), ("h2",), ("g1", "g2", "g3")]
    flat = Sampler.over("hole", RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3,
                        lambda holes: (np.full((len(holes), 4), 0.25), GAINS))  # fmt: skip
    assert len(flat.fr.units) == 5  # no prior: every hole a unit


def test_a_capped_draw_in_a_range_few_poisson_draws_reach_is_still_the_design():
    """Whole queries of 1 to 15 rows against a budget of 20 (the range 19..20 that a Poisson draw almost never
    hits): the draw is taken from the conditional law directly, so it never fails, never passes the budget,
    and each unit comes up as often as its exact probability says; a unit of more rows than the budget has
    probability 0, and the estimator bounds its part instead of estimating it."""
    from stagebench.judgments.estimate import Frame, QueryFrame, Unit, unreached

    rng = np.random.default_rng(7)
    cost = np.concatenate([rng.integers(1, 16, 40), [25, 30]])
    target = np.minimum(20 * np.ones(len(cost)) / cost.sum(), 1.0)
    capped = condition(target, cost, 20)
    assert capped.pi[-2:].tolist() == [0.0, 0.0] and capped.kept > 0
    gen = np.random.default_rng(0)
    hits, rows = np.zeros(len(cost)), []
    for _ in range(3000):
        m = capped.draw(gen)
        rows.append(int(cost[m].sum()))
        hits += m
    assert 19 <= min(rows) and max(rows) <= 20
    assert np.abs(hits / 3000 - capped.pi).max() < 0.035 and hits[-2:].sum() == 0
    q = QueryFrame("q", ("d",), np.ones((2, 1)), np.zeros(2), (), 10, None)
    fr = Frame(["a", "b"], [q, q], [Unit("q", ("d",), 0, single=False)], 10, [("a", "b")])
    slack = unreached(fr, np.array([[0.2], [0.1], [0.1]]), np.array([0.0]))
    np.testing.assert_allclose(slack, [0.3, 0.4, 0.6])  # the most a query's share (1/2 of [0, 1]) can move from 0.2, 0.1


def test_a_capped_draw_with_sure_units_draws_the_rest_in_the_window_they_leave():
    """Units of probability 1 are always in and their rows come off the window: the others' exact probabilities
    are for that window, and the draws bear them out (a window not net of the sure rows gave pi 0.871 for a
    unit drawn 0.802 of the time)."""
    rng = np.random.default_rng(11)
    cost = rng.integers(1, 6, 60)
    target = np.minimum(rng.uniform(0.05, 0.6, 60), 1.0)
    target[:6] = 1.0  # sure
    budget = int(round(float(target @ cost)))
    capped = condition(target, cost, budget)
    assert (capped.pi[:6] == 1.0).all()
    gen = np.random.default_rng(2)
    hits, rows = np.zeros(len(cost)), []
    for _ in range(4000):
        m = capped.draw(gen)
        assert m[:6].all()
        rows.append(int(cost[m].sum()))
        hits += m
    assert capped.lo <= min(rows) and max(rows) <= capped.hi == budget
    assert np.abs(hits / 4000 - capped.pi).max() < 0.03  # sampling error ~0.008
    assert (capped.pi @ cost) == pytest.approx(np.mean(rows), abs=0.5)  # the exact probabilities are the draw's
