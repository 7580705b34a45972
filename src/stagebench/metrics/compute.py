"""Per-query measure kernels over one ranked list and one query's qrels.

All functions take ``ranking`` (doc ids in rank order, see :func:`stagebench.runs.ranked`)
and ``judgments`` (doc id -> integer grade). Definitions follow trec_eval where trec_eval
has the measure; ``docs/metrics.md`` has the formulas and worked examples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the KDD Cup 2022 (Shopping Queries) task-1 gains, as amazon-science/esci-data computes them:
#: ranking/prepare_trec_eval_files.py maps E/S/C/I to trec_eval levels 4/2/3/1 and evaluates with
#: ``trec_eval -c -J -m 'ndcg.1=0,2=0.01,3=0.1,4=1'`` - so E=1, S=0.01, C=0.1, I=0 (docs/metrics.md)
ESCI_GAINS = {3: 1.0, 2: 0.01, 1: 0.1, 0: 0.0}


@dataclass(frozen=True)
class Gain:
    """What a grade is worth to nDCG: ``linear`` (the grade, trec_eval), ``exponential``
    (2^grade - 1, Burges et al.), or a table grade -> gain (``esci``: the official task-1 one).
    Grades <= 0 gain 0 under the formulas; a table says every grade's gain itself."""

    name: str  # linear | exponential | esci | table
    table: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lookup", dict(self.table))

    def __call__(self, grade: int) -> float:
        if self.table:
            try:
                return self._lookup[grade]  # type: ignore[attr-defined]
            except KeyError:
                raise ValueError(f"gain map {self.describe()}: no gain for grade {grade}") from None
        if grade <= 0:
            return 0.0
        return float(grade) if self.name == "linear" else float(2**grade - 1)

    def describe(self) -> str:
        """For table headers and notes."""
        if self.name == "linear":
            return "linear gain (grade, as trec_eval)"
        if self.name == "exponential":
            return "exponential gain (2^grade - 1)"
        cells = ", ".join(f"{g}={v:g}" for g, v in sorted(self.table, reverse=True))
        return f"esci gain map ({cells}; esci-data's task-1 trec_eval gains)" if self.name == "esci" else \
            f"gain map ({cells})"  # fmt: skip

    def as_json(self) -> Any:
        return self.name if self.name != "table" else {str(g): v for g, v in self.table}


def gain_map(spec: Any) -> Gain:
    """A :class:`Gain` from a name or a ``{grade: gain}`` table (keys may be digit strings, as
    JSON writes them); ``ValueError`` says what is wrong."""
    if isinstance(spec, Gain):
        return spec
    if isinstance(spec, str):
        name = spec.lower()
        if name in ("exp", "exponential"):
            return Gain("exponential")
        if name == "linear":
            return Gain("linear")
        if name == "esci":
            return Gain("esci", tuple(sorted(ESCI_GAINS.items())))
        raise ValueError(f"unknown gain {spec!r} (known: linear, exponential, esci, or a table grade -> gain)")
    if isinstance(spec, Mapping):
        if not spec:
            raise ValueError("a gain table needs at least one grade -> gain")
        table = []
        for g, v in spec.items():
            try:
                grade = int(g)
            except (TypeError, ValueError):
                raise ValueError(f"gain table key {g!r}: grades are integers") from None
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"gain table grade {grade}: gain {v!r} must be a finite number >= 0")
            table.append((grade, float(v)))
        if not any(v > 0 for _, v in table):
            raise ValueError("a gain table needs a grade with a positive gain: with every gain 0, every nDCG is 0")
        return Gain("table", tuple(sorted(table)))
    raise ValueError(f"gain {spec!r}: a name (linear, exponential, esci) or a table grade -> gain")


def gain_of(grade: int, gain: Any) -> float:
    """Gain of a grade under ``gain`` (a name, a table or a :class:`Gain`)."""
    return gain_map(gain)(grade)


