"""Query segments: every stage's measures within groups of queries, and whether each stage's change
against its input holds within each group.

A *segmentation* assigns each scored query one label. Built in (:data:`BUILT_IN`):

* ``length``: the query's length in words (whitespace-separated): ``1-2 words``, ``3-4 words``,
  ``5-6 words``, ``7+ words`` - short head queries against long tail ones;
* ``judged``: how many products the query has judged, in thirds of the scored queries (the
  edges are the counts at the 1/3 and 2/3 quantiles, so a count never straddles two segments);
* ``relevant``: how many judged products reach the relevance threshold, in thirds likewise;

and a user file (:func:`read_segment_file`): ``qid<TAB>segment`` a line, any number of segments.

For each segment: its queries, every measure's mean per stage, each stage's change against each of
its inputs with a paired randomization test (the run's permutations and seed), the p-values
Holm-corrected over every (segment, stage, input) of the segmentation for that measure, and the
stages in order of the measure. A segment with fewer than ``min_queries`` queries is not tested:
its changes carry no p-value and say so (``too_few``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from stagebench import stats
from stagebench.errors import DataError, StagebenchError
from stagebench.results.folder import RunFolder
from stagebench.results.scoring import stage_evaluations
from stagebench.runs import check_id
from stagebench.textfile import text_lines

#: the built-in segmentations, and what each needs from the folder
BUILT_IN = {"length": "query texts", "judged": "qrels", "relevant": "qrels"}
#: below this many queries a segment's changes are not tested
MIN_QUERIES = 10
_LENGTH_EDGES = ((1, 2), (3, 4), (5, 6))


@dataclass(frozen=True)
class Change:
    """One stage against one of its inputs, within one segment, for one measure."""

    stage: str
    against: str
    delta: float  # mean(stage) - mean(against) over the segment's queries
    wins: int
    losses: int
    p: float | None  # paired randomization test; None: too few queries to test
    p_holm: float | None

    def significant(self, alpha: float) -> bool:
        return self.p_holm is not None and self.p_holm < alpha


@dataclass(frozen=True)
class Segment:
    label: str
    queries: int
    means: dict[str, dict[str, float]]  # stage -> measure -> mean
    changes: dict[str, list[Change]]  # measure -> every stage against each of its inputs
    order: dict[str, list[str]]  # measure -> stages, best first (ties: pipeline order)
    too_few: bool


@dataclass(frozen=True)
class SegmentTable:
    """One segmentation of a run's scored queries."""

    by: str  # length | judged | relevant | the user file's path
    describe: str  # how the segments were made, one line
    measures: list[str]
    stages: list[str]
    segments: list[Segment]
    unassigned: int  # scored queries the segmentation gave no segment (a user file that leaves some out)
    min_queries: int
    permutations: int
    seed: int
    alpha: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return _rounded(asdict(self))


def _rounded(x):
    if isinstance(x, float):
        return round(x, 6) if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def length_segments(query_texts: Mapping[str, str], queries: Sequence[str]) -> dict[str, str]:
    """Each query's length in words, in the bins of :data:`_LENGTH_EDGES` and beyond."""
    out = {}
    for q in queries:
        n = len(query_texts.get(q, "").split())
        out[q] = next((f"{lo}-{hi} words" for lo, hi in _LENGTH_EDGES if lo <= n <= hi), None) or (
            f"{_LENGTH_EDGES[-1][1] + 1}+ words" if n > _LENGTH_EDGES[-1][1] else "0 words")
    return out


def count_segments(counts: Mapping[str, int], what: str) -> dict[str, str]:
    """Queries in thirds by a count: edges at the counts of the 1/3 and 2/3 quantiles (a count is in
    one segment only, so a segment may hold more or fewer than a third), each labelled by the
    smallest and largest count it holds."""
    values = np.asarray(sorted(counts.values()), dtype=np.int64)
    if values.size == 0:
        return {}
    cuts = sorted({int(np.quantile(values, 1 / 3, method="lower")), int(np.quantile(values, 2 / 3, method="lower"))})
    bins: list[tuple[int, int]] = []
    lo = int(values[0])
    for c in cuts:
        if c >= lo and c < int(values[-1]):
            bins.append((lo, c))
            lo = c + 1
    bins.append((lo, int(values[-1])))

    def bin_of(n: int) -> int:
        return next(i for i, (a, b) in enumerate(bins) if a <= n <= b)  # every count lies in a bin by construction

    members: dict[int, list[int]] = {}
    for n in counts.values():
        members.setdefault(bin_of(n), []).append(n)
    names = {i: f"{what} {min(v)}" if min(v) == max(v) else f"{what} {min(v)}-{max(v)}" for i, v in members.items()}

    return {q: names[bin_of(n)] for q, n in counts.items()}


