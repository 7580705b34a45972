"""What a budget buys before any judging: each aimed pair's predicted interval and the judgments that
settle it with 80% power, *if the grade model is right* - found by rehearsing the round itself.

**A rehearsal** (:func:`rehearse`) runs the design's own draw and the estimator's own interval on worlds the
grade model makes: every hole's grade drawn from its predicted distribution, then the capped draw, the
estimate and its 95% interval, :data:`REHEARSALS` times. What the round will show, if the model is right, is
then measured rather than approximated: the Student t at the degrees of freedom the drawn units will have
(2-7 where a few whole queries carry the variance), the pooled variance floor, the refit. A formula in the
model's variances alone (``t`` at the units expected x the predicted standard error, as before) predicted
half-widths 11-47% too narrow at 100 judgments on the three worlds of docs/metrics.md, where the rehearsal
comes within 15% (measured there).

**Power**: a round settles a pair with 80% power when its interval excludes 0 in 4 rounds of 5, i.e. when the
predicted difference is at least the interval's half-width plus ``Z80`` standard errors of the estimate.
:func:`power` finds the fewest judgments that do so for the design aimed at that pair alone: the model's
standard error at each budget (``sum (1 - pi) / pi * A``, the design's variance), scaled by what the
rehearsal shows the interval adds to ``1.96`` of them, rehearsed at the budget asked for and again at the
answer. It is never more than the holes there are: a census has no interval and settles any difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from stagebench.judgments.estimate import Z95, Design, Estimate, Frame, Prediction, inclusion

#: the normal quantile of 80% power: a difference settles in 80% of rounds when it is the interval's half-width
#: plus this many standard errors from 0
Z80 = 0.8416212335729143
#: the rounds a rehearsal runs (the mean half-width's own spread over rounds, about 5% of it at 40)
REHEARSALS = 40


class Rehearsable(Protocol):
    """A sampling design as a round takes it (:class:`stagebench.judgments.design.Sampler`)."""

    fr: Frame
    dist: np.ndarray
    gains: np.ndarray

    def probabilities(self, budget: int, aim: Sequence[str] | None = None, pred: Prediction | None = None) -> Design: ...

    def draw(self, design: Design, seed) -> np.ndarray: ...

    def estimate(self, pi: np.ndarray, drawn: Sequence[int], drawn_gains: np.ndarray) -> Estimate: ...


def model_world(dist: np.ndarray, gains: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Every hole's gain drawn from its predicted distribution (``dist``: holes x levels)."""
    cum = np.cumsum(dist, axis=1)
    u = rng.random(len(dist)) * cum[:, -1]
    return gains[np.minimum((u[:, None] > cum).sum(axis=1), len(gains) - 1)]


def rehearse(smp: Rehearsable, design: Design, rounds: int = REHEARSALS, seed: int = 0) -> np.ndarray:
    """Every target's mean 95% half-width over ``rounds`` rounds of ``design`` on worlds the grade model makes
    (module doc); seeded, so a plan says the same each time."""
    rng = np.random.default_rng([seed, rounds, len(design.pi)])
    spans = smp.fr.spans
    total = np.zeros(len(smp.fr.targets))
    for _ in range(rounds):
        world = model_world(smp.dist, smp.gains, rng)
        drawn = smp.draw(design, rng)
        holes = np.concatenate([np.arange(*spans[i]) for i in drawn]) if len(drawn) else np.zeros(0, dtype=int)
        est = smp.estimate(design.pi, drawn, world[holes])
        total += (est.high - est.low) / 2
    return total / max(rounds, 1)


@dataclass(frozen=True)
class Power:
    """What a budget buys one pair if the grade model is right: its predicted difference, the 95% interval's
    predicted half-width at the budget (the round's own design, rehearsed), and the judgments that settle it
    with 80% power - the interval excludes 0 in 4 rounds of 5 - never more than the holes there are (None: the
    model predicts no difference, and no budget settles a difference of 0; ``holes``: the design's holes, a
    census of which settles any difference)."""

    target: str
    difference: float
    half_width: float
    needed: int | None
    holes: int = 0

    def line(self, budget: int) -> str:
        settled = "settled" if abs(self.difference) > self.half_width else "not settled"
        if self.needed is None:
            need = "no budget settles it: the model predicts no difference"
        elif self.holes and self.needed >= self.holes:
            need = f"judging all {self.holes:,} holes settles it exactly (no smaller budget settles it with 80% power)"
        else:
            need = f"about {self.needed:,} judgments would settle it with 80% power"
        return (f"{self.target}: the model predicts {self.difference:+.4f}; at {budget:,} judgments the 95% interval "
                f"would be +-{self.half_width:.4f} ({settled}); {need} (if the model is right)")  # fmt: skip


def model_se(fr: Frame, pred: Prediction, target: int, pi: np.ndarray) -> float:
    """The standard error the grade model predicts for ``target`` under probabilities ``pi`` (units no draw
    reaches left out: they are bounded, not estimated)."""
    reach = pi > 0
    q = np.where(reach, (1 - pi) / np.where(reach, pi, 1.0), 0.0)
    return float(np.sqrt(q @ pred.A[target]))


def power(smp: Rehearsable, pred: Prediction, target: str, budget: int, half_width: float, rounds: int = REHEARSALS) -> Power:
    """:class:`Power` of ``target`` at ``budget`` (``half_width``: the round's design's, :func:`rehearse`):
    the fewest judgments (a bisection over the budget, the model's standard error of the design aimed at
    ``target`` alone) whose interval, scaled as the rehearsal shows, clears the predicted difference by ``Z80``
    standard errors; rehearsed at ``budget``, then again at that answer (the interval's excess over ``1.96``
    standard errors shrinks as the budget grows). A guide, as the design's allocation is."""
    fr = smp.fr
    t = fr.targets.index(target)
    holes = int(sum(u.cost for u in fr.units))
    d = float(pred.point[t])
    if abs(d) <= 1e-12 or not holes:
        return Power(target, d, half_width, None, holes)

    def se(n: int) -> float:
        return model_se(fr, pred, t, inclusion(fr, pred, n, aim=[target]).pi)

    def excess(n: int) -> float:  # the rehearsed half-width over 1.96 model standard errors, the design aimed alone
        s = se(n)
        if s <= 0:
            return 1.0
        return float(rehearse(smp, smp.probabilities(n, aim=[target], pred=pred), rounds)[t]) / (Z95 * s)

    def needed(scale: float) -> int:
        lo, hi = 0, holes  # a census settles any difference: its interval has width 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            s = se(mid)
            lo, hi = (lo, mid) if (scale * Z95 + Z80) * s < abs(d) else (mid, hi)
        return hi

    n = needed(excess(min(budget, holes)))
    if n < holes:
        n = needed(excess(n))
    return Power(target, d, half_width, n, holes)


__all__ = ["REHEARSALS", "Z80", "Power", "Rehearsable", "model_se", "model_world", "power", "rehearse"]
