"""A budget that is a cap: conditional Poisson sampling on the rows a draw costs.

The design's allocation (:func:`stagebench.judgments.estimate.inclusion`) gives every unit a target
probability ``pi``, with ``sum pi * cost`` the budget. A Poisson draw with those probabilities costs a
random number of rows (about +-2 sqrt(budget * mean cost)); a team pays raters by the row. Here the draw is
Poisson sampling with *working* probabilities ``p``, repeated until its rows fall in ``[lo, budget]``
(rejective sampling: Hajek, 1964; Chen, Dempster and Liu, *Biometrika* 81, 1994, for a fixed size): never
above the budget, and at least ``lo`` (the budget itself when every unit is one row, 95% of it otherwise).

The conditioning changes each unit's inclusion probability from ``p``; the exact one is computed, not
approximated, by a forward-backward recursion over the rows (each unit in or out, the rows so far kept
from 0 to the budget: ``O(units x budget)``)::

    P(unit i in | rows in [lo, hi]) = p_i * sum_r F_{i-1}(r) * G_{i+1}([lo - r - c_i, hi - r - c_i]) / Z

with ``F`` the distribution of the rows of the units before ``i``, ``G`` of those after, ``Z`` the chance a
draw is kept. The working probabilities are then moved (a few fixed-point steps, ``p <- p * pi / pi_exact``)
so that the exact ones come close to the allocation's; the estimator uses the exact ones, whatever they are.
A unit of probability 1 is always in, its rows taken off the range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the fixed-point steps that bring the exact probabilities near the allocation's
STEPS = 6
#: the least share of the budget a draw of units of several sizes spends
FLOOR = 0.95


def _forward(p: np.ndarray, cost: np.ndarray, hi: int) -> np.ndarray:
    """(units + 1, hi + 1): the distribution of the rows of the first ``i`` units (rows above ``hi`` dropped)."""
    F = np.zeros((len(p) + 1, hi + 1))
    F[0, 0] = 1.0
    for i, (q, c) in enumerate(zip(p, cost)):
        F[i + 1] = F[i] * (1 - q)
        if c <= hi:
            F[i + 1, c:] += F[i, : hi + 1 - c] * q
    return F


def exact(p: np.ndarray, cost: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, float]:
    """Every unit's inclusion probability given that the rows fall in ``[lo, hi]`` (units of ``p`` < 1; the
    range already net of the sure units), and the chance ``Z`` that they do."""
    n = len(p)
    F = _forward(p, cost, hi)
    B = _forward(p[::-1], cost[::-1], hi)[::-1]  # B[i]: the rows of units i.. (the last ones first)
    Z = float(F[n, lo : hi + 1].sum())
    out = np.zeros(n)
    if Z <= 0:
        return out, 0.0
    r = np.arange(hi + 1)
    for i in range(n):
        c = int(cost[i])
        if c > hi:
            continue
        after = np.concatenate([[0.0], np.cumsum(B[i + 1])])  # after[t]: P(rows of the later units < t)
        top = np.clip(hi - r - c, -1, hi) + 1
        bottom = np.clip(lo - r - c, 0, hi + 1)
        window = np.where(top > bottom, after[top] - after[bottom], 0.0)
        out[i] = p[i] * float(F[i] @ window) / Z
    return out, Z


@dataclass(frozen=True)
class Capped:
    """A rejective design: ``working`` the Poisson probabilities drawn with, ``pi`` the exact inclusion
    probabilities given the rows fall in ``[lo, hi]`` (sure units: 1), ``kept`` the chance a draw is kept."""

    working: np.ndarray
    pi: np.ndarray
    cost: np.ndarray
    lo: int
    hi: int
    kept: float

    def draw(self, rng: np.random.Generator, tries: int = 100_000) -> np.ndarray:
        """A draw (a mask): Poisson draws with the working probabilities until the rows fall in the range."""
        for _ in range(tries):
            m = rng.random(len(self.working)) < self.working
            if self.lo <= int(self.cost[m].sum()) <= self.hi:
                return m
        raise RuntimeError(f"no draw within {self.lo}..{self.hi} rows in {tries} tries (kept {self.kept:.2e})")


def condition(target: np.ndarray, cost: np.ndarray, budget: int, steps: int = STEPS) -> Capped:
    """The rejective design whose exact inclusion probabilities come close to ``target`` (the allocation's,
    ``sum target * cost`` = ``budget``), its rows in ``[lo, budget]`` (module doc)."""
    cost = np.asarray(cost, dtype=np.int64)
    sure = target >= 1.0
    rows_sure = int(cost[sure].sum())
    total = int(cost.sum())
    hi = min(budget, total)
    lo = hi if (cost == 1).all() else min(hi, int(np.ceil(FLOOR * hi)))
    lo_r, hi_r = max(0, lo - rows_sure), hi - rows_sure
    open_ = np.flatnonzero(~sure & (target > 0))
    p = np.clip(target[open_], 1e-9, 1 - 1e-9)
    c = cost[open_]
    pi_open, kept = exact(p, c, lo_r, hi_r)
    for _ in range(steps):
        if kept <= 0:
            break
        p = np.clip(p * target[open_] / np.maximum(pi_open, 1e-12), 1e-9, 1 - 1e-9)
        pi_open, kept = exact(p, c, lo_r, hi_r)
    if kept <= 0:  # no draw of these units can cost that many rows: the range opened to every draw up to the budget
        lo, lo_r = rows_sure, 0
        pi_open, kept = exact(p, c, lo_r, hi_r)
    working = np.where(sure, 1.0, 0.0)
    working[open_] = p
    pi = np.where(sure, 1.0, 0.0)
    pi[open_] = pi_open
    return Capped(working, pi, cost, lo, hi, kept)


__all__ = ["FLOOR", "STEPS", "Capped", "condition", "exact"]
