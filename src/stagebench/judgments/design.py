"""One sampling design over a folder's holes, written once for the plan (``plan-judgments --strategy
sample``), the simulated rounds (``--simulate``) and the estimate (``add-judgments``): its units, the
grade model's predictions, every unit's probability for a budget, the draw, and the estimate.

Two designs (``--design``; ``query`` the default, :data:`DEFAULT`):

- ``hole``: every hole is a unit, so one judgment buys one hole, in every query whose judged documents
  make at least :data:`HOLE_WHEN` of its expected ideal DCG; the targets are linearised where such a
  query's ideal can change (:mod:`stagebench.judgments.linear`, its bias measured in docs/metrics.md). A
  query whose ideal rests on its holes is judged whole, as in the query design.
- ``query``: a query whose ideal can change is one unit (all its holes judged together), so the
  estimator is exactly unbiased with no expansion.

Either way the draw is capped (:mod:`stagebench.judgments.capped`: conditional Poisson on the rows, with
exact inclusion probabilities): the rows never exceed the budget and spend at least 95% of it (exactly the
budget when every unit is one hole). A round recorded before capped draws was Poisson (``draws: poisson`` in its
record) and is estimated as such.

Measured (docs/metrics.md#the-hole-design): every hole a unit settles more pairs where the judged documents
already make most of each query's ideal DCG (the embedded benchmark), and its expansion's remainder is
large where the ideals rest on the holes (a bias of 0.2-0.5 on a stage's nDCG@10 on the ESCI rows, coverage
down to 0): hence the choice query by query, by the judged pairs' grade shares rather than the grade
model's claims. Where few queries qualify it is the query design, as valid and as decisive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from stagebench.judgments.capped import condition
from stagebench.judgments.estimate import (Estimate, Frame, Prediction, draw, estimate, frame, inclusion,
                                           Design as Probabilities)  # fmt: skip
from stagebench.judgments.linear import estimate_units, fourth_moments, judged_shares, unit_prediction
from stagebench.judgments.power import Power, power, rehearse

HOLE, QUERY = "hole", "query"
DESIGNS = (HOLE, QUERY)
#: the design a round takes unless told: the query design, exactly unbiased; with the floor's degrees of freedom
#: pooled into the interval's t (:func:`~stagebench.judgments.estimate.variance`) it is as decisive as the hole
#: design or more on the three worlds of docs/metrics.md (pairs settled at 100 / 300 / 1,000 judgments, 70%
#: hidden: 2/5/5 as the hole design's on the embedded benchmark, 0/2/3 against 0/1/3 on Cranfield, 0/1/4 against
#: 0/0/3 on the ESCI rows; pair intervals 17-34% narrower on the last two, 6-13% wider on the first) and the
#: plan's predicted widths hold for it on all three (the hole design's were a third too narrow on the ESCI rows)
DEFAULT = QUERY
CAPPED, POISSON = "capped", "poisson"  # the draws: capped at the budget, or Poisson (rounds recorded before)
#: the hole design cuts a query into single holes when its judged documents make at least this share of its
#: expected ideal DCG (else the query is one unit); on average the embedded benchmark's make 0.88, Cranfield's
#: with 70% of its pairs hidden 0.50, the ESCI rows' 0.19
HOLE_WHEN = 0.75


@dataclass
class Sampler:
    """A design (:data:`DESIGNS`) over one frame, with the grade model's distribution of every hole's grade."""

    kind: str
    fr: Frame
    dist: np.ndarray  # (holes, levels), Frame.holes order
    gains: np.ndarray  # each level's gain, ascending
    draws: str = CAPPED  # CAPPED or POISSON

    @classmethod
    def over(cls, kind: str, ranked: Mapping[str, Mapping[str, Sequence[str]]], qrels: Mapping[str, Mapping[str, int]],
             queries: Sequence[str], k: int, gain, top: int, predict_dist, prior: np.ndarray | None = None) -> Sampler:  # fmt: skip
        """The frame of ``kind`` and its holes' distributions (``predict_dist``: the holes -> (holes x levels,
        the levels' gains)). The hole design judges whole each query whose judged documents make less than
        :data:`HOLE_WHEN` of its expected ideal DCG under ``prior`` (the judged pairs' grade shares, one a
        level; None: no query whole)."""
        if kind not in DESIGNS:
            raise ValueError(f"design {kind!r}: one of {', '.join(DESIGNS)}")
        fr = frame(ranked, qrels, queries, k, gain, top, design=kind)
        dist, gains = predict_dist(fr.holes())
        gains = np.asarray(gains, dtype=np.float64)
        if kind == HOLE and prior is not None:
            shares = judged_shares(fr, np.tile(prior, (len(fr.holes()), 1)), gains)
            whole = {q for q, x in shares.items() if x < HOLE_WHEN}
            if whole:  # the same holes in the same order: only the units change
                fr = frame(ranked, qrels, queries, k, gain, top, design=kind, whole=whole)
        return cls(kind, fr, np.asarray(dist, dtype=np.float64), gains)

    @property
    def cost(self) -> np.ndarray:
        """Every unit's judgments (its holes)."""
        return np.array([u.cost for u in self.fr.units], dtype=np.int64)

    @property
    def means(self) -> np.ndarray:
        return self.dist @ self.gains

    @property
    def variances(self) -> np.ndarray:
        m = self.means
        return np.maximum(self.dist @ self.gains**2 - m**2, 0.0)

    @property
    def fourths(self) -> np.ndarray:
        """Every hole's fourth central moment of its gain under the model."""
        return fourth_moments(self.dist, self.gains)

    def prediction(self) -> Prediction:
        """The grade model's view of every unit (the query design: :func:`predict`; the hole design: the
        linearised targets at the model's expectation)."""
        if self.kind == HOLE:
            return unit_prediction(self.fr, self.dist, self.gains)[1]
        known, P = self.fr.contributions(self.means)
        return Prediction(known, P, self.fr.sensitivity(self.means, self.variances),
                          self.fr.fourth(self.means, self.variances, self.fourths))

    def probabilities(self, budget: int, aim: Sequence[str] | None = None, pred: Prediction | None = None) -> Probabilities:
        """Every unit's probability for ``budget`` judgments (:func:`~stagebench.judgments.estimate.inclusion`'s
        allocation; a capped draw's exact ones, :func:`~stagebench.judgments.capped.condition`)."""
        design = inclusion(self.fr, pred or self.prediction(), budget, aim)
        if self.draws == CAPPED and len(design.pi):
            capped = condition(design.pi, self.cost, budget)
            design = Probabilities(capped.pi, design.aimed, design.reachable, capped)
        return design

    def powers(self, design: Probabilities, budget: int, pred: Prediction | None = None) -> list[Power]:
        """What ``design`` (:meth:`probabilities` at ``budget``) buys each pair it aims at, if the grade model is
        right: the half-width its rounds would show (rehearsed, :func:`~stagebench.judgments.power.rehearse`)
        and the judgments that settle the pair with 80% power (:func:`~stagebench.judgments.power.power`)."""
        pred = pred or self.prediction()
        half = rehearse(self, design)
        names = self.fr.targets
        return [power(self, pred, t, budget, float(half[names.index(t)])) for t in design.aimed if " - " in t]

    def draw(self, design: Probabilities, seed) -> np.ndarray:
        """The drawn units' indices (``design``: :meth:`probabilities`')."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return np.flatnonzero(design.capped.draw(rng) if design.capped is not None else draw(design.pi, rng))

    def estimate(self, pi: np.ndarray, drawn: Sequence[int], drawn_gains: np.ndarray) -> Estimate:
        """The estimate from the drawn units (``drawn_gains``: their holes' judged gains, unit by unit)."""
        idx = np.asarray(drawn, dtype=int)
        if self.kind == HOLE:
            return estimate_units(self.fr, self.dist, self.gains, pi, idx, np.asarray(drawn_gains, dtype=np.float64))
        return estimate(self.fr, self.means, pi, idx, drawn_gains, float(self.gains.min()), float(self.gains.max()),
                        variances=self.variances, fourths=self.fourths)  # fmt: skip


__all__ = ["CAPPED", "DEFAULT", "DESIGNS", "HOLE", "HOLE_WHEN", "POISSON", "QUERY", "Sampler"]
