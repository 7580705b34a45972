"""Per-query measure kernels over one ranked list and one query's qrels.

All functions take ``ranking`` (doc ids in rank order, see :func:`stagebench.runs.ranked`)
and ``judgments`` (doc id -> integer grade). Definitions follow trec_eval where trec_eval
has the measure; ``docs/metrics.md`` has the formulas and worked examples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def gain_of(grade: int, gain: str) -> float:
    """Gain of a grade: linear = grade (trec_eval), exp = 2**grade - 1. Grades <= 0 gain 0."""
    if grade <= 0:
        return 0.0
    return float(grade) if gain == "linear" else float(2**grade - 1)


def _discount(rank: int) -> float:
    return math.log2(rank + 1)


def ndcg(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None, gain: str) -> float:
    top = ranking if cutoff is None else ranking[:cutoff]
    dcg = sum(gain_of(judgments.get(d, 0), gain) / _discount(i) for i, d in enumerate(top, start=1))
    ideal_gains = sorted((gain_of(g, gain) for g in judgments.values()), reverse=True)
    if cutoff is not None:
        ideal_gains = ideal_gains[:cutoff]
    idcg = sum(g / _discount(i) for i, g in enumerate(ideal_gains, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def _num_rel(judgments: Mapping[str, int], rel: int) -> int:
    return sum(1 for g in judgments.values() if g >= rel)


def _is_rel(judgments: Mapping[str, int], docid: str, rel: int) -> bool:
    grade = judgments.get(docid)
    return grade is not None and grade >= rel


def reciprocal_rank(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None, rel: int) -> float:
    top = ranking if cutoff is None else ranking[:cutoff]
    for i, d in enumerate(top, start=1):
        if _is_rel(judgments, d, rel):
            return 1.0 / i
    return 0.0


def recall(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int) -> float:
    n = _num_rel(judgments, rel)
    if n == 0:
        return 0.0
    return sum(1 for d in ranking[:cutoff] if _is_rel(judgments, d, rel)) / n


def precision(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int) -> float:
    return sum(1 for d in ranking[:cutoff] if _is_rel(judgments, d, rel)) / cutoff


def average_precision(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None, rel: int) -> float:
    n = _num_rel(judgments, rel)
    if n == 0:
        return 0.0
    top = ranking if cutoff is None else ranking[:cutoff]
    hits = 0
    total = 0.0
    for i, d in enumerate(top, start=1):
        if _is_rel(judgments, d, rel):
            hits += 1
            total += hits / i
    return total / n


def hit(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int) -> float:
    return 1.0 if any(_is_rel(judgments, d, rel) for d in ranking[:cutoff]) else 0.0


def r_precision(ranking: Sequence[str], judgments: Mapping[str, int], rel: int) -> float:
    n = _num_rel(judgments, rel)
    if n == 0:
        return 0.0
    return sum(1 for d in ranking[:n] if _is_rel(judgments, d, rel)) / n


def judged(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int) -> float:
    return sum(1 for d in ranking[:cutoff] if d in judgments) / cutoff
