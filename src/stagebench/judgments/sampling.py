"""A sampling round on a finished folder: the grade model it predicts with, the sample it draws
(:mod:`stagebench.judgments.estimate`), the record of that draw written beside the worksheet
(``<worksheet>.design.json``: every drawn unit, its holes and its probability, and the judgments it
was drawn from), and the estimated view computed when the graded worksheet comes back.

A worksheet from a sampling round must come back whole: a drawn hole left ungraded (a row deleted,
or its grade left empty) would make the sample one the raters chose, so the estimate is refused with
the count and the first such rows (the judgments are still added to the main table); a probability
edited away from the record is refused the same way; a row the record does not hold (added by hand)
is a judgment like any other, in the main table, and the estimate leaves it out and says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from dataclasses import dataclass, field

import numpy as np

from stagebench.errors import StagebenchError
from stagebench.judgments.design import CAPPED, DESIGNS, POISSON, QUERY, Sampler
from stagebench.judgments.estimate import Z95, Estimate, Frame
from stagebench.judgments.power import Z80
from stagebench.judgments.grades import (GRADE_MODELS, BinnedScores, GradePredictor, PairFeatures, Quality,
                                         cross_fitted_quality)
from stagebench.runs import Run

DESIGN_KIND = "stagebench sampling round"
#: the estimated view in a results folder that add-judgments wrote from a sampling round
ESTIMATE = "judgments/estimate.json"


def same_probability(text: str, p: float) -> bool:
    """Whether a worksheet's probability ``text`` is the recorded ``p`` as written to the digits it shows
    (``0.123`` for 0.1234567: a spreadsheet that rounds the column keeps the match), within float rounding."""
    try:
        shown = Decimal(text.strip().replace(",", "."))
    except InvalidOperation:
        return False
    if not shown.is_finite():
        return False
    exponent = shown.as_tuple().exponent
    half = 0.5 * 10.0 ** int(exponent) if isinstance(exponent, int) else 0.0
    return abs(float(shown) - p) <= half * (1 + 1e-9) + 1e-12 * max(p, 1e-12)


def design_path(worksheet: str) -> str:
    """Where the round's record lies beside its worksheet: ``sheet.csv`` -> ``sheet.design.json``."""
    stem = worksheet[: -len(".csv")] if worksheet.lower().endswith(".csv") else worksheet.rsplit(".", 1)[0]
    return f"{stem}.design.json"


def grade_model(spec: str | None, runs: Mapping[str, Run], stage_types: Mapping[str, str],
                qrels: Mapping[str, Mapping[str, int]], grades: Sequence[int],
                judge_said: Mapping[tuple[str, str], int] | None,
                features: PairFeatures | None = None) -> tuple[GradePredictor, Quality]:  # fmt: skip
    """The grade model ``spec`` names (:data:`GRADE_MODELS`, else a stage whose scores it calibrates:
    default the last cross-encoder, else the last stage), fitted on ``qrels`` (the judged pairs), and
    its cross-fitted quality."""
    labelled = {(q, d): g for q, docs in qrels.items() for d, g in docs.items()}
    if not labelled:
        raise StagebenchError("the folder has no judged pairs to fit a grade model on")
    if spec in GRADE_MODELS:
        fit = GRADE_MODELS[spec].fitter(grades, judge_said, features)
    else:
        stage = predictor_stage(spec, runs, stage_types)
        assert stage is not None
        scores = {(q, d): s for q, docs in runs[stage].items() for d, s in docs.items()}
        fit = lambda L: BinnedScores.fit(scores, L, grades, stage)  # noqa: E731
    return fit(labelled), cross_fitted_quality(fit, labelled, grades)


def predictor_stage(spec: str | None, runs: Mapping[str, Run], stage_types: Mapping[str, str]) -> str | None:
    """The stage whose scores the grade model ``spec`` calibrates (default: the last cross-encoder, else
    the last stage); None for a named model (:data:`GRADE_MODELS`)."""
    if spec in GRADE_MODELS:
        return None
    stages = list(runs)
    if spec is None:
        spec = next((s for s in reversed(stages) if stage_types.get(s) == "cross_encoder"), stages[-1])
    if spec not in runs:
        raise StagebenchError(f"--predictor {spec!r}: not a stage of the folder ({', '.join(stages)}) nor one of "
                              f"{', '.join(repr(m) for m in GRADE_MODELS)}")  # fmt: skip
    return spec


