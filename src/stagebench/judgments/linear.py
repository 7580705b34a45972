"""The hole design's targets: every stage's nDCG@k (and every pair's difference) as a linear function of
each hole's grade, so that one judgment buys one hole even where a query's ideal DCG can change.

A query's nDCG@k is ``N_s / I``: the stage's DCG ``N_s`` is linear in its holes' gains, the ideal ``I``
is not. Written over the scale's gain levels ``v_0 < v_1 < ... < v_L``, the ideal depends only on how
many documents reach each level::

    I = sum_c (v_c - v_{c-1}) * D(min(k, J_c + H_c))        D(n) = sum_{r <= n} 1 / log2(r + 1)

with ``J_c`` the judged documents and ``H_c`` the holes at level ``c`` or above (a sum of one indicator
a hole). The linearisation takes ``N_s / I`` to first order around the grade model's expectation
(``H_c`` at its expected count, ``D`` linear between integers)::

    N_s / I  ~  N_s* / I* + sum_h [ w_sh (g_h - m_h) / I*  -  N_s* / I*^2 * sum_{c <= level(h)} (v_c - v_{c-1}) D'(J_c + H_c*) ]
                                                                  (the second term centred on its expectation)

which is a sum of one function of each hole's grade: the unit contribution ``phi[target, hole, level]``
the difference estimator needs. Where no grading of the holes can change the ideal (``J_c >= k`` for
every level above the lowest) ``D' = 0`` and the expansion is exact: the whole-query design's single-hole
units are this expansion's special case.

**Bias.** The estimator is unbiased for the linearised targets; what it leaves off is the expansion's
remainder at the true grades, a fixed number that no sample size removes: products of a query's errors
in its DCG and its ideal (``-dN dI / I^2 + N dI^2 / I^3``) and the curvature of ``D``, which is small
inside the top k (neighbouring discounts differ by a few hundredths) and sharp only where a level's count
crosses k. It is measured against the exact targets in docs/metrics.md (``plan-judgments --simulate
--strategy sample``), not assumed small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stagebench.judgments.estimate import MIN_REFIT, Estimate, Frame, Prediction, unreached, variance
from stagebench.judgments.grades import prior_shift


def discounts(k: int) -> np.ndarray:
    """``D(0..k)``: the cumulative discounts, ``D(0) = 0``."""
    return np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(2, k + 2)))])


def cumulative(n: float, D: np.ndarray) -> tuple[float, float]:
    """``D`` at a count ``n`` (linear between integers, flat from k on) and its slope there (the discount
    of the rank a further document at this level would take)."""
    k = len(D) - 1
    if n >= k:
        return float(D[k]), 0.0
    lo = int(np.floor(n))
    slope = float(D[lo + 1] - D[lo])
    return float(D[lo] + (n - lo) * slope), slope


@dataclass(frozen=True)
class Linear:
    """Every target as ``const + sum_h phi[:, h, level of h]`` (levels: the scale's grades, lowest first)."""

    targets: list[str]
    const: np.ndarray  # (targets,)
    phi: np.ndarray  # (targets, holes, levels)

    def predict(self, dist: np.ndarray) -> Prediction:
        """The grade model's view (``dist``: holes x levels, each row a distribution): every hole's
        expected contribution, its variance and its fourth central moment."""
        P = np.einsum("thl,hl->th", self.phi, dist)
        A = np.maximum(np.einsum("thl,hl->th", self.phi**2, dist) - P**2, 0.0)
        M4 = np.einsum("thl,hl->th", (self.phi - P[:, :, None]) ** 4, dist)
        return Prediction(self.const, P, A, M4)

    def at(self, holes: np.ndarray, levels: np.ndarray) -> np.ndarray:
        """(targets, len(holes)): the holes' contributions at the given levels."""
        return self.phi[:, holes, levels]


def linearise(fr: Frame, dist: np.ndarray, gains: np.ndarray) -> Linear:
    """The expansion of the module doc around ``dist`` (holes x levels, :meth:`Frame.holes` order;
    ``gains`` each level's gain, ascending), for every query but those judged whole (one unit of the
    frame: their part of the targets is the unit's own, :func:`estimate_units`)."""
    n, k = len(fr.queries), fr.k
    whole = {u.query for u in fr.units if not u.single}
    proj = fr.project
    D = discounts(k)
    steps = np.diff(gains)  # v_c - v_{c-1}, c = 1..L
    holes = fr.holes()
    at = {h: i for i, h in enumerate(holes)}
    phi = np.zeros((len(proj), len(holes), len(gains)))
    const = np.zeros(len(proj))
    for qi, q in enumerate(fr.queries):
        if qi in whole:
            continue
        idx = np.array([at[(q.qid, d)] for d in q.holes], dtype=int)
        p = dist[idx] if len(idx) else np.zeros((0, len(gains)))
        m = p @ gains
        judged = np.asarray(q.judged_gains, dtype=np.float64)
        above = (p[:, ::-1].cumsum(axis=1)[:, ::-1])[:, 1:]  # P(level >= c), c = 1..L
        ideal, slopes = gains[0] * D[min(k, len(judged) + len(idx))], np.zeros(len(steps))
        for c in range(len(steps)):
            J = float((judged >= gains[c + 1] - 1e-12).sum())
            val, slopes[c] = cumulative(J + float(above[:, c].sum()), D)
            ideal += steps[c] * val
        N = q.known + q.weights @ m
        if ideal <= 0:  # nothing judged or expected relevant: every stage scores 0, whatever the holes
            continue
        const += proj @ (N / ideal) / n
        if not len(idx):
            continue
        # d(ideal)/d(level indicator c) = step_c * slope_c; a hole at level l carries the indicators c <= l
        lift = np.concatenate([[0.0], np.cumsum(steps * slopes)])  # (levels,)
        per = (q.weights[:, :, None] * gains[None, None, :] / ideal
               - (N / ideal**2)[:, None, None] * lift[None, None, :])  # (stages, holes, levels)
        per_p = np.einsum("shl,hl->sh", per, p)  # each hole's expectation: the expansion is centred on it
        block = np.einsum("ts,shl->thl", proj, per - per_p[:, :, None]) / n
        phi[:, idx, :] = block
    # phi is centred: the expansion at the model's expectation is const; the estimator's predictions add back
    # each hole's expected contribution (zero), so const is the model's own estimate
    return Linear(fr.targets, const, phi)


def judged_shares(fr: Frame, dist: np.ndarray, gains: np.ndarray) -> dict[str, float]:
    """For each query with holes, the share of its expected ideal DCG that its judged documents already make
    (the ideal at ``dist``'s expected counts, as :func:`linearise` takes it): near 1, the holes can move its
    ideal little and the expansion is close; far below, its ideal rests on the holes."""
    k = fr.k
    D = discounts(k)
    at = {h: i for i, h in enumerate(fr.holes())}
    shares = {}
    for q in fr.queries:
        if not q.holes:
            continue
        p = dist[[at[(q.qid, d)] for d in q.holes]]
        above = (p[:, ::-1].cumsum(axis=1)[:, ::-1])[:, 1:]
        judged = np.asarray(q.judged_gains, dtype=np.float64)
        ideal = own = 0.0
        for c in range(len(gains) - 1):
            J = float((judged >= gains[c + 1] - 1e-12).sum())
            ideal += (gains[c + 1] - gains[c]) * cumulative(J + float(above[:, c].sum()), D)[0]
            own += (gains[c + 1] - gains[c]) * cumulative(J, D)[0]
        shares[q.qid] = own / ideal if ideal > 0 else 1.0
    return shares


def exact(fr: Frame, gains: np.ndarray) -> np.ndarray:
    """The targets themselves with every hole at ``gains`` (:meth:`Frame.holes` order): each query's
    nDCG@k with its ideal recomputed, no expansion (the truth a simulation scores against)."""
    n = len(fr.queries)
    at = {h: i for i, h in enumerate(fr.holes())}
    total = np.zeros(len(fr.stages))
    for q in fr.queries:
        idx = np.array([at[(q.qid, d)] for d in q.holes], dtype=int)
        total += q.values(gains[idx] if len(idx) else np.zeros(0))
    return fr.project @ (total / n)




def fourth_moments(dist: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """Every hole's fourth central moment of its gain under ``dist`` (holes x levels)."""
    return ((gains[None, :] - (dist @ gains)[:, None]) ** 4 * dist).sum(axis=1)


def unit_prediction(fr: Frame, dist: np.ndarray, gains: np.ndarray) -> tuple[Linear, Prediction]:
    """The expansion (:func:`linearise`) and the grade model's view of every unit of ``fr``: a single hole's
    expected contribution to the linearised targets (0: the expansion is centred) and its variance; a whole
    query's contribution with its holes at their expected gains, and the variance the frame's sensitivity
    gives it (:meth:`Frame.sensitivity`), and the fourth moment the same way (:meth:`Frame.fourth`)."""
    lin = linearise(fr, dist, gains)
    hp = lin.predict(dist)
    first = np.array([a for a, _ in fr.spans], dtype=int)
    single = np.array([u.single for u in fr.units], dtype=bool)
    P, A, M4 = hp.P[:, first].copy(), hp.A[:, first].copy(), hp.M4[:, first].copy()
    if (~single).any():
        means = dist @ gains
        variances = np.maximum(dist @ gains**2 - means**2, 0.0)
        fourths = fourth_moments(dist, gains)
        whole = np.flatnonzero(~single)
        _, P[:, whole] = fr.contributions(means, only=whole)
        A[:, whole] = fr.sensitivity(means, variances)[:, whole]
        M4[:, whole] = fr.fourth(means, variances, fourths)[:, whole]
    return lin, Prediction(lin.const, P, A, M4)


def estimate_units(fr: Frame, dist: np.ndarray, gains: np.ndarray, pi: np.ndarray, drawn: np.ndarray,
                   drawn_gains: np.ndarray, shift: bool = True, floor: bool = True) -> Estimate:  # fmt: skip
    """The hole design's estimate (``drawn``: the drawn units; ``drawn_gains``: their holes' judged gains, unit
    by unit): the difference estimator ``known + sum_u P_u + sum_{u drawn} (F_u - P_u) / pi_u`` over the
    linearised targets of the single holes and the exact contributions of the queries judged whole.

    First the grade model's distributions are shifted to the grade shares the sample estimates
    (:func:`~stagebench.judgments.grades.prior_shift`, from the drawn holes weighted by 1/pi): the shift moves
    the expansion point, not the estimator's validity, and shrinks the expansion's remainder (the bias), which
    a model fitted on judged pairs leaves large on holes it was not fitted for (on the embedded benchmark the
    calibrated cross-encoder puts 54% of the holes at the top grade, the rules 0.1%: a remainder of -0.056 on
    each stage's nDCG@10 without the shift, under 0.002 with the true shares). A hole drawn with probability
    1 is expanded around its own grade: a census is exact. The variance and degrees of freedom are
    :func:`~stagebench.judgments.estimate.estimate`'s: ``sum (1 - pi) / pi^2 r^2``, with ``floor`` no smaller
    than the model's variance of every unit scaled to the residuals the sample shows."""
    idx = np.asarray(drawn, dtype=int)
    spans = [fr.spans[i] for i in idx]
    holes = np.concatenate([np.arange(a, b) for a, b in spans]) if spans else np.zeros(0, dtype=int)
    levels = np.searchsorted(gains, drawn_gains)
    if len(levels) and (levels.max() >= len(gains) or not np.allclose(gains[levels], drawn_gains)):
        raise ValueError("a judged gain is not on the scale's gains")
    if shift and len(holes) >= MIN_REFIT:
        w = np.concatenate([np.full(b - a, 1.0 / pi[i]) for i, (a, b) in zip(idx, spans)])
        dist = prior_shift(dist, np.bincount(levels, weights=w, minlength=len(gains)) / w.sum())
    p = pi[idx]
    sure = np.repeat(p >= 1.0, [b - a for a, b in spans]) if spans else np.zeros(0, dtype=bool)
    if sure.any():  # known, not predicted (module doc)
        dist = dist.copy()
        dist[holes[sure]] = np.eye(len(gains))[levels[sure]]
    lin, pred = unit_prediction(fr, dist, gains)
    single = np.array([fr.units[i].single for i in idx], dtype=bool)
    F = np.zeros((len(lin.targets), len(idx)))
    first = np.array([a for a, _ in spans], dtype=int)
    pos = np.cumsum([0, *[b - a for a, b in spans]])[:-1]  # where each drawn unit's holes start in drawn_gains
    F[:, single] = lin.at(first[single], levels[pos[single]])
    if (~single).any():
        full = dist @ gains
        full[holes] = drawn_gains
        _, F[:, ~single] = fr.contributions(full, only=idx[~single])
    r = F - pred.P[:, idx]
    value = pred.known + pred.P.sum(axis=1) + (r / p).sum(axis=1)
    var, df = variance(r, pi, idx, pred.A if floor else None, pred.M4 if floor else None)
    return Estimate(lin.targets, value, np.sqrt(var), len(idx), len(holes), df, unreached(fr, pred.P, pi))

__all__ = ["Linear", "cumulative", "discounts", "estimate_units", "exact", "fourth_moments", "judged_shares", "linearise",
           "unit_prediction"]
