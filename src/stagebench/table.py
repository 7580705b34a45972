"""The stage table, typed: one :class:`StageRow` per stage, the measure columns declared once.

Every renderer (text, Markdown, CSV, JSON, HTML, plots), ``check`` and the Python API read
these objects; nobody finds the measure columns by excluding a list of other keys.
``stage_table.json`` is :meth:`StageTable.to_json` - a list of flat rows, the measures as
top-level keys in evaluation order - and :meth:`StageTable.from_json` reads it back.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields

#: the measure of the ceilings, the depth sweep and the matrix unless ``evaluation.ceiling`` names another
CEILING_MEASURE = "nDCG@10"


def measure_key(measure: str) -> str:
    """A measure's name as a column or key suffix: ``nDCG@10`` -> ``ndcg10``, ``P(rel=2)@10`` -> ``p_rel_2_10``."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", measure.lower().replace("@", ""))).strip("_")


@dataclass(frozen=True)
class CeilingCells:
    """A reranker's ceiling in one measure (``evaluation.ceiling``): its candidate pool and what the pool
    allowed (:mod:`stagebench.results.ceilings`). In ``stage_table.json`` and the CSV the values are
    named after the measure (``input_ndcg10``); a measure other than the default is named too."""

    depth: int
    pool_recall: float
    input: float
    achieved: float
    oracle: float
    change: float  # achieved - input
    headroom_captured: float | None  # None: no room (oracle - input below the display resolution)
    measure: str = CEILING_MEASURE

    #: the values named after the measure, in stage_table.json's order
    NAMED = ("input", "achieved", "oracle")

    def to_json(self) -> dict:
        k = measure_key(self.measure)
        out = {"depth": self.depth, "pool_recall": self.pool_recall, **{f"{v}_{k}": getattr(self, v) for v in self.NAMED},
               f"{k}_change": self.change, "headroom_captured": self.headroom_captured}  # fmt: skip
        return out if self.measure == CEILING_MEASURE else {"measure": self.measure, **out}

    @classmethod
    def from_json(cls, d: dict) -> CeilingCells:
        measure = d.get("measure", CEILING_MEASURE)
        k = measure_key(measure)
        inp, ach = d[f"input_{k}"], d[f"achieved_{k}"]
        return cls(depth=d["depth"], pool_recall=d["pool_recall"], input=inp, achieved=ach, oracle=d[f"oracle_{k}"],
                   change=d.get(f"{k}_change", ach - inp), headroom_captured=d["headroom_captured"], measure=measure)


@dataclass(frozen=True)
class DepthCells:
    """One depth of a reranker's depth sweep (``depths:``): its ceiling at that depth in the ceiling
    measure, what it achieved (and whether significantly differently from its input), and how many
    pairs it scored. Counts only, like every cell of the table: its seconds, which differ between an
    uninterrupted and a resumed run, live in the manifest and report.html's cost table."""

    depth: int
    pool_recall: float
    input: float
    achieved: float
    oracle: float
    headroom_captured: float | None
    p_value: float  # paired randomization test of achieved vs input, Holm-corrected over the depths
    significant: bool  # p_value < alpha
    pairs: int  # query-document pairs scored for this depth (timings: the manifest and report.html's cost table)
    measure: str = CEILING_MEASURE

    def to_json(self) -> dict:
        k = measure_key(self.measure)
        out = {"depth": self.depth, "pool_recall": self.pool_recall,
               **{f"{v}_{k}": getattr(self, v) for v in CeilingCells.NAMED}, "headroom_captured": self.headroom_captured,
               "p_value": self.p_value, "significant": self.significant, "pairs": self.pairs}  # fmt: skip
        return out if self.measure == CEILING_MEASURE else {"measure": self.measure, **out}

    @classmethod
    def from_json(cls, d: dict) -> DepthCells:
        measure = d.get("measure", CEILING_MEASURE)
        k = measure_key(measure)
        return cls(depth=d["depth"], pool_recall=d["pool_recall"], input=d[f"input_{k}"], achieved=d[f"achieved_{k}"],
                   oracle=d[f"oracle_{k}"], headroom_captured=d["headroom_captured"], p_value=d["p_value"],
                   significant=d["significant"], pairs=d["pairs"], measure=measure)  # fmt: skip


@dataclass(frozen=True)
class LLMCells:
    """An LLM reranker's windows: how each answer was read, what it cost (see stagebench.llm.listwise).

    Counts only: they are a function of the answers, so a run resumed from the cache has the
    same cells as an uninterrupted one. Timings and retries (which depend on the server's load
    at the time) live in the manifest and report.html."""

    windows: int  # model calls (listwise: windows)
    ok: int
    repaired: int
    fallback: int
    failed: int  # requests that failed after every retry (the window kept its input order)
    repairs: dict[str, int]  # repair -> windows that needed it
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # tokens / 1000 * price_per_1k_tokens; None: no price given
    method: str = "listwise"
    low_mass: int = 0  # label answers whose labels held under half of the next-token probability
    label_mass: float | None = None  # the labels' mean share of the next-token probability


