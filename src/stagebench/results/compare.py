"""Two run folders compared, stage by matching stage (``stagebench compare A B``,
:func:`stagebench.compare`): a typed :class:`Comparison`, rendered by
:func:`stagebench.report.tables.comparison_text`.

Two folders are comparable only when their numbers mean the same thing: the same gain and
relevance threshold, the same corpus, and the same judgments for the queries they share;
otherwise ``compare`` refuses with the difference (identical runs scored with linear and
with exponential gain are not "significantly different", they are incomparable). Measures
are matched by their canonical names (``ndcg@10`` is ``nDCG@10``, order does not matter);
those in one folder only are listed, not compared. With different query sets it compares
the common queries and says how many there are.

Reads each folder's manifest, ``per_query.csv`` and ``qrels.trec`` (when it is there), each
verified against the manifest's digests (nothing is re-run). For every stage name present in
both and every measure present in both: the means, the difference B - A, the paired
randomization test and the paired t-test on the queries both scored, Holm-Bonferroni
corrected across the matching stages of each measure, and win/tie/loss counts of B vs A.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stagebench import stats
from stagebench.errors import StagebenchError
from stagebench.results.folder import RunFolder


@dataclass(frozen=True)
class MeasureDelta:
    """One stage and measure in both folders: the means over the common queries, B - A, the paired
    tests (Holm-corrected across the matching stages of the measure) and B's wins, ties and losses."""

    stage: str
    measure: str
    mean_a: float
    mean_b: float
    p_rand: float  # paired randomization test, Holm-corrected
    p_t: float  # paired t-test, Holm-corrected
    wins: int
    ties: int
    losses: int
    significant: bool  # p_rand < alpha

    @property
    def delta(self) -> float:
        return self.mean_b - self.mean_a


@dataclass(frozen=True)
class Comparison:
    """Folders A and B compared: every matching stage and measure, and what was left out."""

    a: Path
    b: Path
    rows: list[MeasureDelta]
    queries: int  # the queries both scored (the paired tests' sample)
    queries_a: int
    queries_b: int
    same_query_sets: bool  # A and B scored the same queries
    alpha: float
    stages: list[str]  # compared, in A's order
    only_measures: list[str]  # in one folder only: not compared
    only_stages: list[str]
    judgments: str = "same"  # each: each folder's values under its own qrels

    def row(self, stage: str, measure: str) -> MeasureDelta:
        for r in self.rows:
            if r.stage == stage and r.measure == measure:
                return r
        raise KeyError(f"{stage} / {measure}: not compared (stages: {', '.join(self.stages)})")


#: evaluation settings that change what a number means
EVALUATION_KEYS = ("gain", "relevance_threshold")


def check_comparable(fa: RunFolder, fb: RunFolder, judgments: str = "same") -> None:
    """Refuse folders whose evaluation settings, corpus or (unless ``judgments`` is ``each``) shared
    judgments differ."""
    a, b = fa.path, fb.path
    ea, eb, da, db = fa.manifest.evaluation, fb.manifest.evaluation, fa.manifest.dataset, fb.manifest.dataset
    for key in EVALUATION_KEYS:
        va, vb = getattr(ea, key), getattr(eb, key)
        if va != vb:
            raise StagebenchError(f"{a} and {b} are scored differently: evaluation.{key} is {va!r} vs {vb!r}; "
                                  "their numbers cannot be compared (re-run one with the other's settings)")  # fmt: skip
    if da.fingerprint != db.fingerprint:
        raise StagebenchError(f"{a} and {b} ran on different corpora (dataset fingerprints {str(da.fingerprint)[:12]} vs "
                              f"{str(db.fingerprint)[:12]}): their numbers cannot be compared")  # fmt: skip
    if judgments == "each":  # the before/after of a judging round: each folder scored with its own qrels
        return
    if fa.holds_runs() and fb.holds_runs():
        ra, rb = fa.qrels(), fb.qrels()
        for q in sorted(set(ra) & set(rb)):
            if ra[q] != rb[q]:
                raise StagebenchError(f"{a} and {b} judge query {q!r} differently (qrels.trec): their numbers cannot "
                                      "be compared")  # fmt: skip
    elif da.qrels_fingerprint != db.qrels_fingerprint:
        raise StagebenchError(f"{a} and {b} were scored against different qrels: their numbers cannot be compared")