def judged_segments(qrels: Mapping[str, Mapping[str, int]], queries: Sequence[str]) -> dict[str, str]:
    return count_segments({q: len(qrels.get(q, {})) for q in queries}, "judged")


def relevant_segments(qrels: Mapping[str, Mapping[str, int]], queries: Sequence[str], threshold: int) -> dict[str, str]:
    return count_segments({q: sum(g >= threshold for g in qrels.get(q, {}).values()) for q in queries}, "relevant")


def read_segment_file(path: str | Path) -> dict[str, str]:
    """``qid<TAB>segment`` a line (blank lines and ``#`` comments skipped); a query listed twice,
    a line without a tab, or an empty segment is one error naming the file and line."""
    p = Path(path)
    out: dict[str, str] = {}
    for no, line in text_lines(p, "segment file"):
        line = line.rstrip("\r\n")
        if not line.strip() or line.startswith("#"):
            continue
        qid, tab, seg = line.partition("\t")
        where = f"{p}, line {no}"
        if not tab:
            raise DataError(f"{where}: expected 'qid<TAB>segment', found no tab in {line[:60]!r}")
        check_id(qid, "query", where)
        seg = seg.strip()
        if not seg or re.search(r"[\t\n]", seg):
            raise DataError(f"{where}: query {qid!r}: the segment is empty or holds a tab")
        if qid in out and out[qid] != seg:
            raise DataError(f"{where}: query {qid!r} is given segment {seg!r} here and {out[qid]!r} earlier")
        out[qid] = seg
    if not out:
        raise DataError(f"{p}: no 'qid<TAB>segment' line")
    return out


def segment_table(by: str, describe: str, assignment: Mapping[str, str], per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
                  stages: Mapping[str, Sequence[str]], queries: Sequence[str], measures: Sequence[str], *, permutations: int,
                  seed: int, alpha: float, min_queries: int = MIN_QUERIES) -> SegmentTable:  # fmt: skip
    """``assignment`` (qid -> segment) over the run's scored ``queries``, every measure of
    ``per_query`` (stage -> measure -> qid -> value) per segment, ``stages`` (name -> its inputs, in
    pipeline order); see the module docstring."""
    if min_queries < 2:
        raise StagebenchError(f"min_queries {min_queries}: a paired test needs at least 2 queries")
    names = list(stages)
    pairs = [(s, i) for s, inputs in stages.items() for i in inputs if i in per_query]
    groups: dict[str, list[str]] = {}
    for q in queries:  # in the run's query order
        if q in assignment:
            groups.setdefault(assignment[q], []).append(q)
    notes = []
    extra = sorted(set(assignment) - set(queries))
    if extra:
        notes.append(f"{len(extra)} queries of the segmentation are not scored queries of this run (left out, e.g. {extra[0]!r})")
    raw: dict[str, dict[str, list[tuple]]] = {}  # measure -> label -> [(stage, input, delta, wins, losses, p)]
    for m in measures:
        for label, qs in groups.items():
            rows = []
            for st, inp in pairs:
                a = np.asarray([per_query[st][m][q] for q in qs])
                b = np.asarray([per_query[inp][m][q] for q in qs])
                d = a - b
                p = stats.randomization_test(a, b, permutations, seed) if len(qs) >= min_queries else None
                rows.append((st, inp, float(d.mean()), int(np.sum(d > 1e-12)), int(np.sum(d < -1e-12)), p))
            raw.setdefault(m, {})[label] = rows
    holm_of: dict[tuple[str, str, str, str], float] = {}
    for m, by_label in raw.items():  # one Holm family per measure: every tested (segment, stage, input)
        tested = [((m, label, st, inp), p) for label, rows in by_label.items() for st, inp, *_, p in rows if p is not None]
        holm_of.update(zip([k for k, _ in tested], stats.holm([p for _, p in tested])))
    segments = []
    for label in sorted(groups, key=_natural):
        qs = groups[label]
        means = {s: {m: float(np.mean([per_query[s][m][q] for q in qs])) for m in measures} for s in names}
        changes = {m: [Change(st, inp, delta, w, lo, p, holm_of.get((m, label, st, inp)))
                       for st, inp, delta, w, lo, p in raw[m][label]] for m in measures}  # fmt: skip
        order = {m: sorted(names, key=lambda s, m=m: (-means[s][m], names.index(s))) for m in measures}
        segments.append(Segment(label, len(qs), means, changes, order, len(qs) < min_queries))
    return SegmentTable(by, describe, list(measures), names, segments, sum(q not in assignment for q in queries),
                        min_queries, permutations, seed, alpha, notes)  # fmt: skip


