"""Which view of the holes ranks the stages truly: the classic incompleteness experiment (Buckley
and Voorhees, SIGIR 2004; Sakai, SIGIR 2007) on a finished run (``stagebench incompleteness``).

Each query keeps a random share of its judgments (at least one, and at least one positive when it
had one, so every query stays scored; seeded); every stage is scored under each view
(:mod:`stagebench.judgments.views`) on the same queries; and each view's stage order is compared with
the order under all the judgments (Kendall's tau-b), as are its significant pairs (paired
randomization test, Holm over the stage pairs: a pair that flips, vanishes or appears) and, for the
bounds, the pairs the judgments settle (:func:`stagebench.judgments.views.pair_settled`). With the truth
(a folder the rules judge graded: every hole in every stage's top ``depth``), each view is also
compared with the true order and values.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations

from stagebench import stats
from stagebench.metrics import SCORED_MIN_GRADE
from stagebench.metrics.names import Measure
from stagebench.judgments.views import VIEWS, StageViews, pair_settled, stage_views, tau


def subsample(qrels: Mapping[str, Mapping[str, int]], rate: float, seed: int) -> dict[str, dict[str, int]]:
    """Each query's judgments, a ``rate`` share of them kept (rounded, at least one), drawn with
    ``seed``; a query that had a positive grade keeps at least one (its least-indexed draw swapped
    for a random positive)."""
    rng = random.Random(f"incompleteness:{seed}:{rate!r}")
    out: dict[str, dict[str, int]] = {}
    for q in sorted(qrels):
        docs = sorted(qrels[q])
        keep = rng.sample(docs, max(1, round(rate * len(docs))))
        positives = [d for d in docs if qrels[q][d] >= SCORED_MIN_GRADE]
        if positives and not any(qrels[q][d] >= SCORED_MIN_GRADE for d in keep):
            keep[0] = rng.choice(positives)
        out[q] = {d: qrels[q][d] for d in keep}
    return out


def significant(v: StageViews, view: str, permutations: int, alpha: float, seed: int) -> dict[tuple[str, str], int]:
    """Every stage pair under a point view: +1 the first significantly better, -1 worse, 0 neither
    (paired randomization test, Holm over the pairs)."""
    pq = v.per_query[view]
    pairs = list(combinations(pq, 2))
    comps = [stats.paired_test(a, b, view, pq[a], pq[b], permutations, seed) for a, b in pairs]
    out = {}
    for (a, b), c, p in zip(pairs, comps, stats.holm([c.p_rand for c in comps])):
        out[(a, b)] = 0 if p >= alpha or c.mean_a == c.mean_b else (1 if c.mean_a > c.mean_b else -1)
    return out


@dataclass
class Cell:
    """One view at one share of the judgments, over the seeds (means unless named otherwise)."""

    view: str
    rate: float
    tau: float  # against the order under all the judgments, same view
    tau_min: float
    flipped: float = 0.0  # significant pairs (point views) or settled pairs (bounds) now on the other side
    vanished: float = 0.0  # significant (settled) with all judgments, not any more
    appeared: float = 0.0  # significant (settled) now, not with all judgments
    tau_truth: float | None = None  # against the true order
    max_error: float | None = None  # the largest |value - true value| over the stages, worst seed


@dataclass
class Incompleteness:
    measure: str
    stages: list[str]
    queries: int
    rates: list[float]
    seeds: int
    full: dict[str, dict[str, float]]  # view -> stage -> value with all the judgments
    cells: list[Cell]
    truth: dict[str, float] | None = None  # stage -> true value
    truth_source: str = ""
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "cells"}, "cells": [asdict(c) for c in self.cells]}

    @classmethod
    def from_json(cls, d: dict) -> Incompleteness:
        fields = dict(d)
        cells = fields.pop("cells")
        return cls(**fields, cells=[Cell(**c) for c in cells])

    def text(self) -> str:
        head = (f"Incompleteness: {self.measure} of {len(self.stages)} stages on {self.queries} queries, each query "
                f"keeping a share of its judgments ({self.seeds} seeds a share)")  # fmt: skip
        lines = [head, "", *[f"# {n}" for n in self.notes], ""]
        cols = ["view", "kept", "tau", "tau min", "flipped", "vanished", "appeared"]
        if self.truth is not None:
            cols += ["tau truth", "max error"]
        rows = [cols]
        for c in self.cells:
            r = [c.view, f"{100 * c.rate:.0f}%", f"{c.tau:.3f}", f"{c.tau_min:.3f}", f"{c.flipped:.2f}",
                 f"{c.vanished:.2f}", f"{c.appeared:.2f}"]  # fmt: skip
            if self.truth is not None:
                r += [f"{c.tau_truth:.3f}", f"{c.max_error:.4f}"]
            rows.append(r)
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
        if self.truth is not None:
            lines += ["", f"true {self.measure} ({self.truth_source}): " +
                      ", ".join(f"{s} {v:.4f}" for s, v in self.truth.items())]  # fmt: skip
        return "\n".join(lines) + "\n"


def removal_experiment(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
                       queries: Sequence[str], measure: Measure, top: int, rel: int, gain: object, rates: Sequence[float],
                       seeds: int, permutations: int, alpha: float, seed: int,
                       truth: Mapping[str, Mapping[str, int]] | None = None, truth_source: str = "") -> Incompleteness:  # fmt: skip
    """The experiment on the stages of ``ranked`` (stage -> query -> ranking) over ``queries``."""
    full = stage_views(ranked, qrels, queries, measure, top, rel, gain)
    true_values = None
    if truth is not None:
        true_values = stage_views(ranked, truth, queries, measure, top, rel, gain).values["irrelevant"]
    def settled(qr: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, str], int]:
        return pair_settled(ranked, qr, queries, measure, top, rel, gain)

    ref = {v: (settled(qrels) if v == "bounds" else significant(full, v, permutations, alpha, seed)) for v in VIEWS}
    cells: list[Cell] = []
    drawn = [(rate, [subsample(qrels, rate, s) for s in range(seeds)]) for rate in rates]
    variants = [(rate, [(stage_views(ranked, qr, queries, measure, top, rel, gain), qr) for qr in qrs])
                for rate, qrs in drawn]  # fmt: skip
    for view in VIEWS:
        for rate, done in [(1.0, [(full, qrels)]), *variants]:
            taus, flips, gone, new, taus_t, errs = [], [], [], [], [], []
            for v, qr in done:
                taus.append(tau(full.values[view], v.values[view]))
                now = settled(qr) if view == "bounds" else significant(v, view, permutations, alpha, seed)
                flips.append(sum(1 for p, s in now.items() if s and ref[view][p] and s != ref[view][p]))
                gone.append(sum(1 for p, s in now.items() if not s and ref[view][p]))
                new.append(sum(1 for p, s in now.items() if s and not ref[view][p]))
                if true_values is not None:
                    taus_t.append(tau(true_values, v.values[view]))
                    errs.append(max(abs(v.values[view][s] - true_values[s]) for s in true_values))
            n = len(done)
            cells.append(Cell(view, rate, sum(taus) / n, min(taus), sum(flips) / n, sum(gone) / n, sum(new) / n,
                              None if not taus_t else sum(taus_t) / n, None if not errs else max(errs)))  # fmt: skip
    notes = [f"views: irrelevant = a hole counts as grade 0 (the main table); judged_only = holes removed before the cut "
             f"(trec_eval -J); bounds = every hole irrelevant .. at the top grade ({top}), ordered by the midpoint",
             "tau: Kendall's tau-b of the stage order against the order under all the judgments (1 = the same order); "
             f"flipped / vanished / appeared: stage pairs significantly different (paired randomization test, "
             f"{permutations} permutations, Holm over the {len(list(combinations(ranked, 2)))} pairs, alpha {alpha}) or, "
             "for the bounds, settled (the bounds of the pair's difference over every grading of the holes exclude 0), "
             "compared with all the judgments",
             "each query keeps round(share x its judgments), at least one, and one positive when it had one"]  # fmt: skip
    if true_values is not None:
        notes.append(f"tau truth / max error: each view's order and values against the truth ({truth_source}); "
                     "the 100% rows are the human judgments as they are")  # fmt: skip
    return Incompleteness(measure.name, list(ranked), len(queries), list(rates), seeds, full.values, cells,
                          None if true_values is None else dict(true_values), truth_source, notes)  # fmt: skip


#: the experiment as a results folder holds it (``stagebench incompleteness RUN_DIR --report``)
FILE = "incompleteness.json"

__all__ = ["FILE", "Cell", "Incompleteness", "removal_experiment", "significant", "subsample"]
