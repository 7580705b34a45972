"""A judging round: which unjudged (query, product) pairs to send to raters so that a budget of
judgments settles the most open stage orders (``stagebench plan-judgments``), and how a plan fares
against the usual strategies when the answers are known (``--simulate``).

Two stages are *settled* on a measure when their bounds (every hole irrelevant .. every hole at the
top grade; :mod:`stagebench.results.views`) no longer overlap. Grading a hole ``h`` of query ``q``
closes the overlap of a pair (a, b) by ``g x w_a(h) + (top - g) x w_b(h)`` when a is the better
stage (``g``: its grade; ``w_s(h)``: what one unit of gain at h's rank in s's top k is worth to
the mean - for nDCG the rank's discount over the query's ideal DCG, over the number of queries; 0
when s does not rank h in its top k). Not knowing ``g``, the plan counts its expected closure at
the middle grade, ``top x (w_a + w_b) / 2``, and picks holes greedily: each next hole is the one
whose expected closures, each capped by what its pair still needs, sum highest (the pairs already
settled need nothing; a hole that no open pair ranks in its top k weighs nothing). This follows the
minimal-test-collection idea (Carterette, Allan and Sitaraman, SIGIR 2006: judge the documents
whose grades can change a comparison) for the bounds the stage table shows.

The other strategies: ``depth`` - depth pooling, the holes at every stage's rank 1, then rank 2, ...
(Cormack et al. 1998; the classic TREC pool) up to the budget; ``random`` - holes drawn at random
from the pool (seeded).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations

import numpy as np

from stagebench.metrics.compute import gain_map
from stagebench.metrics.names import Measure
from stagebench.results.views import stage_views

STRATEGIES = ("plan", "depth", "random")


@dataclass(frozen=True)
class Hole:
    """One unjudged (query, document) in the top ``depth`` of some stage: its rank in each stage
    (None: not in that stage's top ``depth``) and the plan's weight for it (0 unless planned)."""

    qid: str
    docid: str
    ranks: dict[str, int | None]
    weight: float = 0.0

    @property
    def best_rank(self) -> int:
        return min(r for r in self.ranks.values() if r is not None)


def pool_holes(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
               queries: Sequence[str], depth: int) -> list[Hole]:  # fmt: skip
    """Every hole in the top ``depth`` of any stage, once, in query order then first appearance."""
    out = []
    for q in queries:
        judged = qrels.get(q, {})
        seen: dict[str, dict[str, int | None]] = {}
        for s, by_q in ranked.items():
            for i, d in enumerate(by_q[q][:depth], start=1):
                if d not in judged:
                    seen.setdefault(d, dict.fromkeys(ranked))[s] = i
        out += [Hole(q, d, ranks) for d, ranks in seen.items()]
    return out


def _unit_worth(measure: Measure, rank: int | None, ideal: float, n_queries: int) -> float:
    """What one unit of gain at ``rank`` is worth to the mean of ``measure`` (see the module)."""
    k = measure.cutoff
    if rank is None or (k is not None and rank > k):
        return 0.0
    if measure.family in ("nDCG", "nDCG_Burges"):
        return 1.0 / math.log2(rank + 1) / ideal / n_queries if ideal > 0 else 0.0
    return 1.0 / n_queries


def _ideal_dcg(judgments: Mapping[str, int], gain: object, k: int | None) -> float:
    g = gain_map(gain)
    gains = sorted((g(x) for x in judgments.values() if g(x) > 0), reverse=True)[:k]
    return sum(x / math.log2(i + 2) for i, x in enumerate(gains))


@dataclass
class Plan:
    """The chosen holes, best first, and what the plan knew when it chose them."""

    holes: list[Hole]
    open_pairs: list[tuple[str, str]]
    overlap: dict[str, float]  # "a|b" -> how far the pair's bounds overlap now
    strategy: str = "plan"
    seed: int | None = None


def plan(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]], queries: Sequence[str],
         measure: Measure, top: int, rel: int, gain: object, budget: int, depth: int) -> Plan:  # fmt: skip
    """The greedy plan of the module's rule: at most ``budget`` holes from the top ``depth`` pool."""
    v = stage_views(ranked, qrels, queries, measure, top, rel, gain)
    pairs = list(combinations(ranked, 2))
    need = np.array([max(0.0, min(v.bounds[a][1], v.bounds[b][1]) - max(v.bounds[a][0], v.bounds[b][0]))
                     for a, b in pairs])  # fmt: skip
    holes = pool_holes(ranked, qrels, queries, depth)
    n = len(queries)
    top_gain = gain_map(gain)(top)
    ideal = {q: _ideal_dcg(qrels.get(q, {}), gain, measure.cutoff) for q in queries}
    closure = np.zeros((len(holes), len(pairs)))
    for i, h in enumerate(holes):
        w = {s: _unit_worth(measure, r, ideal[h.qid], n) for s, r in h.ranks.items()}
        for j, (a, b) in enumerate(pairs):
            closure[i, j] = top_gain * (w[a] + w[b]) / 2
    open_ = need > 0
    tiebreak = closure[:, open_].sum(axis=1) if open_.any() else closure.sum(axis=1)
    left = need.copy()
    chosen: list[Hole] = []
    free = np.ones(len(holes), dtype=bool)
    for _ in range(min(budget, len(holes))):
        score = np.minimum(closure, left).sum(axis=1)
        score = np.where(free, score + 1e-9 * tiebreak, -1.0)
        i = int(np.argmax(score))
        if score[i] <= 0:  # nothing left that any pair's order could use
            break
        free[i] = False
        left = np.maximum(0.0, left - closure[i])
        chosen.append(Hole(holes[i].qid, holes[i].docid, holes[i].ranks, round(float(score[i]), 9)))
    return Plan(chosen, [p for p, o in zip(pairs, open_) if o], {f"{a}|{b}": round(float(x), 6) for (a, b), x in zip(pairs, need)})


def depth_pooling(holes: Sequence[Hole], budget: int) -> list[Hole]:
    """Depth pooling cut at ``budget``: the holes at every stage's rank 1, then rank 2, ... (query
    order within a rank)."""
    order = {id(h): i for i, h in enumerate(holes)}
    return sorted(holes, key=lambda h: (h.best_rank, order[id(h)]))[:budget]


def random_holes(holes: Sequence[Hole], budget: int, seed: int) -> list[Hole]:
    """``budget`` holes drawn at random from the pool, in pool order."""
    if budget >= len(holes):
        return list(holes)
    picked = set(random.Random(f"random-holes:{seed}").sample(range(len(holes)), budget))
    return [h for i, h in enumerate(holes) if i in picked]


@dataclass
class SimRow:
    strategy: str
    budget: int
    judged: float  # judgments the strategy got (a hole the answers lack stays a hole), mean over seeds
    settled: float  # stage pairs whose bounds no longer overlap
    settled_true: float  # of those, settled in the true order
    seeds: int = 1


@dataclass
class Simulation:
    measure: str
    stages: list[str]
    pairs: int
    depth: int
    pool: int  # holes in the top depth of any stage
    before: int  # pairs settled before any new judgment
    true_order: dict[str, float]
    rows: list[SimRow]
    answers: str
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "rows"}, "rows": [asdict(r) for r in self.rows]}

    def text(self) -> str:
        lines = [f"Judging strategies on {self.measure}: stage pairs settled (bounds no longer overlap) after each budget "
                 f"of judgments, answered by {self.answers}", "", *[f"# {n}" for n in self.notes], ""]  # fmt: skip
        rows = [["strategy", "budget", "judged", f"settled (of {self.pairs})", "in the true order"]]
        rows.append(["(none)", "0", "0", str(self.before), "-"])
        for r in self.rows:
            rows.append([r.strategy + (f" ({r.seeds} seeds)" if r.seeds > 1 else ""), str(r.budget), f"{r.judged:g}",
                         f"{r.settled:g}", f"{r.settled_true:g}"])  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines) + "\n"


