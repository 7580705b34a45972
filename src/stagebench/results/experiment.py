"""Several run files against one qrels file, side by side (``stagebench eval QRELS RUN RUN ...``), as
ranx's ``compare`` and PyTerrier's ``pt.Experiment`` give it: every run's mean of every measure over
the same scored queries, each pair of runs tested (paired randomization test and t-test, Holm over
the pairs of each measure), and for stagebench's own measures the judged-only view and the bounds of
the holes beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from stagebench.metrics import AnyMeasure, Evaluation, HoleViews, evaluate, evaluate_views
from stagebench.stats import PairTest, bootstrap_ci, format_p, holm, paired_test
from stagebench.runs import Run


@dataclass
class Experiment:
    """Every run under every measure; ``tests[measure]``: each pair of runs (in the given order,
    first minus second) with its Holm-adjusted p-value."""

    runs: list[str]
    measures: list[str]
    views: dict[str, HoleViews | Evaluation]  # run -> its views (an Evaluation when every measure is delegated)
    tests: dict[str, list[tuple[PairTest, float]]]
    alpha: float
    permutations: int
    seed: int
    delegated: dict[str, str] = field(default_factory=dict)  # ir_measures' measures -> provider, what each computes
    baseline: str | None = None  # every run tested against this one only (pt.Experiment's baseline=)
    bootstrap: int = 2000
    test: str = "randomization"  # the test whose Holm-adjusted p marks significance (tests' second element)

    @property
    def viewed(self) -> list[str]:
        """The measures with a judged-only view and bounds (stagebench's own)."""
        return [m for m in self.measures if m not in self.delegated]

    def mean(self, run: str, measure: str, view: str = "irrelevant") -> float:
        v = self.views[run]
        if isinstance(v, Evaluation):
            return v.means[measure]
        if view in ("low", "high"):
            return v.means[measure][view]
        return getattr(v, view).means[measure]

    def better_than(self, run: str, measure: str) -> list[str]:
        """The runs ``run`` is significantly better than on ``measure`` (:attr:`test`, Holm)."""
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
        ev = main_view(first)
        which = ("every judged query with a positive grade; a run without a query scores there what an empty ranking "
                 "scores, as trec_eval -c" if ev.queries == "judged" else
                 "the judged queries with a positive grade that every run holds, as trec_eval without -c")  # fmt: skip
        lines = [f"{len(self.runs)} runs on {len(ev.scored_queries)} scored queries ({which}); nDCG: "
                 f"{ev.gain.describe()}; relevant = grade >= {ev.relevance_threshold} (binary measures and "
                 "ir_measures' measures whose name gives no rel)",
                 f"^x: significantly better than run x ({self._test_words}, Holm-Bonferroni over the {self.family} of "
                 f"each measure, alpha {self.alpha})", "",
                 "unjudged documents as irrelevant (trec_eval's default)"]  # fmt: skip
        if self.delegated:
            lines.insert(2, "computed by ir_measures: " + ", ".join(f"{n} ({how})" for n, how in
                         self.delegated.items()) + "; no judged-only view and no bounds, so a mark on them (^x?) is not "
                         "settled by the holes")  # fmt: skip
        lines += self._table(ids, "irrelevant", self.measures, marks=True)
        if self.baseline is not None:
            lines += ["", f"against the baseline {self.baseline}: the difference of the means, its bootstrap interval of "
                      f"the per-query differences adjusted as the p is (simultaneous over the {self.family}: level "
                      f"{100 * self.level:g}%, Bonferroni), p (Holm), wins/ties/losses over the queries"]  # fmt: skip
            lines += _aligned([["run", "measure", "difference", f"{100 * self.level:g}% CI", "p (Holm)", "W/T/L"],
                               *self.against_baseline()])  # fmt: skip
        if self.viewed:
            lines += ["", "judged only: unjudged documents removed before the cut (trec_eval -J)"]
            lines += self._table(ids, "judged_only", self.viewed)
            lines += ["", "bounds: every hole irrelevant .. every hole at the top grade"]
            rows = [["id", "run", *self.viewed]]
            for r in self.runs:
                rows.append([ids[r], r, *(f"[{self.mean(r, m, 'low'):.4f}, {self.mean(r, m, 'high'):.4f}]"
                                          for m in self.viewed)])  # fmt: skip
            lines += _aligned(rows)
        return "\n".join(lines) + "\n"

    @property
    def _test_words(self) -> str:
        if self.test == "ttest":
            return "paired t-test"
        return f"paired randomization test, {self.permutations} permutations, seed {self.seed}"

    @property
    def comparisons(self) -> int:
        """How many comparisons each measure's Holm correction is over."""
        return len(self.runs) - 1 if self.baseline is not None else len(self.runs) * (len(self.runs) - 1) // 2

    @property
    def level(self) -> float:
        """The intervals' level: simultaneous over the comparisons Holm is over (Bonferroni), so an interval
        that excludes 0 stands beside a p below alpha."""
        return 1 - self.alpha / max(self.comparisons, 1)

    @property
    def family(self) -> str:
        """The comparisons each measure's Holm correction is over, in words."""
        n = self.comparisons
        if self.baseline is not None:
            return f"{n} comparison{'s' if n != 1 else ''} with the baseline"
        return f"{n} pair{'s' if n != 1 else ''}"

    def against_baseline(self) -> list[list[str]]:
        """Each run against the baseline on each measure: difference, interval, p (Holm), W/T/L."""
        out = []
        for m in self.measures:
            for t, p in self.tests[m]:
                ea, eb = main_view(self.views[t.a]), main_view(self.views[t.b])
                diffs = [ea.per_query[m][q] - eb.per_query[m][q] for q in ea.scored_queries]
                lo, hi = bootstrap_ci(diffs, self.bootstrap, self.seed, level=self.level)
                out.append([t.a, m, f"{t.mean_a - t.mean_b:+.4f}", f"[{lo:+.4f}, {hi:+.4f}]", format_p(p),
                            f"{t.wins}/{t.ties}/{t.losses}"])  # fmt: skip
        return out

    def per_query_lines(self) -> list[str]:
        """run, measure, query, value (the main view), tab-separated: every run's per-query values."""
        out = []
        for r in self.runs:
            ev = main_view(self.views[r])
            for m in self.measures:
                out += [f"{r}\t{m}\t{q}\t{ev.per_query[m][q]:.4f}" for q in ev.scored_queries]
        return out

    def _table(self, ids: Mapping[str, str], view: str, measures: Sequence[str], marks: bool = False) -> list[str]:
        rows = [["id", "run", *measures]]
        for r in self.runs:
            cells = []
            for m in measures:
                open_ = "?" if m in self.delegated else ""
                won = sorted(ids[x] for x in self.better_than(r, m)) if marks else []
                mark = "^" + "".join(x + open_ for x in won) if won else ""
                cells.append(f"{self.mean(r, m, view):.4f}{mark}")
            rows.append([ids[r], r, *cells])
        return _aligned(rows)


def main_view(v: HoleViews | Evaluation) -> Evaluation:
    """A run's evaluation with unjudged documents as irrelevant (every measure is in it)."""
    return v if isinstance(v, Evaluation) else v.irrelevant


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def experiment(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run], measures: Sequence[AnyMeasure],
               relevance_threshold: int, gain: object, permutations: int, seed: int, alpha: float,
               queries: str = "judged", delegated: Mapping[str, str] | None = None, baseline: str | None = None,
               bootstrap: int = 2000, test: str = "randomization") -> Experiment:  # fmt: skip
    """The module's comparison of ``runs`` (name -> run, in the order to show them); ``queries="run"``:
    the scored queries every run holds (each pair tested on the same queries); ``delegated``: ir_measures'
    measures -> what each computes under the conventions (default: their names); ``baseline``: a run's
    name - every other run is tested against it alone (Holm over those), as pt.Experiment's ``baseline=``."""
    names = [m.name for m in measures]
    viewed = any(m.supports.views for m in measures)
    if queries == "run":  # one query set for every run: those all of them answer
        common = set.intersection(*({q for q, docs in run.items() if docs} for run in runs.values()))
        runs = {r: {q: docs for q, docs in run.items() if q in common} for r, run in runs.items()}
        qrels = {q: docs for q, docs in qrels.items() if q in common}
    kw = {"relevance_threshold": relevance_threshold, "gain": gain, "queries": queries}
    views: dict[str, HoleViews | Evaluation] = {
        r: evaluate_views(qrels, run, measures, **kw) if viewed else evaluate(qrels, run, measures, **kw)
        for r, run in runs.items()}  # fmt: skip
    tests = {}
    for m in names:
        pairs = []
        for a, b in (combinations(runs, 2) if baseline is None else [(r, baseline) for r in runs if r != baseline]):
            ea, eb = main_view(views[a]), main_view(views[b])
            qs = ea.scored_queries
            pairs.append(paired_test(a, b, m, [ea.per_query[m][q] for q in qs], [eb.per_query[m][q] for q in qs],
                                     permutations, seed))  # fmt: skip
        for t, pr, pt in zip(pairs, holm([t.p_rand for t in pairs]), holm([t.p_t for t in pairs])):
            t.p_rand_holm, t.p_t_holm = pr, pt  # both tests' Holm-adjusted p, as the stage table's comparisons carry
        tests[m] = [(t, t.p_t_holm if test == "ttest" else t.p_rand_holm) for t in pairs]
    if delegated is None:
        delegated = {m.name: m.supports.provider for m in measures if not m.supports.native}
    return Experiment(list(runs), names, views, tests, alpha, permutations, seed, dict(delegated), baseline, bootstrap,
                      test)


__all__ = ["Experiment", "experiment"]