#: the cells an LLM row holds (a table written before retries left it also names ``retries``)
LLM_CELL_FIELDS = frozenset(f.name for f in fields(LLMCells))


@dataclass
class StageRow:
    stage: str
    id: str  # the letter significance marks use
    type: str
    inputs: list[str]
    metrics: dict[str, float]  # measure name -> mean, in evaluation order
    ci95: dict[str, list[float]]  # measure name -> [low, high]
    better_than: dict[str, list[str]]  # measure name -> letters of the stages this one significantly beats
    queries: int
    queries_without_results: int
    queries_excluded: dict[str, int]
    recall: dict[str, float]  # R@10, R@100, R@1000 (up to the run's depth)
    ceiling: CeilingCells | None
    lost: int
    top10_labels: dict[str, float] = field(default_factory=dict)
    llm: LLMCells | None = None
    depths: list[DepthCells] | None = None  # a reranker's depth sweep (params depths:)
    # the other treatments of unjudged documents (stagebench.metrics.holes); ``metrics`` holds them as irrelevant
    judged_only: dict[str, float] = field(default_factory=dict)  # measure -> mean, unjudged removed before the cut
    judged_only_better_than: dict[str, list[str]] = field(default_factory=dict)  # significance in that view
    bounds: dict[str, list[float]] = field(default_factory=dict)  # measure -> [low, high]: holes irrelevant / top grade
    unsettled: dict[str, list[str]] = field(default_factory=dict)  # measure -> letters of stages whose bounds overlap
    #: head to head (siblings, named pairs): other stage -> measure -> difference, ci95, p, wins, ties, losses, holes
    compared: dict[str, dict[str, dict]] = field(default_factory=dict)

    def to_json(self) -> dict:
        d = {"stage": self.stage, "id": self.id, "type": self.type, "inputs": list(self.inputs), **self.metrics}
        d.update(ci95=self.ci95, better_than=self.better_than, queries=self.queries,
                 queries_without_results=self.queries_without_results, queries_excluded=self.queries_excluded,
                 recall=self.recall, ceiling=None if self.ceiling is None else self.ceiling.to_json(),
                 lost=self.lost, top10_labels=self.top10_labels)  # fmt: skip
        d.update(judged_only=self.judged_only, judged_only_better_than=self.judged_only_better_than,
                 bounds=self.bounds, unsettled=self.unsettled)  # fmt: skip
        if self.llm is not None:
            d["llm"] = asdict(self.llm)
        if self.depths is not None:
            d["depths"] = [c.to_json() for c in self.depths]
        if self.compared:
            d["compared"] = self.compared
        return d

    @classmethod
    def from_json(cls, d: dict, metrics: list[str]) -> StageRow:
        c = d.get("ceiling")
        return cls(stage=d["stage"], id=d["id"], type=d["type"], inputs=list(d["inputs"]),
                   metrics={m: d[m] for m in metrics if m in d}, ci95=d.get("ci95", {}),
                   better_than=d.get("better_than", {}), queries=d.get("queries", 0),
                   queries_without_results=d.get("queries_without_results", 0),
                   queries_excluded=d.get("queries_excluded", {}), recall=d.get("recall", {}),
                   ceiling=None if c is None else CeilingCells.from_json(c),
                   lost=d.get("lost", 0), top10_labels=d.get("top10_labels", {}),
                   llm=LLMCells(**{k: v for k, v in d["llm"].items() if k in LLM_CELL_FIELDS}) if d.get("llm") else None,
                   depths=[DepthCells.from_json(c) for c in d["depths"]] if d.get("depths") else None,
                   judged_only=d.get("judged_only", {}), judged_only_better_than=d.get("judged_only_better_than", {}),
                   bounds=d.get("bounds", {}), unsettled=d.get("unsettled", {}), compared=d.get("compared", {}))  # fmt: skip


@dataclass
class StageTable:
    rows: list[StageRow]
    metrics: list[str]  # the measure columns, in evaluation order
    title: str = ""
    notes: list[str] = field(default_factory=list)
    #: what the numbers mean: the nDCG gain map, the relevance threshold (stated in every JSON row)
    evaluation: dict = field(default_factory=dict)

    def to_json(self) -> str:
        extra = {"evaluation": self.evaluation} if self.evaluation else {}
        return json.dumps([{**r.to_json(), **extra} for r in self.rows], indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, metrics: list[str]) -> StageTable:
        return cls([StageRow.from_json(d, metrics) for d in json.loads(text)], list(metrics))

    def row(self, stage: str) -> StageRow:
        return next(r for r in self.rows if r.stage == stage)

    @property
    def ceiling_measure(self) -> str:
        """The measure of the ceilings, the depth sweep and the matrix (``evaluation.ceiling``)."""
        return next((r.ceiling.measure for r in self.rows if r.ceiling is not None), CEILING_MEASURE)
