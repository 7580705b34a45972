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

from stagebench.judgments.design import HOLE, Sampler
from stagebench.judgments.estimate import Z95, allocate
from stagebench.judgments.grades import prior_shift
from stagebench.judgments.linear import exact, unit_prediction
from stagebench.judgments.power import rehearse


@dataclass
class Budgeted:
    """One predictor at one budget over every round."""

    predictor: str
    design: str
    budget: int
    rounds: int
    judged_mean: float  # holes judged a round, on average (Poisson: around the budget; fixed size: the budget)
    judged_max: int  # the most holes a round judged
    coverage: dict[str, float]  # target -> share of rounds whose interval holds the truth
    width: dict[str, float]  # target -> mean interval width
    settled_right: list[int]  # per round: pairs settled in the true order
    wrong: dict[str, float]  # pair -> share of rounds settled in the wrong order
    aimed: list[str]
    seconds_per_round: float
    #: pair -> the oracle design's interval width at this budget (:func:`oracle_widths`)
    oracle: dict[str, float] = field(default_factory=dict)
    #: target -> the interval width the plan predicts for this design (its power line's, before any sample)
    predicted: dict[str, float] = field(default_factory=dict)

    def ratio(self) -> float:
        """The median over the pairs of the mean width over the oracle design's (nan: no oracle)."""
        r = [self.width[t] / w for t, w in self.oracle.items() if w > 0]
        return float(np.median(r)) if r else float("nan")

    def power_error(self) -> float:
        """The median over the pairs of predicted width / observed mean width - 1 (nan: none predicted)."""
        r = [w / self.width[t] - 1 for t, w in self.predicted.items() if " - " in t and self.width[t] > 0]
        return float(np.median(r)) if r else float("nan")

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
            out.append(f"{'design':<6}  {'budget':>6}  {'judged':>7}  {'max':>5}  {'rounds':>6}  {'worst coverage':<34}  "
                       f"{'settled (median)':>16}  {'wrong order (max)':>17}  {'width/oracle':>12}  {'predicted/observed':>18}  "
                       f"{'s/round':>7}")  # fmt: skip
            for r in rows:
                t, c = r.worst
                out.append(f"{r.design:<6}  {r.budget:>6}  {r.judged_mean:>7.0f}  {r.judged_max:>5}  {r.rounds:>6}  {f'{c:.3f} ({t})':<34}  "
                           f"{f'{np.median(r.settled_right):.0f} of {len(self.pairs)}':>16}  {max(r.wrong.values(), default=0):>17.3f}  "
                           f"{r.ratio():>12.2f}  {r.power_error() + 1:>18.2f}  {r.seconds_per_round:>7.3f}")  # fmt: skip
            out.append(f"{'target':<36}" + "".join(f"  {f'cov@{r.budget}{r.design[0]}':>9}  {f'width@{r.budget}{r.design[0]}':>12}"
                                                   for r in rows))  # fmt: skip
            for t in self.targets:
                out.append(f"{t:<36}" + "".join(f"  {r.coverage[t]:>9.3f}  {r.width[t]:>12.4f}" for r in rows))
            out.append("")
        return "\n".join(out)

    def as_json(self) -> dict:
        return {"targets": self.targets, "pairs": self.pairs, "truth": self.truth, "model": self.model,
                "notes": self.notes,
                "rows": [{**vars(r), "worst": list(r.worst), "settled_median": float(np.median(r.settled_right)),
                          "width_over_oracle": r.ratio(), "predicted_over_observed": r.power_error() + 1}
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


def oracle_widths(smp: Sampler, truth_gains: np.ndarray, budget: int) -> dict[str, float]:
    """Each pair's 95% interval width under the oracle design: the same units, the grade model refitted to the
    true grades (its distributions shifted to the true grade shares, :func:`~stagebench.judgments.grades.prior_shift`),
    and Neyman's allocation for that pair's true residuals alone (``pi`` proportional to ``|r_u| / sqrt(cost_u)``,
    capped at 1): ``2 * 1.96 * sqrt(sum (1 - pi) / pi * r^2)``, the design variance no real design (which must
    guess the residuals, and serve every pair with one draw) goes below. Only a simulation knows it."""
    fr, gains = smp.fr, smp.gains
    levels = np.clip(np.searchsorted(gains, truth_gains), 0, len(gains) - 1)
    shifted = prior_shift(smp.dist, np.bincount(levels, minlength=len(gains)) / max(len(levels), 1))
    cost = smp.cost.astype(np.float64)
    if smp.kind == HOLE:
        lin, pred = unit_prediction(fr, shifted, gains)
        single = np.array([u.single for u in fr.units], dtype=bool)
        first = np.array([a for a, _ in fr.spans], dtype=int)
        F = np.zeros_like(pred.P)
        F[:, single] = lin.at(first[single], levels[first[single]])
        if (~single).any():
            _, F[:, ~single] = fr.contributions(truth_gains, only=np.flatnonzero(~single))
        r = F - pred.P
    else:
        _, F = fr.contributions(truth_gains)
        _, P = fr.contributions(shifted @ gains)
        r = F - P
    out = {}
    s = len(fr.stages)
    for t, name in enumerate(fr.targets[s:], start=s):
        pi = allocate(r[t] ** 2, cost, budget)
        out[name] = 2 * Z95 * float(np.sqrt(((1 - pi) / np.maximum(pi, 1e-300) * r[t] ** 2).sum()))
    return out


def simulate_rounds(samplers: Mapping[tuple[str, str], Sampler], truth_gains: np.ndarray, budgets: Sequence[int], rounds: int,
                    seed: int) -> Coverage:  # fmt: skip
    """``samplers``: (model name, design) -> the design with that model's distributions, every one over the
    same holes; ``truth_gains``: every hole's true gain (:meth:`Frame.holes` order). The truth is each
    query's nDCG@k recomputed at the true gains (:func:`~stagebench.judgments.linear.exact`)."""
    first = next(iter(samplers.values()))
    fr0 = first.fr
    theta = exact(fr0, truth_gains)
    names = fr0.targets
    s = len(fr0.stages)
    pairs = names[s:]
    out = Coverage(names, pairs, dict(zip(names, theta.tolist())), {})
    for (pname, kind), smp in samplers.items():
        fr = smp.fr
        starts = np.array([a for a, _ in fr.spans], dtype=int)
        ends = np.array([b for _, b in fr.spans], dtype=int)
        pred = smp.prediction()
        out.model.setdefault(pname, dict(zip(names, pred.point.tolist())))
        for b in budgets:
            design = smp.probabilities(b, pred=pred)
            oracle = oracle_widths(smp, truth_gains, b)
            predicted = dict(zip(names, (2 * rehearse(smp, design)).tolist()))  # what the plan predicts
            rng = np.random.default_rng([seed, b])
            lo, hi, judged = [], [], []
            t0 = time.perf_counter()
            for _ in range(rounds):
                drawn = smp.draw(design, rng)
                holes = np.concatenate([np.arange(starts[i], ends[i]) for i in drawn]) if len(drawn) else np.zeros(0, int)
                e = smp.estimate(design.pi, drawn, truth_gains[holes])
                lo.append(e.low)
                hi.append(e.high)
                judged.append(e.judged)
            took = (time.perf_counter() - t0) / max(rounds, 1)
            L, H = np.array(lo), np.array(hi)
            cover = covered(L, H, theta).mean(axis=0)
            right, wrong = orders(L[:, s:], H[:, s:], theta[s:])
            out.rows.append(Budgeted(pname, kind, b, rounds, float(np.mean(judged)), int(max(judged)),
                                     dict(zip(names, cover.tolist())), dict(zip(names, (H - L).mean(axis=0).tolist())),
                                     right.sum(axis=1).tolist(), dict(zip(pairs, wrong.mean(axis=0).tolist())),
                                     design.aimed, took, oracle, predicted))  # fmt: skip
    return out


__all__ = ["Budgeted", "Coverage", "covered", "orders", "simulate_rounds"]
