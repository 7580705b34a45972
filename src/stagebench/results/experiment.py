"""Several run files against one qrels file, side by side (``stagebench eval QRELS RUN RUN ...``), as
ranx's ``compare`` and PyTerrier's ``pt.Experiment`` give it: every run's mean of every measure over
the same scored queries, each pair of runs tested (paired randomization test and t-test, Holm over
the pairs of each measure), and for stagebench's own measures the judged-only view and the bounds of
the holes beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from stagebench.metrics import Evaluation, HoleViews, Measure, evaluate, evaluate_views
from stagebench.metrics.delegate import Delegated
from stagebench.stats import PairTest, holm, paired_test
from stagebench.runs import Run


@dataclass
class Experiment:
    """Every run under every measure; ``tests[measure]``: each pair of runs (in the given order,
    first minus second) with its Holm-adjusted p-value."""

    runs: list[str]
    measures: list[str]
    views: dict[str, HoleViews | Evaluation]  # run -> its views (an Evaluation when a measure is delegated)
    tests: dict[str, list[tuple[PairTest, float]]]
    alpha: float
    permutations: int
    seed: int

    def mean(self, run: str, measure: str, view: str = "irrelevant") -> float:
        v = self.views[run]
        if isinstance(v, Evaluation):
            return v.means[measure]
        if view in ("low", "high"):
            return v.means[measure][view]
        return getattr(v, view).means[measure]

    def better_than(self, run: str, measure: str) -> list[str]:
        """The runs ``run`` is significantly better than on ``measure`` (randomization test, Holm)."""
        out = []
        for t, p in self.tests[measure]:
            if p < self.alpha and t.mean_a != t.mean_b:
                winner, loser = (t.a, t.b) if t.mean_a > t.mean_b else (t.b, t.a)
                if winner == run:
                    out.append(loser)
        return out

    def text(self) -> str:
        ids = {r: chr(ord("a") + i) if i < 26 else str(i) for i, r in enumerate(self.runs)}
        first = self.views[self.runs[0]]
        ev = first if isinstance(first, Evaluation) else first.irrelevant
        lines = [f"{len(self.runs)} runs on {len(ev.scored_queries)} scored queries (every judged query with a positive "
                 f"grade; a run without a query scores 0 there); nDCG: {ev.gain.describe()}; binary measures: relevant "
                 f"= grade >= {ev.relevance_threshold}",
                 f"^x: significantly better than run x (paired randomization test, {self.permutations} permutations, "
                 f"seed {self.seed}, Holm-Bonferroni over the {len(self.runs) * (len(self.runs) - 1) // 2} pairs of each "
                 f"measure, alpha {self.alpha})", "",
                 "unjudged documents as irrelevant (trec_eval's default)"]  # fmt: skip
        lines += self._table(ids, "irrelevant", marks=True)
        if not isinstance(first, Evaluation):
            lines += ["", "judged only: unjudged documents removed before the cut (trec_eval -J)"]
            lines += self._table(ids, "judged_only")
            lines += ["", "bounds: every hole irrelevant .. every hole at the top grade"]
            rows = [["id", "run", *self.measures]]
            for r in self.runs:
                rows.append([ids[r], r, *(f"[{self.mean(r, m, 'low'):.4f}, {self.mean(r, m, 'high'):.4f}]"
                                          for m in self.measures)])  # fmt: skip
            lines += _aligned(rows)
        return "\n".join(lines) + "\n"

    def _table(self, ids: Mapping[str, str], view: str, marks: bool = False) -> list[str]:
        rows = [["id", "run", *self.measures]]
        for r in self.runs:
            cells = []
            for m in self.measures:
                mark = "^" + "".join(sorted(ids[x] for x in self.better_than(r, m))) if marks and self.better_than(r, m) else ""
                cells.append(f"{self.mean(r, m, view):.4f}{mark}")
            rows.append([ids[r], r, *cells])
        return _aligned(rows)


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def experiment(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run], measures: Sequence[Measure | Delegated],
               relevance_threshold: int, gain: object, permutations: int, seed: int, alpha: float) -> Experiment:  # fmt: skip
    """The module's comparison of ``runs`` (name -> run, in the order to show them)."""
    names = [m.name for m in measures]
    own = all(isinstance(m, Measure) for m in measures)
    kw = {"relevance_threshold": relevance_threshold, "gain": gain}
    views: dict[str, HoleViews | Evaluation] = {
        r: evaluate_views(qrels, run, measures, **kw) if own else evaluate(qrels, run, measures, **kw) for r, run in runs.items()}
    tests = {}
    for m in names:
        pairs = []
        for a, b in combinations(runs, 2):
            ea = views[a] if isinstance(views[a], Evaluation) else views[a].irrelevant
            eb = views[b] if isinstance(views[b], Evaluation) else views[b].irrelevant
            qs = ea.scored_queries
            pairs.append(paired_test(a, b, m, [ea.per_query[m][q] for q in qs], [eb.per_query[m][q] for q in qs],
                                     permutations, seed))  # fmt: skip
        tests[m] = list(zip(pairs, holm([t.p_rand for t in pairs])))
    return Experiment(list(runs), names, views, tests, alpha, permutations, seed)


__all__ = ["Experiment", "experiment"]
