"""How far the LLM judge agrees with the human labels, measured on judged pairs it graded without
seeing their label: the confusion matrix, exact agreement, Cohen's kappa (unweighted, and weighted
linearly and quadratically by the distance between grades) with a bootstrap interval, and whether
the stages come out in the same order when the judge's grades replace the human ones on that sample
(Kendall's tau-b between the two orders of the stage means, per measure).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from stagebench.metrics import evaluate, parse_measure
from stagebench.runs import Run


@dataclass
class StageOrder:
    """One measure's stage means on the sample, under the human and under the judge's grades."""

    measure: str
    human: dict[str, float]
    judge: dict[str, float]
    tau: float | None  # Kendall's tau-b of the two orders; None: undefined (every mean tied on one side)


@dataclass
class Agreement:
    grades: list[int]  # the scale, best first (the confusion matrix's rows and columns)
    pairs: int  # sample pairs the judge graded
    unusable: int  # sample pairs without a grade (unusable answer or failed request)
    confusion: list[list[int]]  # [human grade][judge grade], in ``grades`` order
    exact: float | None
    kappa: float | None
    weighted_kappa: float | None  # linear weights: the headline
    weighted_kappa_ci: list[float] | None  # 95% bootstrap interval over the pairs
    quadratic_kappa: float | None
    bootstrap: int
    seed: int
    orders: list[StageOrder] = field(default_factory=list)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["orders"] = [o.__dict__ for o in self.orders]
        return d


def kappa(human: np.ndarray, judge: np.ndarray, k: int, power: int) -> float | None:
    """Cohen's kappa of two label vectors over ``k`` ordered categories (indices 0..k-1); ``power``
    0: unweighted, 1: linear, 2: quadratic disagreement weights. None when chance agreement is total."""
    n = len(human)
    if n == 0:
        return None
    obs = np.zeros((k, k))
    np.add.at(obs, (human, judge), 1.0)
    obs /= n
    exp = np.outer(obs.sum(axis=1), obs.sum(axis=0))
    i, j = np.indices((k, k))
    w = (i != j).astype(float) if power == 0 else (np.abs(i - j) / max(k - 1, 1)) ** power
    denom = float((w * exp).sum())
    return None if denom == 0 else 1.0 - float((w * obs).sum()) / denom


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b (ties in either order counted as trec_eval-style ties: neither concordant nor discordant)."""
    conc = disc = tx = ty = 0
    for (a1, b1), (a2, b2) in itertools.combinations(zip(x, y), 2):
        dx, dy = np.sign(a1 - a2), np.sign(b1 - b2)
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx == dy:
            conc += 1
        else:
            disc += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return None if denom == 0 else (conc - disc) / denom


def agreement(pairs: Sequence[tuple[str, str]], judge_grades: Sequence[int | None], qrels: Mapping[str, Mapping[str, int]],
              grades: Sequence[int], runs: Mapping[str, Run], stages: Sequence[str], measures: Sequence[str],
              relevance_threshold: int, gain, bootstrap: int, seed: int) -> Agreement:  # fmt: skip
    """The judge against the human labels on the sample ``pairs`` (its grades in the same order)."""
    best_first = sorted(grades, reverse=True)
    index = {g: i for i, g in enumerate(best_first)}
    usable = [(p, g) for p, g in zip(pairs, judge_grades) if g is not None]
    h = np.array([index[qrels[q][d]] for (q, d), _ in usable], dtype=int)
    j = np.array([index[g] for _, g in usable], dtype=int)
    k = len(best_first)
    conf = np.zeros((k, k), dtype=int)
    np.add.at(conf, (h, j), 1)
    lin = kappa(h, j, k, 1)
    ci = None
    if len(usable) > 1:
        rng = np.random.default_rng(seed)
        boots = []
        for _ in range(bootstrap):
            idx = rng.integers(0, len(usable), len(usable))
            v = kappa(h[idx], j[idx], k, 1)
            if v is not None:
                boots.append(v)
        if boots:
            ci = [round(float(np.percentile(boots, 2.5)), 6), round(float(np.percentile(boots, 97.5)), 6)]
    r = lambda v: None if v is None else round(v, 6)  # noqa: E731
    return Agreement(grades=best_first, pairs=len(usable), unusable=len(pairs) - len(usable), confusion=conf.tolist(),
                     exact=r(float((h == j).mean())) if len(usable) else None, kappa=r(kappa(h, j, k, 0)),
                     weighted_kappa=r(lin), weighted_kappa_ci=ci, quadratic_kappa=r(kappa(h, j, k, 2)),
                     bootstrap=bootstrap, seed=seed,
                     orders=stage_orders(usable, qrels, runs, stages, measures, relevance_threshold, gain))  # fmt: skip


def stage_orders(usable: Sequence[tuple[tuple[str, str], int]], qrels: Mapping[str, Mapping[str, int]],
                 runs: Mapping[str, Run], stages: Sequence[str], measures: Sequence[str], relevance_threshold: int,
                 gain) -> list[StageOrder]:  # fmt: skip
    """Each stage scored against the sample's labels alone (every other document of its ranking
    counts as unjudged, i.e. irrelevant, so where a stage ranks the sampled documents is what
    counts), once with the human grades and once with the judge's; the means over the queries the
    human sample scores, and Kendall's tau-b of the two stage orders."""
    human: dict[str, dict[str, int]] = {}
    judge: dict[str, dict[str, int]] = {}
    for (q, d), g in usable:
        human.setdefault(q, {})[d] = qrels[q][d]
        judge.setdefault(q, {})[d] = g
    if not any(g >= 1 for docs in human.values() for g in docs.values()) or len(stages) < 2:
        return []
    ms = [m for m in measures if parse_measure(m).supports.holes_matter]
    out = []
    hm = {s: evaluate(human, runs[s], ms, relevance_threshold=relevance_threshold, gain=gain) for s in stages}
    queries = hm[stages[0]].scored_queries
    jm = {}
    for s in stages:
        if any(g >= 1 for docs in judge.values() for g in docs.values()):
            jm[s] = evaluate(judge, runs[s], ms, relevance_threshold=relevance_threshold, gain=gain).per_query
    for m in ms:
        hmeans = {s: round(hm[s].means[m], 6) for s in stages}
        jmeans = {s: round(sum(jm[s][m].get(q, 0.0) for q in queries) / len(queries), 6) if jm else 0.0 for s in stages}
        out.append(StageOrder(m, hmeans, jmeans, kendall_tau_b([hmeans[s] for s in stages], [jmeans[s] for s in stages])))
    return out