@dataclass
class Record:
    """What a sampling round drew (the file beside the worksheet)."""

    folder: str
    qrels_sha256: str
    measure: str
    predictor: str
    budget: int
    seed: int
    aimed: list[str]
    units: list[dict]  # {"qid", "docids", "probability"} for every drawn unit (the exact probability)
    model: dict[str, float] = field(default_factory=dict)  # the model's own estimates before the sample
    round: str = ""  # the round's identity (:meth:`identity`), which every row of its worksheet carries
    power: list[str] = field(default_factory=list)  # for each aimed pair, what the budget buys it (power.Power)
    design: str = QUERY  # the sampling design (design.DESIGNS); a record written before designs were named: query
    draws: str = POISSON  # how the units were drawn (CAPPED at the budget, or POISSON: every record written before them)

    def identity(self) -> str:
        """The round's id: a digest of what it drew from and what it drew (the same plan, the same id)."""
        what = {k: getattr(self, k) for k in ("folder", "qrels_sha256", "measure", "predictor", "budget", "seed", "units")}
        if (self.design, self.draws) != (QUERY, POISSON):  # (the ids of rounds recorded before stay what they were)
            what.update(design=self.design, draws=self.draws)
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]

    def as_json(self) -> str:
        return json.dumps({"kind": DESIGN_KIND, **vars(self)}, indent=1) + "\n"

    @classmethod
    def read(cls, text: str, where: str) -> Record:
        try:
            raw = json.loads(text)
        except ValueError as exc:  # truncated or corrupt: say so, and where, not that it is missing
            raise StagebenchError(f"{where}: unreadable, invalid JSON at byte {getattr(exc, 'pos', '?')} "
                                  f"({getattr(exc, 'msg', exc)}): a sampling round's record plan-judgments wrote, "
                                  "damaged since; plan the round again or restore the file") from None  # fmt: skip
        try:
            if not isinstance(raw, dict):
                raise ValueError
            if raw.pop("kind") != DESIGN_KIND:
                raise ValueError
            rec = cls(**raw)
            rec.round = rec.round or rec.identity()  # a record written before rounds had ids
            if rec.design not in DESIGNS or rec.draws not in (CAPPED, POISSON):
                raise ValueError
            for u in rec.units:
                if not (isinstance(u["qid"], str) and isinstance(u["docids"], list) and 0 < float(u["probability"]) <= 1):
                    raise ValueError
            return rec
        except (ValueError, KeyError, TypeError):
            raise StagebenchError(f"{where}: not a sampling round's record (plan-judgments --strategy sample writes "
                                  "it beside the worksheet)") from None  # fmt: skip

    @property
    def holes(self) -> dict[tuple[str, str], float]:
        return {(u["qid"], d): float(u["probability"]) for u in self.units for d in u["docids"]}


def match(fr: Frame, rec: Record) -> list[int] | str:
    """The frame's indices of the record's units, or why the folder no longer holds that draw."""
    where = {(u.qid, u.holes): i for i, u in enumerate(fr.units)}
    out = []
    for u in rec.units:
        i = where.get((u["qid"], tuple(u["docids"])))
        if i is None:
            return (f"the drawn unit {u['qid']} {' '.join(u['docids'][:3])} is not a unit of the folder's holes any more "
                    "(its runs or judgments changed since the plan)")  # fmt: skip
        out.append(i)
    return out


