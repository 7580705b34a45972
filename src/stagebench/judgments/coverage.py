"""How the estimated view fares when the answers are known: many simulated rounds of the sampling
plan (:mod:`stagebench.judgments.estimate`), each drawing its sample with a new seed, answered from
known grades (the rules judge's on the embedded data, or judgments hidden on purpose), and scored
against the true values: the share of rounds whose 95% interval holds the truth (coverage), per stage
and per pair; the pairs settled in the true order and in the wrong one; the intervals' widths.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from stagebench.judgments.estimate import Frame, estimate, inclusion, predict


@dataclass
class Budgeted:
    """One predictor at one budget over every round."""

    predictor: str
    budget: int
    rounds: int
    judged_mean: float  # holes judged a round, on average (Poisson: around the budget)
    coverage: dict[str, float]  # target -> share of rounds whose interval holds the truth
    width: dict[str, float]  # target -> mean interval width
    settled_right: list[int]  # per round: pairs settled in the true order
    wrong: dict[str, float]  # pair -> share of rounds settled in the wrong order
    aimed: list[str]
    seconds_per_round: float

    @property
    def worst(self) -> tuple[str, float]:
        t = min(self.coverage, key=self.coverage.__getitem__)
        return t, self.coverage[t]


@dataclass
class Coverage:
    targets: list[str]
    pairs: list[str]
    truth: dict[str, float]
    model: dict[str, dict[str, float]]  # predictor -> its own point estimates, before any sample
    rows: list[Budgeted] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The coverage table, one block a grade model: a line a budget (worst coverage, settled pairs,
        wrong orders, widths), then every target's coverage and mean width at each budget."""
        out = ["Estimated view, simulated rounds: 95% intervals against the truth", *self.notes,
               "truth: " + ", ".join(f"{t} {v:+.4f}" if " - " in t else f"{t} {v:.4f}" for t, v in self.truth.items()), ""]
        for name in self.model:
            rows = [r for r in self.rows if r.predictor == name]
            out.append(f"grade model: {name} (its own estimate before any sample: "
                       + ", ".join(f"{t} {v:.4f}" for t, v in self.model[name].items() if " - " not in t) + ")")
            out.append(f"{'budget':>6}  {'judged':>7}  {'rounds':>6}  {'worst coverage':<34}  {'settled (median)':>16}  "
                       f"{'wrong order (max)':>17}  {'s/round':>7}")
            for r in rows:
                t, c = r.worst
                out.append(f"{r.budget:>6}  {r.judged_mean:>7.0f}  {r.rounds:>6}  {f'{c:.3f} ({t})':<34}  "
                           f"{f'{np.median(r.settled_right):.0f} of {len(self.pairs)}':>16}  {max(r.wrong.values(), default=0):>17.3f}  "
                           f"{r.seconds_per_round:>7.3f}")  # fmt: skip
            out.append(f"{'target':<36}" + "".join(f"  {f'cov@{r.budget}':>9}  {f'width@{r.budget}':>11}" for r in rows))
            for t in self.targets:
                out.append(f"{t:<36}" + "".join(f"  {r.coverage[t]:>9.3f}  {r.width[t]:>11.4f}" for r in rows))
            out.append("")
        return "\n".join(out)

    def as_json(self) -> dict:
        return {"targets": self.targets, "pairs": self.pairs, "truth": self.truth, "model": self.model,
                "notes": self.notes,
                "rows": [{**vars(r), "worst": list(r.worst), "settled_median": float(np.median(r.settled_right))}
                         for r in self.rows]}  # fmt: skip


def covered(low: np.ndarray, high: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """(rounds, targets): whether each round's interval holds the true value - both ends, to float rounding."""
    return (low <= theta + 1e-12) & (theta - 1e-12 <= high)


def orders(low: np.ndarray, high: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rounds, pairs) each: an interval that excludes 0 on the side of the true difference (settled in the
    true order), and one that excludes 0 on the other side or settles a true tie (a wrong order)."""
    right = ((low > 0) & (theta > 0)) | ((high < 0) & (theta < 0))
    wrong = ((low > 0) & (theta <= 0)) | ((high < 0) & (theta >= 0))
    return right, wrong


def simulate(fr: Frame, predictors: Mapping[str, tuple[np.ndarray, np.ndarray]], truth_gains: np.ndarray,
             budgets: Sequence[int], rounds: int, seed: int, low: float, high: float) -> Coverage:  # fmt: skip
    """``predictors``: name -> (expected gain, variance) of every hole in :meth:`Frame.holes` order;
    ``truth_gains``: every hole's true gain, same order; ``low``/``high``: the scale's gain range."""
    known, F = fr.contributions(truth_gains)
    theta = known + F.sum(axis=1)
    names = fr.targets
    s = len(fr.stages)
    pairs = names[s:]
    out = Coverage(names, pairs, dict(zip(names, theta.tolist())), {})
    starts = np.array([a for a, _ in fr.spans], dtype=int)
    ends = np.array([b for _, b in fr.spans], dtype=int)
    for pname, (m, v) in predictors.items():
        pred = predict(fr, m, v)
        out.model[pname] = dict(zip(names, pred.point.tolist()))
        for b in budgets:
            design = inclusion(fr, pred, b)
            rng = np.random.default_rng([seed, b])
            lo, hi, judged = [], [], []
            t0 = time.perf_counter()
            for _ in range(rounds):
                drawn = np.flatnonzero(rng.random(len(design.pi)) < design.pi)
                holes = np.concatenate([np.arange(starts[i], ends[i]) for i in drawn]) if len(drawn) else np.zeros(0, int)
                e = estimate(fr, m, design.pi, drawn, truth_gains[holes], low, high, variances=v)
                lo.append(e.low)
                hi.append(e.high)
                judged.append(e.judged)
            took = (time.perf_counter() - t0) / max(rounds, 1)
            L, H = np.array(lo), np.array(hi)
            cover = covered(L, H, theta).mean(axis=0)
            right, wrong = orders(L[:, s:], H[:, s:], theta[s:])
            out.rows.append(Budgeted(pname, b, rounds, float(np.mean(judged)), dict(zip(names, cover.tolist())),
                                     dict(zip(names, (H - L).mean(axis=0).tolist())), right.sum(axis=1).tolist(),
                                     dict(zip(pairs, wrong.mean(axis=0).tolist())), design.aimed, took))  # fmt: skip
    return out


__all__ = ["Budgeted", "Coverage", "covered", "orders", "simulate"]
