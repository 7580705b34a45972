"""Paired significance tests, multiple-comparison correction and bootstrap intervals (and the
percentiles of latencies).

All functions take per-query values of two systems on the same queries (same order).

* :func:`paired_t_test`: Student's paired t-test, two-sided (agrees with
  ``scipy.stats.ttest_rel``); when every difference is equal it returns p = 1 if they are
  all 0 and p = 0 otherwise (scipy returns NaN there).
* :func:`randomization_test`: Fisher's paired randomization (sign-flip permutation) test
  on the mean difference, two-sided, ``p = (1 + #{|perm| >= |obs|}) / (1 + R)`` with a
  fixed seed, so it is reproducible and never exactly 0.
* :func:`holm`: Holm-Bonferroni adjusted p-values.
* :func:`bootstrap_ci`: percentile bootstrap interval of the mean over queries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr  # Student's t CDF: what scipy.stats.t.sf computes, without scipy.stats' 0.6 s import


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Return ``(t, p)`` for the paired two-sided t-test of ``a - b``."""

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = d.size
    if n < 2:
        return 0.0, 1.0
    mean = d.mean()
    sd = d.std(ddof=1)
    if sd == 0 or not math.isfinite(sd):
        return (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    t = mean / (sd / math.sqrt(n))
    return float(t), float(2 * stdtr(n - 1, -abs(t)))


def randomization_test(a: Sequence[float], b: Sequence[float], permutations: int = 10000, seed: int = 42) -> float:
    """Two-sided paired randomization test p-value of the mean difference."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size == 0 or not np.any(d):
        return 1.0
    obs = abs(d.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    done = 0
    chunk = max(1, min(permutations, 2_000_000 // max(d.size, 1)))
    tol = 1e-12 * max(1.0, obs)
    while done < permutations:
        m = min(chunk, permutations - done)
        signs = rng.integers(0, 2, size=(m, d.size), dtype=np.int8) * 2 - 1
        means = np.abs(signs @ d) / d.size
        hits += int(np.count_nonzero(means >= obs - tol))
        done += m
    return (1 + hits) / (1 + permutations)


def exact_randomization_p(a: Sequence[float], b: Sequence[float]) -> float:
    """The exact two-sided sign-flip p-value by enumerating all 2^n flips (small n only)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = d.size
    if n > 20:
        raise ValueError("exact enumeration is for n <= 20")
    obs = abs(d.mean())
    grid = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    means = np.abs(grid @ d) / n
    return float(np.mean(means >= obs - 1e-12 * max(1.0, obs)))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values (same order as given)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def format_p(p: float) -> str:
    """p-values below double precision's resolution of 1 - cdf read as <1e-16, not 0."""
    return "<1e-16" if p < 1e-16 else f"{p:.4g}"


def bootstrap_ci(values: Sequence[float], resamples: int = 2000, seed: int = 42, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(resamples, v.size))
    means = v[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


@dataclass
class PairTest:
    a: str
    b: str
    metric: str
    mean_a: float
    mean_b: float
    t: float
    p_t: float
    p_rand: float
    wins: int
    ties: int
    losses: int
    p_t_holm: float = 1.0
    p_rand_holm: float = 1.0

    def as_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in self.__dict__.items()}


def paired_test(a_name: str, b_name: str, metric: str, a: Sequence[float], b: Sequence[float],
            permutations: int, seed: int) -> PairTest:  # fmt: skip
    av, bv = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    t, p_t = paired_t_test(av, bv)
    diff = av - bv
    eps = 1e-12
    return PairTest(
        a=a_name, b=b_name, metric=metric, mean_a=float(av.mean()), mean_b=float(bv.mean()), t=t, p_t=p_t,
        p_rand=randomization_test(av, bv, permutations, seed),
        wins=int(np.sum(diff > eps)), ties=int(np.sum(np.abs(diff) <= eps)), losses=int(np.sum(diff < -eps)),
    )  # fmt: skip


def latency_percentiles(values_ms: Sequence[float]) -> tuple[float, float, float]:
    """p50, p95 and p99 of latencies (linear interpolation between order statistics, numpy's
    default; with 20 values p99 lies between the two slowest)."""
    a = np.asarray(values_ms, dtype=np.float64)
    return float(np.percentile(a, 50)), float(np.percentile(a, 95)), float(np.percentile(a, 99))