def discount(rank: int) -> float:
    """DCG's discount of a 1-based rank: gain / log2(rank + 1)."""
    return math.log2(rank + 1)


def dcg(gains: Sequence[float]) -> float:
    """The DCG of gains in rank order (the ideal DCG of gains sorted best first)."""
    return sum(g / discount(i) for i, g in enumerate(gains, start=1))


def ndcg(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None, gain: Any) -> float:
    """nDCG; the ideal order sorts the judged documents by the same gain map (not by grade)."""
    g_of = gain_map(gain)
    top = ranking if cutoff is None else ranking[:cutoff]
    got = sum(g_of(judgments[d]) / discount(i) for i, d in enumerate(top, start=1) if d in judgments)
    ideal_gains = sorted((g_of(g) for g in judgments.values()), reverse=True)
    if cutoff is not None:
        ideal_gains = ideal_gains[:cutoff]
    idcg = dcg(ideal_gains)
    return got / idcg if idcg > 0 else 0.0


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


def hits(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int) -> float:
    """The number of relevant documents in the top ``cutoff`` (ranx's ``hits``; trec_eval's
    ``num_rel_ret`` of the run cut at ``cutoff``)."""
    return float(sum(1 for d in ranking[:cutoff] if _is_rel(judgments, d, rel)))


def f1(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int) -> float:
    """Harmonic mean of P@k (hits / k) and R@k (hits / relevant); 0 when there is no hit."""
    p, r = precision(ranking, judgments, cutoff, rel), recall(ranking, judgments, cutoff, rel)
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


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


def err(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None, max_grade: int) -> float:
    """Expected reciprocal rank (Chapelle, Metzler, Zhang and Grinspan, CIKM 2009): a user reads down the
    ranking and stops at a document of grade g with probability (2^g - 1) / 2^max_grade; the expected
    reciprocal of the rank where they stop. gdeval.pl (the TREC Web track's, and ir_measures' ERR) fixes
    ``max_grade`` at 4; an unjudged document and grades <= 0 never stop the user."""
    top = ranking if cutoff is None else ranking[:cutoff]
    scale = 2.0**max_grade
    going, total = 1.0, 0.0
    for i, d in enumerate(top, start=1):
        g = judgments.get(d, 0)
        stop = (2.0**g - 1.0) / scale if g > 0 else 0.0
        total += going * stop / i
        going *= 1.0 - stop
    return total


def num_rel(judgments: Mapping[str, int], rel: int) -> float:
    """The number of judged documents at grade ``rel`` or above (trec_eval's ``num_rel``): a property of
    the judgments, whatever the ranking."""
    return float(_num_rel(judgments, rel))


def num_ret(ranking: Sequence[str], cutoff: int | None) -> float:
    """The number of documents the ranking holds (within the cut-off): trec_eval's ``num_ret``."""
    return float(len(ranking if cutoff is None else ranking[:cutoff]))


def rbp(ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None, rel: int, p: float,
        graded: bool) -> float:  # fmt: skip
    """Rank-biased precision (Moffat and Zobel, TOIS 2008): ``(1 - p) sum_i p^(i-1) u_i`` over the ranks
    (within the cut-off). Binary: ``u_i`` is 1 when the document's grade is ``>= rel``. Graded (trec_eval
    10's ``rbp``): ``u_i = grade / G`` where G is the query's highest judged grade when that is above 1
    (grades scaled into [0, 1] per query, as trec_eval scales them), else 1; grades <= 0 and holes count 0."""
    top = ranking if cutoff is None else ranking[:cutoff]
    if graded:
        scale = max(1, max(judgments.values(), default=0))
        worth = [max(0, judgments.get(d, 0)) / scale for d in top]
    else:
        worth = [1.0 if _is_rel(judgments, d, rel) else 0.0 for d in top]
    total, weight = 0.0, 1.0
    for u in worth:
        total += u * weight
        weight *= p
    return (1.0 - p) * total