def simulate(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
             queries: Sequence[str], measure: Measure, top: int, rel: int, gain: object, answers: Mapping[tuple[str, str], int],
             budgets: Sequence[int], depth: int, seeds: int, answers_name: str) -> Simulation:  # fmt: skip
    """Each strategy at each budget, its holes graded by ``answers`` ((qid, docid) -> grade, e.g. the
    rules judge's): how many stage pairs its judgments settle, and how many in the true order (the
    order under the human judgments plus every answer)."""
    holes = pool_holes(ranked, qrels, queries, depth)
    truth = {q: dict(d) for q, d in qrels.items()}
    for (q, d), g in answers.items():
        truth.setdefault(q, {}).setdefault(d, g)
    true_values = stage_views(ranked, truth, queries, measure, top, rel, gain).values["irrelevant"]
    pairs = list(combinations(ranked, 2))

    def outcome(chosen: Sequence[Hole]) -> tuple[int, int, int]:
        added = {q: dict(d) for q, d in qrels.items()}
        got = 0
        for h in chosen:
            g = answers.get((h.qid, h.docid))
            if g is not None:
                added.setdefault(h.qid, {})[h.docid] = g
                got += 1
        settled = stage_views(ranked, added, queries, measure, top, rel, gain).settled()
        right = sum(1 for (a, b), s in settled.items() if s and s == np.sign(true_values[a] - true_values[b]))
        return got, sum(1 for s in settled.values() if s), right

    rows = []
    for budget in budgets:
        for strategy in STRATEGIES:
            if strategy == "plan":
                picks = [plan(ranked, qrels, queries, measure, top, rel, gain, budget, depth).holes]
            elif strategy == "depth":
                picks = [depth_pooling(holes, budget)]
            else:
                picks = [random_holes(holes, budget, s) for s in range(seeds)]
            outs = [outcome(c) for c in picks]
            k = len(outs)
            rows.append(SimRow(strategy, budget, sum(o[0] for o in outs) / k, sum(o[1] for o in outs) / k,
                               sum(o[2] for o in outs) / k, k))  # fmt: skip
    before = outcome([])[1]
    notes = [f"pool: the {len(holes):,} unjudged pairs in the top {depth} of any stage over {len(queries)} queries; "
             "plan = the greedy plan (docs/metrics.md#a-judging-round), depth = depth pooling (every stage's rank 1, "
             f"then rank 2, ...), random = holes drawn from the pool (mean over {seeds} seeds)",
             "true order: " + " > ".join(sorted(true_values, key=lambda s: -true_values[s])) + " ("
             + ", ".join(f"{s} {v:.4f}" for s, v in true_values.items()) + "; the human judgments plus every answer)"]  # fmt: skip
    return Simulation(measure.name, list(ranked), len(pairs), depth, len(holes), before,
                      {s: round(v, 6) for s, v in true_values.items()}, rows, answers_name, notes)  # fmt: skip


__all__ = ["STRATEGIES", "Hole", "Plan", "SimRow", "Simulation", "depth_pooling", "plan", "pool_holes", "random_holes",
           "simulate"]
