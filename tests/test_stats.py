from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ttest_rel

from stagebench.stats import bootstrap_ci, exact_randomization_p, holm, paired_t_test, randomization_test


def test_t_test_agrees_with_scipy():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(3, 60))
        a, b = rng.random(n), rng.random(n) * 0.9
        t, p = paired_t_test(a, b)
        ref = ttest_rel(a, b)
        assert t == pytest.approx(ref.statistic, rel=1e-10)
        assert p == pytest.approx(ref.pvalue, rel=1e-10)


def test_t_test_degenerate_cases():
    assert paired_t_test([1, 2, 3], [1, 2, 3]) == (0.0, 1.0)
    assert paired_t_test([2, 3, 4], [1, 2, 3])[1] == 0.0


def test_randomization_reproduces_the_exact_p_value_within_monte_carlo_error():
    # 12 paired queries: all 2^12 sign flips give the exact p-value
    a = np.array([0.62, 0.71, 0.55, 0.80, 0.43, 0.91, 0.66, 0.58, 0.77, 0.49, 0.69, 0.73])
    b = np.array([0.60, 0.52, 0.57, 0.61, 0.40, 0.70, 0.69, 0.50, 0.61, 0.52, 0.55, 0.70])
    exact = exact_randomization_p(a, b)
    assert 0.01 < exact < 0.1  # a non-trivial p-value
    R = 20000
    p = randomization_test(a, b, permutations=R, seed=1)
    se = np.sqrt(exact * (1 - exact) / R)
    assert abs(p - exact) < 4 * se + 1 / R
    assert randomization_test(a, b, permutations=R, seed=1) == p  # fixed seed, same answer


def test_randomization_known_textbook_case():
    # one query differs by 1, three by 0: half of the sign flips reach |mean| >= 0.25 -> exact p = 1
    assert exact_randomization_p([1, 0, 0, 0], [0, 0, 0, 0]) == 1.0
    # four equal positive differences: only the all-plus and all-minus flips reach it -> p = 2/16
    assert exact_randomization_p([1, 1, 1, 1], [0, 0, 0, 0]) == pytest.approx(2 / 16)
    assert randomization_test([1, 1, 1, 1], [0, 0, 0, 0], permutations=40000, seed=0) == pytest.approx(0.125, abs=0.01)
    assert randomization_test([0.5, 0.5], [0.5, 0.5]) == 1.0


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.5]) == [1.0, 1.0]
    assert holm([0.6, 0.7, 0.001]) == [1.0, 1.0, pytest.approx(0.003)]  # capped at 1


def test_bootstrap_ci_contains_mean_and_narrows_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.random(30), rng.random(3000)
    lo, hi = bootstrap_ci(small)
    assert lo < small.mean() < hi
    lo2, hi2 = bootstrap_ci(large)
    assert (hi2 - lo2) < (hi - lo) / 4


def test_bootstrap_ci_matches_a_reimplemented_percentile_bootstrap():
    rng = np.random.default_rng(11)
    values = rng.random(87)
    for seed in (1, 42):
        lo, hi = bootstrap_ci(values, resamples=3000, seed=seed)
        # the percentile bootstrap from its definition: resample queries with replacement, take the
        # 2.5th and 97.5th percentiles of the resampled means (same generator and seed)
        gen = np.random.default_rng(seed)
        means = np.array([values[gen.integers(0, values.size, size=values.size)].mean() for _ in range(3000)])
        ref = np.percentile(means, [2.5, 97.5])
        assert (lo, hi) == pytest.approx(tuple(ref), abs=1e-12)


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(5)
    hits = 0
    trials = 300
    for t in range(trials):
        sample = rng.exponential(1.0, size=60)  # true mean 1.0, skewed like per-query metrics
        lo, hi = bootstrap_ci(sample, resamples=1000, seed=t)
        hits += lo <= 1.0 <= hi
    assert 0.90 <= hits / trials <= 0.985  # a 90% interval would cover about 0.90 or less


def test_compare_against_direct_computations():
    from stagebench.stats import paired_test

    a = [0.5, 0.7, 0.2, 0.9, 0.4, 0.4]
    b = [0.4, 0.7, 0.3, 0.5, 0.1, 0.4 + 1e-15]  # the last pair ties within 1e-12
    c = paired_test("x", "y", "nDCG@10", a, b, 2000, 7)
    assert (c.a, c.b, c.metric) == ("x", "y", "nDCG@10")
    assert c.mean_a == pytest.approx(np.mean(a)) and c.mean_b == pytest.approx(np.mean(b))
    assert (c.wins, c.ties, c.losses) == (3, 2, 1)
    assert (c.t, c.p_t) == pytest.approx(paired_t_test(a, b))
    assert c.p_rand == randomization_test(a, b, 2000, 7)
    d = c.as_dict()
    assert d["wins"] == 3 and d["p_rand"] == round(c.p_rand, 6) and d["metric"] == "nDCG@10"


def test_randomization_test_over_several_chunks():
    # 1,000 paired queries: the permutations are drawn in chunks of 2,000; 5,000 need three
    rng = np.random.default_rng(4)
    a = rng.random(1000)
    assert randomization_test(a + 0.5, a, permutations=5000, seed=1) == pytest.approx(1 / 5001)  # never reached
    b = a + rng.normal(0, 0.05, 1000)
    p = randomization_test(a, b, permutations=5000, seed=1)
    assert 0 < p <= 1 and p == randomization_test(a, b, permutations=5000, seed=1)
    assert abs(p - paired_t_test(a, b)[1]) < 0.05  # large n: the two tests agree closely
