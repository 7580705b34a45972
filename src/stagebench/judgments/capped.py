"""A budget that is a cap: conditional Poisson sampling on the rows a draw costs.

The design's allocation (:func:`stagebench.judgments.estimate.inclusion`) gives every unit a target
probability ``pi``, with ``sum pi * cost`` the budget. A Poisson draw with those probabilities costs a
random number of rows (about +-2 sqrt(budget * mean cost)); a team pays raters by the row. Here the draw is
Poisson sampling with *working* probabilities ``p``, conditioned on its rows falling in ``[lo, budget]``
(rejective sampling: Hajek, 1964; Chen, Dempster and Liu, *Biometrika* 81, 1994, for a fixed size): never
above the budget, and at least ``lo`` (the budget itself when every unit is one row, 95% of it otherwise).
The draw comes from that conditional law directly, a unit at a time (:meth:`Capped.draw`), not by
redrawing until a Poisson draw lands in the range: a narrow range that few Poisson draws hit (a budget of
20 against whole queries of 15 rows) costs nothing more.

The conditioning changes each unit's inclusion probability from ``p``; the exact one is computed, not
approximated, by a forward-backward recursion over the rows (each unit in or out, the rows so far kept
from 0 to the budget: ``O(units x budget)``)::

    P(unit i in | rows in [lo, hi]) = p_i * sum_r F_{i-1}(r) * G_{i+1}([lo - r - c_i, hi - r - c_i]) / Z

with ``F`` the distribution of the rows of the units before ``i``, ``G`` of those after, ``Z`` the chance a
draw is kept. The working probabilities are then moved (a few fixed-point steps, ``p <- p * pi / pi_exact``)
so that the exact ones come close to the allocation's; the estimator uses the exact ones, whatever they are.
A unit of probability 1 is always in, its rows taken off the range. A unit of more rows than the range
leaves (a whole query of 15 holes at a budget of 10) cannot be drawn at all: its probability is 0, and the
estimator bounds its part instead of estimating it (:func:`stagebench.judgments.estimate.unreached`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: the fixed-point steps that bring the exact probabilities near the allocation's
STEPS = 6
#: the least share of the budget a draw of units of several sizes spends
FLOOR = 0.95
#: the least chance of the range a set of working probabilities may leave (below it the recursion's numbers
#: near underflow: a fixed-point step that pushes many units' working probabilities to 1 on a narrow range)
TINY = 1e-200


def _forward(p: np.ndarray, cost: np.ndarray, hi: int) -> np.ndarray:
    """(units + 1, hi + 1): the distribution of the rows of the first ``i`` units (rows above ``hi`` dropped)."""
    F = np.zeros((len(p) + 1, hi + 1))
    F[0, 0] = 1.0
    for i, (q, c) in enumerate(zip(p, cost)):
        F[i + 1] = F[i] * (1 - q)
        if c <= hi:
            F[i + 1, c:] += F[i, : hi + 1 - c] * q
    return F


def _windows(B: np.ndarray, width: int) -> np.ndarray:
    """Each row's sums over every window of ``width`` rows: ``W[i, j] = sum_{t = j - width + 1 .. j} B[i, t]``
    (rows below 0 count 0). Summed directly, not as differences of a cumulative sum, which cancel to 0 where
    the window holds a tiny share of the mass (a range of 5..5 rows kept 4e-21 of the draws)."""
    ones = np.ones(width)
    return np.stack([np.convolve(row, ones)[: B.shape[1]] for row in B]) if len(B) else np.zeros(B.shape)


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
    W = _windows(B[1:], hi - lo + 1)  # W[i, j]: P(rows of units i + 1.. in [j - (hi - lo), j])
    r = np.arange(hi + 1)
    for i in range(n):
        c = int(cost[i])
        if c > hi:
            continue
        j = hi - r - c  # the later units' rows must fall in [lo - r - c, hi - r - c]
        window = np.where(j >= 0, W[i][np.maximum(j, 0)], 0.0)
        out[i] = p[i] * float(F[i] @ window) / Z
    return out, Z


@dataclass(frozen=True)
class Capped:
    """A rejective design: ``working`` the Poisson probabilities drawn with, ``pi`` the exact inclusion
    probabilities given the rows fall in ``[lo, hi]`` (sure units: 1), ``kept`` the chance a Poisson draw
    with the working probabilities lands there (it may be tiny: the draw below never depends on it)."""

    working: np.ndarray
    pi: np.ndarray
    cost: np.ndarray
    lo: int
    hi: int
    kept: float

    @cached_property
    def _tail(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The open units (0 < working < 1), the window sums of the rows of the open units from each one on
        (``W[i, j]``: P(rows of open units i.. in [j - (hi - lo), j]), rows above the range dropped), and the
        range's top net of the sure units' rows."""
        sure = self.working >= 1.0
        open_ = np.flatnonzero(~sure & (self.working > 0))
        rows_sure = int(self.cost[sure].sum())
        lo, hi = max(0, self.lo - rows_sure), self.hi - rows_sure
        if hi < 0:
            raise ValueError(f"the sure units' {rows_sure} rows exceed the range {self.lo}..{self.hi}")
        B = _forward(self.working[open_][::-1], self.cost[open_][::-1], hi)[::-1]
        return open_, _windows(B, hi - lo + 1), hi

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """A draw (a mask) from the rejective design itself, exactly and in one pass, never by trial: the
        open units in order, each taken with its working probability times the chance that the later units
        can still bring the rows into the range, against the chance of that range without it (the
        conditional law of Poisson sampling given its rows, which :func:`exact` sums)."""
        open_, W, hi = self._tail
        if W[0, hi] <= 0:
            raise ValueError(f"no draw of these units costs {self.lo}..{self.hi} rows")
        m = self.working >= 1.0
        r = 0
        for i, u in enumerate(open_):
            c, q = int(self.cost[u]), float(self.working[u])
            take = q * W[i + 1, hi - r - c] if hi - r - c >= 0 else 0.0
            leave = (1 - q) * W[i + 1, hi - r]
            if rng.random() * (take + leave) < take:
                m[u] = True
                r += c
        return m


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
    # a unit of more rows than the range leaves can never be drawn: probability 0, left out of the recursion
    # (its working probability would otherwise be pushed to 1 and Z towards 0: 1e-107 with a dozen such units)
    open_ = np.flatnonzero(~sure & (target > 0) & (cost <= hi_r))
    p = np.clip(target[open_], 1e-9, 1 - 1e-9)
    c = cost[open_]
    pi_open, kept = exact(p, c, lo_r, hi_r)
    if kept <= TINY:  # no draw of these units can cost that many rows: the range opened to every draw up to the budget
        lo, lo_r = rows_sure, 0
        pi_open, kept = exact(p, c, lo_r, hi_r)
    for _ in range(steps):
        step = np.clip(p * target[open_] / np.maximum(pi_open, 1e-12), 1e-9, 1 - 1e-9)
        pi_step, kept_step = exact(step, c, lo_r, hi_r)
        if not kept_step > TINY:  # a step that leaves (almost) no draw in the range is not taken: the last one stands
            break
        p, pi_open, kept = step, pi_step, kept_step
    working = np.where(sure, 1.0, 0.0)
    working[open_] = p
    pi = np.where(sure, 1.0, 0.0)
    pi[open_] = pi_open
    return Capped(working, pi, cost, lo, hi, kept)


__all__ = ["FLOOR", "STEPS", "Capped", "condition", "exact"]
