"""A grade model for the holes: for every unjudged (query, document) pair, a distribution over the
dataset's grades, which the estimated view (:mod:`stagebench.judgments.estimate`) uses to predict
what the pair would be graded and how unsure it is.

The offline default reads what the run already holds: a stage's score of the pair (a cross-encoder's
logit means the same in every query), calibrated to grades on the pairs the humans judged by
histogram binning (Zadrozny and Elkan, 2001): the judged pairs' scores cut at their deciles, each
bin's grade frequencies smoothed towards the overall ones (``SMOOTHING`` pseudo-counts). A pair the
stage never scored (outside its candidate pool) falls in a bin of its own, calibrated on the judged
pairs the stage never scored either. Other predictors: ``constant`` (every pair the judged pairs'
grade frequencies: a model that knows nothing), a folder's LLM judge (its grade of the pair,
calibrated on the judged pairs it graded blind), or any :class:`GradePredictor` of the user's.

A model's errors never bias the estimate (the judged sample corrects them); they only widen its
interval. Its quality is reported on the judged pairs by cross-fitting (:func:`cross_fitted_quality`:
each fold's pairs predicted by a model fitted without them, folds by query), so no pair helps predict
itself. The judged pairs are not a sample of the holes (the holes were never shown to a rater for a
reason): the figures say how well the model ranks judged pairs, not how well it knows the holes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

#: pseudo-counts pulling a bin's grade frequencies towards the overall ones
SMOOTHING = 4.0
BINS = 10
FOLDS = 5
Pair = tuple[str, str]


@runtime_checkable
class GradePredictor(Protocol):
    """Anything that gives each (query, document) pair a distribution over ``grades`` (rows sum to 1)."""

    name: str
    grades: tuple[int, ...]

    def distributions(self, pairs: Sequence[Pair]) -> np.ndarray: ...


def _frequencies(grades: Sequence[int], scale: Sequence[int], prior: np.ndarray | None, strength: float) -> np.ndarray:
    counts = np.array([sum(1 for g in grades if g == s) for s in scale], dtype=np.float64)
    if prior is None:
        prior = np.full(len(scale), 1.0 / len(scale))
    return (counts + strength * prior) / (counts.sum() + strength)


@dataclass(frozen=True)
class Constant:
    """Every pair the same distribution: the judged pairs' grade frequencies."""

    grades: tuple[int, ...]
    p: np.ndarray
    name: str = "constant"

    @classmethod
    def fit(cls, labelled: Mapping[Pair, int], grades: Sequence[int]) -> Constant:
        return cls(tuple(grades), _frequencies(list(labelled.values()), grades, None, 1.0))

    def distributions(self, pairs: Sequence[Pair]) -> np.ndarray:
        return np.tile(self.p, (len(pairs), 1))


@dataclass(frozen=True)
class BinnedScores:
    """A score calibrated to grades by histogram binning (module doc)."""

    grades: tuple[int, ...]
    scores: Mapping[Pair, float]
    edges: np.ndarray  # inner cut points, ascending
    table: np.ndarray  # (bins + 1, grades): the bins, then the unscored pairs' row
    name: str = "scores"

    @classmethod
    def fit(cls, scores: Mapping[Pair, float], labelled: Mapping[Pair, int], grades: Sequence[int],
            name: str = "scores", bins: int = BINS) -> BinnedScores:  # fmt: skip
        overall = _frequencies(list(labelled.values()), grades, None, 1.0)
        scored = [(scores[p], g) for p, g in labelled.items() if p in scores]
        unscored = [g for p, g in labelled.items() if p not in scores]
        xs = np.array([s for s, _ in scored], dtype=np.float64)
        edges = np.unique(np.quantile(xs, np.linspace(0, 1, bins + 1)[1:-1])) if len(xs) else np.array([])
        which = np.searchsorted(edges, xs, side="right")
        rows = [_frequencies([g for (_, g), b in zip(scored, which) if b == i], grades, overall, SMOOTHING)
                for i in range(len(edges) + 1)]  # fmt: skip
        rows.append(_frequencies(unscored, grades, overall, SMOOTHING))
        return cls(tuple(grades), scores, edges, np.vstack(rows), name)

    def distributions(self, pairs: Sequence[Pair]) -> np.ndarray:
        out = np.empty((len(pairs), len(self.grades)))
        unscored = len(self.table) - 1
        for i, p in enumerate(pairs):
            s = self.scores.get(p)
            out[i] = self.table[unscored if s is None else int(np.searchsorted(self.edges, s, side="right"))]
        return out


