"""A judging round: which unjudged (query, product) pairs to send to raters so that a budget of
judgments settles the most open stage orders (``stagebench plan-judgments``), and how a plan fares
against the usual strategies when the answers are known (``--simulate``).

A pair of stages is *settled* when the bounds of their difference, over every grading of the holes
left (a hole takes one grade for both stages), exclude 0 (:func:`stagebench.metrics.holes.pair_bounds`).
The plan settles the pairs one at a time, cheapest first: for each open pair it takes the direction
the main table orders it, and greedily picks the holes that move the pair's bound towards 0 the
most if each took the prior grade (the middle of the scale: 2 of ESCI's 0-3), recomputed exactly on
the hole's query after every pick, until the bound would pass 0 with a margin (:data:`MARGIN`);
it commits the pair that needs the fewest holes and fits the budget left (else the one the budget
brings nearest), takes its holes at the prior grade, and starts again. A hole the two stages rank
alike moves their difference only through the ideal ranking, and one neither ranks in its top k
not at all, so it weighs nothing. This follows the minimal-test-collection idea (Carterette, Allan
and Sitaraman, SIGIR 2006: judge the documents whose grades can change a comparison) for
guaranteed (worst-case) bounds rather than probabilities.

The other strategies: ``depth`` - depth pooling, the holes at every stage's rank 1, then rank 2, ...
(the classic TREC pool) up to the budget; ``random`` - holes drawn at random from the pool (seeded).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations

from stagebench.metrics.names import Measure
from stagebench.judgments.views import pair_settled, stage_views
from stagebench.metrics.holes import pair_query_bounds

#: how far past 0 the plan moves a pair's bound, as a share of the distance to 0, with the holes at
#: the prior grade (the grades are not known: a margin makes an expected settlement a likelier one)
MARGIN = 1.25


@dataclass(frozen=True)
class Hole:
    """One unjudged (query, document) in the top ``depth`` of some stage: its rank in each stage
    (None: not in that stage's top ``depth``) and the plan's weight for it: how far it moves its pair's bound, in the mean (0 unless planned)."""

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


@dataclass
class Plan:
    """The chosen holes, best first, and what the plan knew when it chose them."""

    holes: list[Hole]
    open_pairs: list[tuple[str, str]]
    overlap: dict[str, float]  # "a|b" -> how far the bounds of the pair's difference reach past 0 now


def plan(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]], queries: Sequence[str],
         measure: Measure, top: int, rel: int, gain: object, budget: int, depth: int) -> Plan:  # fmt: skip
    """The plan of the module's rule: at most ``budget`` holes from the top ``depth`` pool."""
    pairs = list(combinations(ranked, 2))
    holes = pool_holes(ranked, qrels, queries, depth)
    n, prior = len(queries), (top + 1) // 2
    state = {q: dict(qrels.get(q, {})) for q in queries}
    in_query: dict[str, list[int]] = {}
    for i, h in enumerate(holes):
        in_query.setdefault(h.qid, []).append(i)

    def bounds(j: int, q: str, judged: Mapping[str, int]) -> tuple[float, float]:
        a, b = pairs[j]
        return pair_query_bounds(measure, ranked[a][q], ranked[b][q], judged, top, rel, gain)

    cur = [{q: bounds(j, q, state[q]) for q in queries} for j in range(len(pairs))]

    def totals(j: int) -> tuple[float, float]:
        return sum(lo for lo, _ in cur[j].values()) / n, sum(hi for _, hi in cur[j].values()) / n

    first = [totals(j) for j in range(len(pairs))]
    main = stage_views(ranked, qrels, queries, measure, top, rel, gain).values["irrelevant"]
    overlap = {f"{a}|{b}": round(max(0.0, min(-lo, hi)), 6) for (a, b), (lo, hi) in zip(pairs, first)}
    open_at_start = [pairs[j] for j, (lo, hi) in enumerate(first) if lo <= 0 <= hi]
    chosen: list[int] = []
    taken: set[int] = set()
    worth: dict[int, float] = {}
    while len(chosen) < min(budget, len(holes)):
        room = min(budget, len(holes)) - len(chosen)
        options = []
        for j in range(len(pairs)):
            lo, hi = totals(j)
            if not lo <= 0 <= hi:
                continue
            a, b = pairs[j]  # settle it the way the main table orders it (the midpoint where it ties)
            up = main[a] > main[b] if main[a] != main[b] else lo + hi >= 0
            need = (-lo if up else hi) * MARGIN
            options.append((*_complete(j, up, need, n, holes, in_query, taken, state, cur[j], bounds, prior), need))
        if not options:
            break  # every pair settled, if the holes take the prior grade: no judgment left that the plan needs
        done = [o for o in options if o[2] and len(o[0]) <= room]
        # the cheapest pair the budget left settles; else the pair it brings nearest (the largest share of its need)
        picks, gains, _, _ = (min(done, key=lambda o: len(o[0])) if done else
                              max(options, key=lambda o: sum(o[1][:room]) / o[3] if o[3] > 0 else 0.0))  # fmt: skip
        picks = picks[:room]
        if not picks:
            break  # nothing left that any open pair's order could use
        for i, g in zip(picks, gains):
            h = holes[i]
            taken.add(i)
            worth[i] = g
            state[h.qid][h.docid] = prior
            for j in range(len(pairs)):
                cur[j][h.qid] = bounds(j, h.qid, state[h.qid])
        chosen += picks
    return Plan([Hole(holes[i].qid, holes[i].docid, holes[i].ranks, round(worth[i], 9)) for i in chosen],
                open_at_start, overlap)  # fmt: skip