def _natural(label: str) -> tuple:
    """Labels in natural order: 'judged 2-5' before 'judged 10-20'."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", label))


def assignment_for(by: str, queries: Sequence[str], query_texts: Callable[[], Mapping[str, str]],
                   qrels: Callable[[], Mapping[str, Mapping[str, int]]], threshold: int) -> tuple[dict[str, str], str]:
    """The segments of ``queries`` ``by`` a built-in (:data:`BUILT_IN`) or a user file's path, and how
    they were made in one line; ``query_texts`` and ``qrels`` are read only when needed."""
    if by == "length":
        return length_segments(query_texts(), queries), "query length in words"
    if by == "judged":
        return judged_segments(qrels(), queries), "judged products per query, in thirds of the queries"
    if by == "relevant":
        return (relevant_segments(qrels(), queries, threshold),
                f"relevant products (grade >= {threshold}) per query, in thirds of the queries")  # fmt: skip
    return read_segment_file(by), f"the segments of {by}"


def folder_segments(folder: RunFolder, by: str, min_queries: int = MIN_QUERIES) -> SegmentTable:
    """A finished folder's scored queries segmented ``by`` a built-in (:data:`BUILT_IN`) or a user
    file's path. Every file is read verified (:class:`RunFolder`): the per-query values rescored
    from the runs and qrels where the folder holds them, else read from ``per_query.csv``."""
    ev = folder.manifest.evaluation
    names = [s.name for s in folder.stages]
    if folder.holds("qrels.trec") and all(folder.holds(f"runs/{n}.trec") for n in names):
        # exact values, as the run's own segments table has them: rescored from the verified runs
        evals = stage_evaluations(folder.manifest, folder.qrels(), folder.runs())
        per_query = {n: e.per_query for n, e in evals.items()}
        queries = list(evals[names[0]].scored_queries)
    else:  # a committed folder: per_query.csv (verified; values to 6 decimals)
        per_query = folder.per_query()
        queries = list(per_query[names[0]][folder.metrics[0]]) if names and names[0] in per_query else []
    stages = [s for s in folder.stages if s.name in per_query]
    if not stages or not queries:
        raise StagebenchError(f"{folder.path}: no scored query of the manifest's stages in its runs or per_query.csv")

    def qrels():
        if not folder.holds("qrels.trec"):
            raise StagebenchError(f"{folder.path}: segments by {by} need the folder's qrels.trec, which it does not hold "
                                  "(a committed folder keeps its tables, not its runs and qrels): run its config again, "
                                  "or segment by length or by a file")  # fmt: skip
        return folder.qrels()

    assignment, describe = assignment_for(by, queries, lambda: folder.texts()["queries"], qrels, ev.relevance_threshold)
    return segment_table(by, describe, assignment, per_query, {s.name: list(s.inputs or []) for s in stages}, queries,
                         folder.metrics, permutations=ev.permutations, seed=ev.seed, alpha=ev.alpha,
                         min_queries=min_queries)  # fmt: skip


__all__ = ["BUILT_IN", "Change", "MIN_QUERIES", "Segment", "SegmentTable", "assignment_for", "count_segments",
           "folder_segments", "judged_segments", "length_segments", "read_segment_file", "relevant_segments",
           "segment_table"]