@dataclass(frozen=True)
class JudgeGrades:
    """A judge's grade of each pair, calibrated: P(human grade | judge's grade) from the judged pairs it
    graded blind; a pair it did not grade takes the judged pairs' frequencies."""

    grades: tuple[int, ...]
    said: Mapping[Pair, int]
    table: dict[int, np.ndarray]
    fallback: np.ndarray
    name: str = "judge"

    @classmethod
    def fit(cls, said: Mapping[Pair, int], labelled: Mapping[Pair, int], grades: Sequence[int]) -> JudgeGrades:
        overall = _frequencies(list(labelled.values()), grades, None, 1.0)
        table = {j: _frequencies([g for p, g in labelled.items() if said.get(p) == j], grades, overall, SMOOTHING)
                 for j in grades}  # fmt: skip
        return cls(tuple(grades), said, table, overall)

    def distributions(self, pairs: Sequence[Pair]) -> np.ndarray:
        return np.vstack([self.table.get(self.said.get(p), self.fallback) for p in pairs]) if pairs else \
            np.empty((0, len(self.grades)))  # fmt: skip


def shuffled(pred: BinnedScores, seed: int) -> BinnedScores:
    """The same model with its scores dealt to the wrong pairs (a useless predictor, for the coverage checks)."""
    keys = list(pred.scores)
    vals = np.array([pred.scores[k] for k in keys])
    np.random.default_rng(seed).shuffle(vals)
    return BinnedScores(pred.grades, dict(zip(keys, vals.tolist())), pred.edges, pred.table, f"{pred.name} (shuffled)")


def _fold(qid: str, folds: int) -> int:
    return int(hashlib.sha256(qid.encode("utf-8")).hexdigest()[:8], 16) % folds


@dataclass(frozen=True)
class Quality:
    """A grade model's quality on judged pairs it did not see (cross-fitted)."""

    pairs: int
    accuracy: float  # the most likely grade is the human one
    log_loss: float  # mean -ln p(human grade), nats
    calibration_error: float  # expected calibration error of the most likely grade's probability, 10 bins
    baseline_log_loss: float  # the same for the constant model: what the model's scores add

    def line(self) -> str:
        return (f"on {self.pairs:,} judged pairs it did not see (5 folds by query): accuracy {self.accuracy:.3f}, "
                f"log-loss {self.log_loss:.3f} nats (the constant model: {self.baseline_log_loss:.3f}), "
                f"calibration error {self.calibration_error:.3f}")  # fmt: skip


def cross_fitted_quality(fit, labelled: Mapping[Pair, int], grades: Sequence[int], folds: int = FOLDS) -> Quality:
    """``fit(labelled_subset)`` -> a predictor; each fold of the judged pairs (by query) predicted by the
    model fitted on the others, scored against its human grades."""
    pairs = list(labelled)
    probs = np.empty((len(pairs), len(grades)))
    const = np.empty_like(probs)
    fold_of = [_fold(q, folds) for q, _ in pairs]
    for f in range(folds):
        train = {p: g for p, fo in zip(pairs, fold_of) if fo != f for g in (labelled[p],)}
        idx = [i for i, fo in enumerate(fold_of) if fo == f]
        if not idx or not train:
            probs[idx] = const[idx] = 1.0 / len(grades)
            continue
        probs[idx] = fit(train).distributions([pairs[i] for i in idx])
        const[idx] = Constant.fit(train, grades).distributions([pairs[i] for i in idx])
    col = {g: i for i, g in enumerate(grades)}
    truth = np.array([col[labelled[p]] for p in pairs])
    rows = np.arange(len(pairs))
    best = probs.argmax(axis=1)
    conf = probs[rows, best]
    hit = (best == truth).astype(np.float64)
    ece = 0.0
    for lo in np.linspace(0, 1, 11)[:-1]:
        m = (conf > lo) & (conf <= lo + 0.1)
        if m.any():
            ece += m.sum() / len(pairs) * abs(hit[m].mean() - conf[m].mean())
    eps = 1e-12
    return Quality(len(pairs), float(hit.mean()), float(-np.log(probs[rows, truth] + eps).mean()), float(ece),
                   float(-np.log(const[rows, truth] + eps).mean()))  # fmt: skip


def expected_gain(p: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's expected gain and its variance, ``gains`` the gain of each grade of the scale."""
    m = p @ gains
    return m, np.maximum(p @ (gains**2) - m**2, 0.0)


__all__ = ["BINS", "FOLDS", "SMOOTHING", "BinnedScores", "Constant", "GradePredictor", "JudgeGrades", "Quality",
           "cross_fitted_quality", "expected_gain", "shuffled"]  # fmt: skip
