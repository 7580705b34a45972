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
calibrated on the judged pairs it graded blind), ``learned`` (:class:`LearnedGrades`: gradient-boosted
trees over every stage's rank and score of the pair, how many stages retrieved it, and the words query
and product share, fitted on the judged pairs), or any :class:`GradePredictor` of the user's.

A model's errors never bias the estimate (the judged sample corrects them); they only widen its
interval. Its quality is reported on the judged pairs by cross-fitting (:func:`cross_fitted_quality`:
each fold's pairs predicted by a model fitted without them, folds by query), so no pair helps predict
itself. The judged pairs are not a sample of the holes (the holes were never shown to a rater for a
reason): the figures say how well the model ranks judged pairs, not how well it knows the holes.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from stagebench.errors import StagebenchError
from stagebench.optional import need
from stagebench.runs import ranked

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


_WORD = re.compile(r"[0-9a-z]+")
#: the share of the judged pairs' grade frequencies mixed into the learned model's distributions (no
#: grade ever has probability 0: a log-loss stays finite, a sure model stays correctable)
LEARNED_PRIOR = 0.02


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


@dataclass
class PairFeatures:
    """What the learned grade model reads of a (query, document) pair: for every stage its rank's discount
    (0 outside its run), its score standardised within the query's run (missing outside it) and whether
    the pair is in its top 10; how many stages have it in their top 10; the share of the query's words the
    document holds, and the two texts' Jaccard overlap."""

    runs: Mapping[str, Mapping[str, Mapping[str, float]]]
    queries: Mapping[str, str]
    docs: Mapping[str, str]
    _at: dict = field(default_factory=dict, repr=False)
    _rows: dict = field(default_factory=dict, repr=False)  # pair -> its features
    _words: dict = field(default_factory=dict, repr=False)  # query -> its words

    def __post_init__(self) -> None:
        for s, run in self.runs.items():
            for q, scores in run.items():
                xs = np.array(list(scores.values()), dtype=np.float64)
                mu, sd = (float(xs.mean()), float(xs.std()) or 1.0) if len(xs) else (0.0, 1.0)
                self._at[s, q] = ({d: r for r, (d, _) in enumerate(ranked(scores), start=1)}, mu, sd)

    @property
    def names(self) -> list[str]:
        per = [f"{s}:{x}" for s in self.runs for x in ("discount", "score", "top10")]
        return [*per, "stages in top 10", "query words held", "word overlap"]

    def matrix(self, pairs: Sequence[Pair]) -> np.ndarray:
        """One row a pair, each computed once (the cross-fitted folds and the holes read the same pairs again)."""
        return np.array([self._row(p) for p in pairs]).reshape(len(pairs), len(self.names))

    def _row(self, pair: Pair) -> list[float]:
        got = self._rows.get(pair)
        if got is None:
            q, d = pair
            got, tops = [], 0
            for s, run in self.runs.items():
                ranks, mu, sd = self._at.get((s, q), ({}, 0.0, 1.0))
                r = ranks.get(d)
                score = run.get(q, {}).get(d)
                got += [1.0 / math.log2(r + 1) if r else 0.0, (score - mu) / sd if score is not None else np.nan,
                        1.0 if r is not None and r <= 10 else 0.0]  # fmt: skip
                tops += r is not None and r <= 10
            qw = self._words.setdefault(q, _words(self.queries.get(q, "")))
            dw = _words(self.docs.get(d, ""))
            got += [tops, len(qw & dw) / len(qw) if qw else 0.0, len(qw & dw) / len(qw | dw) if qw | dw else 0.0]
            self._rows[pair] = got
        return got


@dataclass(frozen=True)
class LearnedGrades:
    """Gradient-boosted trees (scikit-learn's ``HistGradientBoostingClassifier``, fixed seed) over
    :class:`PairFeatures`, fitted on the judged pairs; each distribution mixed with the judged pairs'
    grade frequencies (:data:`LEARNED_PRIOR`)."""

    grades: tuple[int, ...]
    features: PairFeatures
    model: Any
    prior: np.ndarray
    name: str = "learned"

    @classmethod
    def fit(cls, features: PairFeatures, labelled: Mapping[Pair, int], grades: Sequence[int], seed: int = 0,
            rounds: int | None = None) -> LearnedGrades:  # fmt: skip
        """``rounds``: boosting iterations (default: one per 40 judged pairs, 30 to 150)."""
        ensemble = need("sklearn.ensemble", "the learned grade model (--predictor learned)")
        prior = _frequencies(list(labelled.values()), grades, None, 1.0)
        y = np.array(list(labelled.values()))
        if len(set(y.tolist())) < 2:
            return cls(tuple(grades), features, None, prior)
        rounds = rounds or int(np.clip(len(labelled) / 40, 30, 150))
        clf = ensemble.HistGradientBoostingClassifier(max_iter=rounds, learning_rate=0.06, max_leaf_nodes=15,
                                                      min_samples_leaf=20, l2_regularization=1.0,
                                                      early_stopping=False, random_state=seed)  # fmt: skip
        clf.fit(features.matrix(list(labelled)), y)
        return cls(tuple(grades), features, clf, prior)

    def distributions(self, pairs: Sequence[Pair]) -> np.ndarray:
        out = np.tile(self.prior, (len(pairs), 1))
        if self.model is None or not len(pairs):
            return out
        proba = self.model.predict_proba(self.features.matrix(pairs))
        col = {g: i for i, g in enumerate(self.grades)}
        learned = np.zeros_like(out)
        for j, g in enumerate(self.model.classes_):
            learned[:, col[int(g)]] = proba[:, j]
        return (1 - LEARNED_PRIOR) * learned + LEARNED_PRIOR * out


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


def prior_shift(dist: np.ndarray, target: np.ndarray, steps: int = 50) -> np.ndarray:
    """``dist`` (rows: distributions over the grades) reweighted by one factor a grade so that its mean row
    is ``target`` (iterative proportional fitting; Saerens, Latinne and Decaestecker, *Neural Computation*
    14, 2002, for the label shift it models): a model fitted on the judged pairs says how the holes rank,
    the sample says how many of them reach each grade."""
    w = np.ones(dist.shape[1])
    cur = dist
    for _ in range(steps):
        mean = cur.mean(axis=0)
        ok = mean > 0
        w = np.where(ok, w * np.where(ok, target, 0.0) / np.where(ok, mean, 1.0), 0.0)
        cur = dist * w
        cur = cur / np.maximum(cur.sum(axis=1, keepdims=True), 1e-300)
    return cur


def expected_gain(p: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's expected gain and its variance, ``gains`` the gain of each grade of the scale."""
    m = p @ gains
    return m, np.maximum(p @ (gains**2) - m**2, 0.0)


CONSTANT, JUDGE, LEARNED = "constant", "judge", "learned"


@dataclass(frozen=True)
class NamedModel:
    """A grade model named on its own (any other ``--predictor`` names a stage whose scores are
    calibrated): ``fitter(grades, judge_said, features)`` -> its fit on a set of labelled pairs."""

    name: str
    what: str
    fitter: Callable[[Sequence[int], Mapping[tuple[str, str], int] | None, PairFeatures | None],
                     Callable[[Mapping[tuple[str, str], int]], GradePredictor]]  # fmt: skip
    needs_features: bool = False  # fitted on every stage's ranks and scores and the texts (PairFeatures)


def _learned(grades, judge_said, features):
    if features is None:
        raise StagebenchError("--predictor learned: no pair features were given")
    return lambda labelled: LearnedGrades.fit(features, labelled, grades)


def _judge(grades, judge_said, features):
    if not judge_said:
        raise StagebenchError("--predictor judge: the folder holds no judge grades (run stagebench judge on it first)")
    return lambda labelled: JudgeGrades.fit(judge_said, labelled, grades)


#: the grade models by name, as ``--predictor`` takes them (a stage's name: its scores calibrated)
GRADE_MODELS: dict[str, NamedModel] = {m.name: m for m in (
    NamedModel(CONSTANT, "the judged pairs' grade shares, the same for every hole",
               lambda grades, judge_said, features: (lambda labelled: Constant.fit(labelled, grades))),
    NamedModel(JUDGE, "the folder's judge grades, calibrated on the judged pairs", _judge),
    NamedModel(LEARNED, "trees over every stage's rank and score of the pair and the words query and product share",
               _learned, needs_features=True),
)}  # fmt: skip


__all__ = ["CONSTANT", "GRADE_MODELS", "JUDGE", "LEARNED", "NamedModel", "BINS", "FOLDS", "LEARNED_PRIOR", "SMOOTHING", "BinnedScores", "Constant", "GradePredictor", "JudgeGrades",
           "LearnedGrades", "PairFeatures", "Quality",
           "cross_fitted_quality", "expected_gain", "prior_shift", "shuffled"]  # fmt: skip