@dataclass
class EstimatedView:
    """The estimated view of a folder, as ``judgments/estimate.json`` keeps it."""

    measure: str
    targets: list[str]
    value: list[float]
    low: list[float]
    high: list[float]
    judged: int
    units: int
    predictor: str
    quality: str
    aimed: list[str]
    left_out: int  # graded rows outside the sample: in the main table, not in the estimate
    refused: str = ""
    holes_left: int = 0  # the holes the round left unjudged (0: a view written before it was kept)

    def as_json(self) -> str:
        return json.dumps(vars(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> EstimatedView:
        return cls(**json.loads(text))

    def difference(self, a: str, b: str) -> tuple[float, float, float] | None:
        """Stage ``a`` minus stage ``b``: the estimate and its 95% interval (None: not a pair of the view)."""
        for t, v, lo, hi in zip(self.targets, self.value, self.low, self.high):
            if t == f"{a} - {b}":
                return v, lo, hi
            if t == f"{b} - {a}":
                return -v, -hi, -lo
        return None

    def settled(self) -> list[str]:
        return [f"{t.split(' - ')[0]} > {t.split(' - ')[1]}" if lo > 0 else f"{t.split(' - ')[1]} > {t.split(' - ')[0]}"
                for t, lo, hi in zip(self.targets, self.low, self.high) if " - " in t and (lo > 0 or hi < 0)]  # fmt: skip

    def text(self) -> str:
        if self.refused:
            return f"Estimated view: refused - {self.refused}\n"
        lines = [f"Estimated view: {self.measure} with every hole in any stage's top k graded, from {self.judged:,} "
                 f"human judgments of a random sample ({self.units:,} drawn units; 95% intervals for these queries, "
                 "not for other queries: the significance marks above answer that)",
                 f"grade model: {self.predictor}, {self.quality}",
                 f"the sample aimed at: {', '.join(self.aimed) or '-'}"
                 + (f"; {self.left_out} graded rows outside the sample are in the main table, not in this view"
                    if self.left_out else ""), "",
                 f"{'target':<36}  {'estimate':>8}  {'95% interval':>19}"]  # fmt: skip
        for t, v, lo, hi in zip(self.targets, self.value, self.low, self.high):
            mark = "  settled" if " - " in t and (lo > 0 or hi < 0) else ""
            lines.append(f"{t:<36}  {v:8.4f}  [{lo:8.4f}, {hi:8.4f}]{mark}")
        settled = self.settled()
        lines.append(f"settled at 95%: {', '.join(settled) if settled else 'none'}")
        lines += self.more()
        return "\n".join(lines) + "\n"

    def more(self) -> list[str]:
        """For each aimed pair the round left open, about how many more judgments would settle it with 80%
        power if the estimate holds - the standard error shrinking as 1/sqrt(judgments) until it is the
        estimate over ``1.96 + 0.84`` - never more than the holes left: past them, judging the remaining holes
        settles it exactly (a census has no interval). A guide for the next round, as the plan's power is."""
        out = []
        for t, v, lo, hi in zip(self.targets, self.value, self.low, self.high):
            if t not in self.aimed or lo > 0 or hi < 0 or not self.judged:
                continue
            se = (hi - lo) / 2 / Z95
            more = None if abs(v) < 1e-12 else max(1, round(self.judged * (((Z95 + Z80) * se / abs(v)) ** 2 - 1)))
            if more is not None and self.holes_left and more >= self.holes_left:
                out.append(f"{t}: open at {self.judged:,} judgments; judging the remaining {self.holes_left:,} holes "
                           "settles it exactly (fewer would not settle it with 80% power if the estimate "
                           f"{v:+.4f} holds)")  # fmt: skip
                continue
            said = "no number of judgments: the estimate is 0" if more is None else f"about {more:,} more judgments"
            out.append(f"{t}: open at {self.judged:,} judgments; {said} would settle it with 80% power if the estimate "
                       f"{v:+.4f} holds (the standard error narrows as 1/sqrt(judgments))")  # fmt: skip
        return out


def estimated_view(smp: Sampler, rec: Record, graded: Mapping[tuple[str, str], int], gain, predictor: str,
                   quality: str) -> EstimatedView:  # fmt: skip
    """The estimate from the graded rows, or the view refused with the reason (module doc)."""
    fr = smp.fr
    names = fr.targets
    sample = rec.holes

    def refused(why: str) -> EstimatedView:
        return EstimatedView(rec.measure, names, [], [], [], 0, 0, predictor, quality, rec.aimed, 0, why)

    missing = [h for h in sample if h not in graded]
    if missing:
        first = ", ".join(f"{q} {d}" for q, d in missing[:3])
        return refused(f"{len(missing)} of the {len(sample)} drawn holes have no grade ({first}{', ...' if len(missing) > 3 else ''}); "
                       "an estimate from the rows the raters chose to grade would not hold: grade them and add the worksheet again")  # fmt: skip
    idx = match(fr, rec)
    if isinstance(idx, str):
        return refused(idx)
    # every unit's probability, rebuilt from the plan's own rule on the same judgments (the variance
    # floor reads them all); the drawn units' must be the ones the worksheet recorded
    pi = smp.probabilities(rec.budget, rec.aimed or None).pi
    recorded = np.array([float(u["probability"]) for u in rec.units])
    if not np.allclose(pi[idx], recorded, rtol=1e-5, atol=1e-9):
        return refused("the draw's probabilities cannot be rebuilt from the folder (its runs, or stagebench's sampling "
                       "rule, changed since the plan)")  # fmt: skip
    pi[idx] = recorded
    drawn_gains = np.array([gain(graded[(u["qid"], d)]) for u in rec.units for d in u["docids"]], dtype=np.float64)
    e: Estimate = smp.estimate(pi, idx, drawn_gains)
    left_out = sum(1 for h in graded if h not in sample)
    return EstimatedView(rec.measure, names, e.value.tolist(), e.low.tolist(), e.high.tolist(), e.judged, e.units,
                         predictor, quality, rec.aimed, left_out, holes_left=len(fr.holes()) - e.judged)  # fmt: skip


__all__ = ["DESIGN_KIND", "ESTIMATE", "EstimatedView", "Record", "design_path", "estimated_view",
           "grade_model", "match", "same_probability"]  # fmt: skip
