"""One sampling design over a folder's holes, written once for the plan (``plan-judgments --strategy
sample``), the simulated rounds (``--simulate``) and the estimate (``add-judgments``): its units, the
grade model's predictions, every unit's probability for a budget, the draw, and the estimate.

Two designs (``--design``):

- ``hole`` (the default): every hole is a unit, so one judgment buys one hole in every query; the
  targets are linearised where a query's ideal can change (:mod:`stagebench.judgments.linear`, its bias
  measured in docs/metrics.md), and the draw has a fixed size (Pareto pi-ps): the rows are the budget.
- ``query``: a query whose ideal can change is one unit (all its holes judged together), so the
  estimator is exactly unbiased with no expansion; the draw is Poisson, its size random around the budget.

On the embedded benchmark and on Cranfield and the ESCI rows with 70% of the pairs hidden, the hole
design settles more pairs at every budget measured and keeps its coverage (docs/metrics.md), hence the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from stagebench.judgments.estimate import (Estimate, Frame, Power, Prediction, draw, estimate, frame, inclusion, power,
                                           Design as Probabilities)  # fmt: skip
from stagebench.judgments.linear import estimate_holes, linearise

HOLE, QUERY = "hole", "query"
DESIGNS = (HOLE, QUERY)


@dataclass
class Sampler:
    """A design (:data:`DESIGNS`) over one frame, with the grade model's distribution of every hole's grade."""

    kind: str
    fr: Frame
    dist: np.ndarray  # (holes, levels), Frame.holes order
    gains: np.ndarray  # each level's gain, ascending

    @classmethod
    def over(cls, kind: str, ranked: Mapping[str, Mapping[str, Sequence[str]]], qrels: Mapping[str, Mapping[str, int]],
             queries: Sequence[str], k: int, gain, top: int, predict_dist) -> Sampler:  # fmt: skip
        """The frame of ``kind`` and its holes' distributions (``predict_dist``: the holes -> holes x levels)."""
        if kind not in DESIGNS:
            raise ValueError(f"design {kind!r}: one of {', '.join(DESIGNS)}")
        fr = frame(ranked, qrels, queries, k, gain, top, design=kind)
        dist, gains = predict_dist(fr.holes())
        return cls(kind, fr, np.asarray(dist, dtype=np.float64), np.asarray(gains, dtype=np.float64))

    @property
    def fixed(self) -> bool:
        """Whether the draw has a fixed size (the hole design's Pareto pi-ps)."""
        return self.kind == HOLE

    @property
    def means(self) -> np.ndarray:
        return self.dist @ self.gains

    @property
    def variances(self) -> np.ndarray:
        m = self.means
        return np.maximum(self.dist @ self.gains**2 - m**2, 0.0)

    def prediction(self) -> Prediction:
        """The grade model's view of every unit (the query design: :func:`predict`; the hole design: the
        linearised targets at the model's expectation)."""
        if self.kind == HOLE:
            return linearise(self.fr, self.dist, self.gains).predict(self.dist)
        known, P = self.fr.contributions(self.means)
        return Prediction(known, P, self.fr.sensitivity(self.means, self.variances))

    def probabilities(self, budget: int, aim: Sequence[str] | None = None, pred: Prediction | None = None) -> Probabilities:
        return inclusion(self.fr, pred or self.prediction(), budget, aim)

    def power(self, target: str, budget: int, pred: Prediction | None = None) -> Power:
        return power(self.fr, pred or self.prediction(), target, budget)

    def draw(self, pi: np.ndarray, seed) -> np.ndarray:
        """The drawn units' indices."""
        return np.flatnonzero(draw(pi, seed, fixed=self.fixed))

    def estimate(self, pi: np.ndarray, drawn: Sequence[int], drawn_gains: np.ndarray) -> Estimate:
        """The estimate from the drawn units (``drawn_gains``: their holes' judged gains, unit by unit)."""
        idx = np.asarray(drawn, dtype=int)
        if self.kind == HOLE:
            levels = np.searchsorted(self.gains, drawn_gains)
            if len(levels) and (levels.max() >= len(self.gains) or not np.allclose(self.gains[levels], drawn_gains)):
                raise ValueError("a judged gain is not on the scale's gains")
            return estimate_holes(self.fr, self.dist, self.gains, pi, idx, levels, fixed=True)
        return estimate(self.fr, self.means, pi, idx, drawn_gains, float(self.gains.min()), float(self.gains.max()),
                        variances=self.variances)  # fmt: skip


__all__ = ["DESIGNS", "HOLE", "QUERY", "Sampler"]