def compare_folders(a: str | Path, b: str | Path, permutations: int = 10000, seed: int = 42,
                    alpha: float = 0.05, pairs: dict[str, str] | None = None, judgments: str = "same") -> Comparison:  # fmt: skip
    """Compare two results folders (each file read verified against its manifest; nothing is re-run).
    ``pairs``: A's stage -> B's stage, compared besides the stages of the same name (shown as
    ``a=b``); ``judgments``: ``same`` (refuse folders that judge a shared query differently) or
    ``each`` (each folder's values under its own qrels, as its table has them: a judging round's
    before and after)."""
    if judgments not in ("same", "each"):
        raise StagebenchError(f"--judgments {judgments}: same or each")
    a, b = Path(a), Path(b)
    fa, fb = RunFolder.open(a), RunFolder.open(b)
    check_comparable(fa, fb, judgments)
    pa, pb = fa.per_query(), fb.per_query()
    for sa, sb in (pairs or {}).items():
        if sa not in pa or sb not in pb:
            raise StagebenchError(f"--pair {sa}={sb}: {sa!r} is not a stage of {a} ({', '.join(pa)})" if sa not in pa else
                                  f"--pair {sa}={sb}: {sb!r} is not a stage of {b} ({', '.join(pb)})")  # fmt: skip
        pa[f"{sa}={sb}"], pb[f"{sa}={sb}"] = pa[sa], pb[sb]
    order_a, order_b = list(pa), list(pb)
    stages = [s for s in order_a if s in pb]
    if not stages:
        raise StagebenchError(f"{a} and {b} have no stage name in common ({', '.join(order_a)} vs {', '.join(order_b)})")
    measures = [m for m in pa[stages[0]] if m in pb[stages[0]]]
    if not measures:
        raise StagebenchError(f"{a} and {b} have no measure in common ({', '.join(pa[stages[0]])} vs "
                              f"{', '.join(pb[stages[0]])})")  # fmt: skip
    one_side = [m for m in [*pa[stages[0]], *pb[stages[0]]] if m not in measures]
    qa, qb = set(pa[stages[0]][measures[0]]), set(pb[stages[0]][measures[0]])
    n_common = len(qa & qb)
    if n_common == 0:
        raise StagebenchError(f"{a} and {b} have no scored query in common")
    rows = []
    for m in measures:
        family = []
        for s in stages:
            qs = sorted(set(pa[s][m]) & set(pb[s][m]))
            n_common = len(qs)
            va, vb = [pa[s][m][q] for q in qs], [pb[s][m][q] for q in qs]
            family.append((s, stats.paired_test("B", "A", m, vb, va, permutations, seed)))
        for (s, c), pr, pt in zip(family, stats.holm([c.p_rand for _, c in family]), stats.holm([c.p_t for _, c in family])):
            rows.append(MeasureDelta(s, m, mean_a=c.mean_b, mean_b=c.mean_a, p_rand=pr, p_t=pt, wins=c.wins, ties=c.ties,
                                     losses=c.losses, significant=pr < alpha))  # fmt: skip
    paired = {x for sa, sb in (pairs or {}).items() for x in (sa, sb)}
    only = [s for s in order_a + order_b if s not in stages and s not in paired]
    return Comparison(a, b, rows, n_common, len(qa), len(qb), qa == qb, alpha, stages, list(dict.fromkeys(one_side)),
                      list(dict.fromkeys(only)), judgments)  # fmt: skip