def _complete(j: int, up: bool, need: float, n: int, holes: Sequence[Hole], in_query: Mapping[str, list[int]],
              taken: set[int], state: Mapping[str, Mapping[str, int]], cur: Mapping[str, tuple[float, float]],
              bounds: Callable[[int, str, Mapping[str, int]], tuple[float, float]],
              prior: int) -> tuple[list[int], list[float], bool]:  # fmt: skip
    """The holes (best first) that move pair ``j``'s bound by ``need`` in its mean, each taken at the
    prior grade, greedily by how far one moves it (a lazy heap: a pick changes only its own query's
    gains); each pick's gain; and whether they reach ``need`` (else: every pick that moves it)."""
    local: dict[str, dict[str, int]] = {}
    at: dict[str, tuple[float, float]] = {}
    version: dict[str, int] = {}

    def gain_of(i: int) -> float:
        h = holes[i]
        judged = local.get(h.qid, state[h.qid])
        now = at.get(h.qid, cur[h.qid])
        after = bounds(j, h.qid, {**judged, h.docid: prior})
        return ((after[0] - now[0]) if up else (now[1] - after[1])) / n

    heap = []
    for q, idx in in_query.items():
        for i in idx:
            if i not in taken:
                g = gain_of(i)
                if g > 0:
                    heap.append((-g, i, 0))
    heapq.heapify(heap)
    picks, gains, left = [], [], need
    while left > 0 and heap:
        g, i, v = heapq.heappop(heap)
        q = holes[i].qid
        if v != version.get(q, 0):
            g2 = gain_of(i)
            if g2 > 0:
                heapq.heappush(heap, (-g2, i, version.get(q, 0)))
            continue
        picks.append(i)
        gains.append(-g)
        left += g
        local.setdefault(q, dict(state[q]))[holes[i].docid] = prior
        at[q] = bounds(j, q, local[q])
        version[q] = version.get(q, 0) + 1
    return picks, gains, left <= 0
def depth_pooling(holes: Sequence[Hole], budget: int) -> list[Hole]:
    """Depth pooling cut at ``budget``: the holes at every stage's rank 1, then rank 2, ... (query
    order within a rank)."""
    return sorted(holes, key=lambda h: h.best_rank)[:budget]  # a stable sort keeps the query order


def random_holes(holes: Sequence[Hole], budget: int, seed: int) -> list[Hole]:
    """``budget`` holes drawn at random from the pool, in pool order."""
    if budget >= len(holes):
        return list(holes)
    picked = set(random.Random(f"random-holes:{seed}").sample(range(len(holes)), budget))
    return [h for i, h in enumerate(holes) if i in picked]


@dataclass(frozen=True)
class Pool:
    """What a strategy picks from: the folder's stages, judgments and measure, and the holes in every
    stage's top ``depth``."""

    ranked: Mapping[str, Mapping[str, list[str]]]
    qrels: Mapping[str, Mapping[str, int]]
    queries: Sequence[str]
    measure: Measure
    top: int
    rel: int
    gain: object
    depth: int
    holes: Sequence[Hole]


@dataclass(frozen=True)
class Strategy:
    """A judging round's way of choosing the pairs to judge, declared once: the CLI's choices, the
    worksheet, ``--simulate`` and add-judgments read it here. ``pick(pool, budget, seed)`` -> the holes;
    None for ``sample``, whose probability design lives in :mod:`stagebench.judgments.design` (its
    simulation is the estimated view's, :mod:`stagebench.judgments.coverage`)."""

    name: str
    what: str  # in words: the simulation's notes and --help
    pick: Callable[[Pool, int, int], list[Hole]] | None
    seeded: bool = False  # its holes depend on the seed: a simulation averages over seeds
    fills_budget: bool = False  # a worksheet's budget past its picks goes to depth pooling's next holes
    empty: str = "no unjudged pair in the top {depth} of any stage"  # why a pick came back empty

    @property
    def sampled(self) -> bool:
        return self.pick is None


