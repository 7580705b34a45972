"""Fusion of several runs into one.

**RRF** (Cormack et al., 2009): ``score(d) = sum_i w_i / (k + rank_i(d))`` over the input
runs that contain ``d`` within their top ``depth``; ranks are 1-based and come from the
run tie rule. A run that does not contain ``d`` (it is shallower, or ``d`` is below
``depth``) contributes nothing - exactly as if ``rank_i(d)`` were infinite. So fusing a
depth-100 run with a depth-1000 run is well defined: documents only the deep run found
are scored from that run alone.

**Score fusion**: each input's scores are normalised per query (``minmax`` to [0, 1], a
query whose scores are all equal maps to 1; ``zscore`` to mean 0, sd 1, sd 0 maps to 0;
or ``none``), weighted, and combined: ``combsum`` adds them; ``combmnz`` multiplies the
sum by the number of inputs that retrieved the document. Missing documents contribute 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from stagebench.params import NonNegativeFloat, PositiveInt, param
from stagebench.runs import Run, ranked, truncate
from stagebench.stages.base import Server, Stage, StageContext


@dataclass
class RRFParams:
    k: NonNegativeFloat = param(60.0, "the RRF constant: score = sum of w / (k + rank)")
    weights: list[NonNegativeFloat] | None = param(None, "one weight per input, in order (null: all 1)")
    depth: PositiveInt | None = param(None, "use the top depth of each input (null: all of it)")
    top_k: PositiveInt | None = param(None, "cut the fused run (null: keep every fused document)")


@dataclass
class ScoreFusionParams:
    method: Literal["combsum", "combmnz"] = param("combsum", "combsum adds; combmnz multiplies the sum by the inputs that found the document")
    norm: Literal["minmax", "zscore", "none"] = param("minmax", "per-query normalisation of each input's scores")
    weights: list[float] | None = param(None, "one weight per input, in order (null: all 1)")
    depth: PositiveInt | None = param(None, "use the top depth of each input (null: all of it)")
    top_k: PositiveInt | None = param(None, "cut the fused run (null: keep every fused document)")


def check_weights(weights: list[float] | None, inputs: list[str]) -> list[tuple[str, str]]:
    if weights is None:
        return []
    if len(weights) != len(inputs):
        return [("weights", f"has {len(weights)} values for {len(inputs)} inputs ({', '.join(inputs)}): give one per input")]
    if not any(weights):
        return [("weights", "are all 0: every fused score would be 0")]
    return []


def rrf(runs: list[Run], k: float = 60.0, weights: list[float] | None = None, depth: int | None = None) -> Run:
    w = weights or [1.0] * len(runs)
    out: Run = {}
    for qid in sorted(set().union(*runs)):
        acc: dict[str, float] = {}
        for run, wi in zip(runs, w, strict=True):
            docs = run.get(qid)
            if not docs:
                continue
            for rank, (d, _) in enumerate(ranked(docs)[:depth], start=1):
                acc[d] = acc.get(d, 0.0) + wi / (k + rank)
        out[qid] = acc
    return out


def normalise(scores: dict[str, float], norm: str) -> dict[str, float]:
    if norm == "none" or not scores:
        return dict(scores)
    v = np.fromiter(scores.values(), dtype=np.float64)
    if norm == "minmax":
        lo, hi = v.min(), v.max()
        nv = np.ones_like(v) if hi == lo else (v - lo) / (hi - lo)
    else:
        sd = v.std()
        nv = np.zeros_like(v) if sd == 0 else (v - v.mean()) / sd
    return dict(zip(scores, nv.tolist()))


def score_fusion(runs: list[Run], method: str = "combsum", norm: str = "minmax",
                 weights: list[float] | None = None, depth: int | None = None) -> Run:  # fmt: skip
    w = weights or [1.0] * len(runs)
    out: Run = {}
    for qid in sorted(set().union(*runs)):
        acc: dict[str, float] = {}
        hits: dict[str, int] = {}
        for run, wi in zip(runs, w, strict=True):
            docs = run.get(qid)
            if not docs:
                continue
            top = dict(ranked(docs)[:depth])
            for d, s in normalise(top, norm).items():
                acc[d] = acc.get(d, 0.0) + wi * s
                hits[d] = hits.get(d, 0) + 1
        if method == "combmnz":
            acc = {d: s * hits[d] for d, s in acc.items()}
        out[qid] = acc
    return out


def _cut(run: Run, top_k: int | None) -> Run:
    return run if top_k is None else truncate(run, top_k)


class _FusionStage(Stage):
    """Fusers: one or more inputs, no corpus text, one weight per input."""

    min_inputs, max_inputs = 1, None
    reads_corpus = False

    @classmethod
    def check_params(cls, params: RRFParams | ScoreFusionParams, inputs: list[str]) -> list[tuple[str, str]]:
        return check_weights(params.weights, inputs)

    @classmethod
    def tune_space(cls, params: RRFParams | ScoreFusionParams, inputs: list[str]) -> dict[str, list]:
        """Equal weights, or one input weighed twice the others."""
        if len(inputs) < 2:
            return {}
        return {"weights": [None, *([2.0 if j == i else 1.0 for j in range(len(inputs))] for i in range(len(inputs)))]}

    def server(self, ctx: StageContext) -> Server:
        """Fusion is per query: serving one query is fusing that query's input lists."""
        return lambda qid, inputs: self(ctx, inputs)


class RRFStage(_FusionStage):
    type_name = "rrf"
    Params = RRFParams

    @classmethod
    def tune_space(cls, params: RRFParams, inputs: list[str]) -> dict[str, list]:
        return {"k": [5.0, 20.0, 60.0, 100.0], **super().tune_space(params, inputs)}

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: RRFParams = self.params
        return _cut(rrf(inputs, p.k, p.weights, p.depth), p.top_k)


class ScoreFusionStage(_FusionStage):
    type_name = "score_fusion"
    Params = ScoreFusionParams
    packages = ("numpy",)

    @classmethod
    def tune_space(cls, params: ScoreFusionParams, inputs: list[str]) -> dict[str, list]:
        return {"norm": ["minmax", "zscore"], "method": ["combsum", "combmnz"], **super().tune_space(params, inputs)}

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: ScoreFusionParams = self.params
        return _cut(score_fusion(inputs, p.method, p.norm, p.weights, p.depth), p.top_k)