#: the strategies, in the order --simulate shows them
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("plan", "the greedy plan (docs/metrics.md#a-judging-round)",
             lambda p, budget, seed: plan(p.ranked, p.qrels, p.queries, p.measure, p.top, p.rel, p.gain, budget, p.depth).holes,
             fills_budget=True, empty="every stage pair is settled on {measure}: no judgment could change an order (the plan is empty)"),
    Strategy("depth", "depth pooling (every stage's rank 1, then rank 2, ...)", lambda p, budget, seed: depth_pooling(p.holes, budget)),
    Strategy("random", "holes drawn from the pool", lambda p, budget, seed: random_holes(p.holes, budget, seed), seeded=True),
    Strategy("sample", "a random sample with recorded probabilities, for the estimated view", None,
             empty="the draw holds no unit (budget {budget}); draw again with another --seed or a larger --budget"),
)}  # fmt: skip


@dataclass
class SimRow:
    strategy: str
    budget: int
    judged: float  # judgments the strategy got (a hole the answers lack stays a hole), mean over seeds
    settled: float  # stage pairs the judgments settle (the bounds of their difference exclude 0)
    settled_true: float  # of those, settled in the true order
    table_settled: float = 0.0  # stage pairs whose own bounds no longer overlap (the stage table's marks)
    seeds: int = 1


@dataclass
class Simulation:
    measure: str
    stages: list[str]
    pairs: int
    depth: int
    pool: int  # holes in the top depth of any stage
    before: int  # pairs settled before any new judgment (their difference's bounds)
    table_before: int  # the same, by the stage table's own bounds
    true_order: dict[str, float]
    rows: list[SimRow]
    answers: str
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "rows"}, "rows": [asdict(r) for r in self.rows]}

    def text(self) -> str:
        lines = [f"Judging strategies on {self.measure}: stage pairs the judgments settle after each budget, answered "
                 f"by {self.answers}", "", *[f"# {n}" for n in self.notes], ""]  # fmt: skip
        rows = [["strategy", "budget", "judged", f"settled (of {self.pairs})", "in the true order", "table's bounds apart"]]
        rows.append(["(none)", "0", "0", str(self.before), "-", str(self.table_before)])
        for r in self.rows:
            rows.append([r.strategy + (f" ({r.seeds} seeds)" if r.seeds > 1 else ""), str(r.budget), f"{r.judged:g}",
                         f"{r.settled:g}", f"{r.settled_true:g}", f"{r.table_settled:g}"])  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines) + "\n"


def replay_strategies(ranked: Mapping[str, Mapping[str, list[str]]], qrels: Mapping[str, Mapping[str, int]],
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

    def outcome(chosen: Sequence[Hole]) -> tuple[int, int, int, int]:
        added = {q: dict(d) for q, d in qrels.items()}
        got = 0
        for h in chosen:
            g = answers.get((h.qid, h.docid))
            if g is not None:
                added.setdefault(h.qid, {})[h.docid] = g
                got += 1
        settled = pair_settled(ranked, added, queries, measure, top, rel, gain)
        right = sum(1 for (a, b), s in settled.items() if s and s == (true_values[a] > true_values[b]) - (true_values[a] < true_values[b]))
        # the table's marks: its bounds apart and the pair's own bounds too (results.scoring._unsettled)
        table = {p: t if t == settled[p] else 0 for p, t in stage_views(ranked, added, queries, measure, top, rel, gain).settled().items()}
        return got, sum(1 for s in settled.values() if s), right, sum(1 for s in table.values() if s)

    rows = []
    pool = Pool(ranked, qrels, queries, measure, top, rel, gain, depth, holes)
    picking = [s for s in STRATEGIES.values() if not s.sampled]
    for budget in budgets:
        for strategy in picking:
            picks = [strategy.pick(pool, budget, seed) for seed in (range(seeds) if strategy.seeded else [0])]
            outs = [outcome(c) for c in picks]
            k = len(outs)
            rows.append(SimRow(strategy.name, budget, sum(o[0] for o in outs) / k, sum(o[1] for o in outs) / k,
                               sum(o[2] for o in outs) / k, sum(o[3] for o in outs) / k, k))  # fmt: skip
    none = outcome([])
    notes = [f"pool: the {len(holes):,} unjudged pairs in the top {depth} of any stage over {len(queries)} queries; "
             + ", ".join(f"{s.name} = {s.what}" + (f" (mean over {seeds} seeds)" if s.seeded else "") for s in picking),
             "true order: " + " > ".join(sorted(true_values, key=lambda s: -true_values[s])) + " ("
             + ", ".join(f"{s} {v:.4f}" for s, v in true_values.items()) + "; the human judgments plus every answer)"]  # fmt: skip
    return Simulation(measure.name, list(ranked), len(pairs), depth, len(holes), none[1], none[3],
                      {s: round(v, 6) for s, v in true_values.items()}, rows, answers_name, notes)  # fmt: skip


__all__ = ["STRATEGIES", "Hole", "Plan", "Pool", "SimRow", "Simulation", "Strategy", "depth_pooling", "plan", "pool_holes", "random_holes",
           "replay_strategies"]
