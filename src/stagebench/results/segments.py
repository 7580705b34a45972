"""Query segments: every stage's measures within groups of queries, and whether each stage's change
against its input holds within each group.

A *segmentation* assigns each scored query one label. Built in (:data:`BUILT_IN`):

* ``length``: the query's length in words (whitespace-separated): ``1-2 words``, ``3-4 words``,
  ``5-6 words``, ``7+ words`` - short head queries against long tail ones;
* ``judged``: how many products the query has judged, in thirds of the scored queries (the
  edges are the counts at the 1/3 and 2/3 quantiles, so a count never straddles two segments);
* ``relevant``: how many judged products reach the relevance threshold, in thirds likewise;
* ``negation``: whether the query holds a negation word (:data:`NEGATION_WORDS`: ``without``,
  ``no``, ``not``, ``non``, ``free``, ``except``, ``excluding``, ``but``, ``w/o``; or the phrase
  ``other than``) - a word rule, so ``no show socks`` counts and ``sugarless`` does not;
* ``locale`` and ``source``: segmentations the dataset gives (:attr:`Dataset.query_groups`): ESCI's
  locale of each query, and its source from the release's ``shopping_queries_dataset_sources.csv``
  when that file lies beside the examples file (``negations``, ``parse_pattern``, ``behavioral``,
  ``other``);

and a user file (:func:`read_segment_file`): ``qid<TAB>segment`` a line, any number of segments, or
a ``query_id,source`` CSV in the sources file's layout.

Segmentations the folder cannot compute again from its own files (``locale``, ``source``, a user
file) are stored in it by the run (:data:`STORED_FILE`, digests in the manifest), so the folder's
tables can be rendered again without the data.

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
from stagebench.data.esci import SOURCES_HEADER, read_sources
from stagebench.errors import DataError, StagebenchError
from stagebench.results.folder import RunFolder
from stagebench.results.scoring import stage_evaluations
from stagebench.runs import check_id
from stagebench.textfile import text_lines

#: the built-in segmentations, and what each is made from
BUILT_IN = {"length": "query texts", "negation": "query texts", "judged": "qrels", "relevant": "qrels",
            "locale": "the dataset", "source": "the dataset"}  # fmt: skip
#: the built-ins the dataset gives (:attr:`Dataset.query_groups`), stored in the folder by the run
FROM_DATASET = ("locale", "source")
#: the run folder's file of the segmentations it cannot compute from its own files:
#: ``segmentation<TAB>qid<TAB>segment`` a line
STORED_FILE = "query_segments.tsv"
NEGATION_WORDS = frozenset({"without", "no", "not", "non", "free", "except", "excluding", "but", "w/o"})
NEGATION_PHRASES = ("other than",)
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


def negation_segments(query_texts: Mapping[str, str], queries: Sequence[str]) -> dict[str, str]:
    """``negation`` when the query holds one of :data:`NEGATION_WORDS` (words split at whitespace and
    at any character but letters, digits and ``/``; ``leather-free`` holds ``free``), else ``no negation``."""
    out = {}
    for q in queries:
        words = [w for w in re.split(r"[^\w/]+", query_texts.get(q, "").lower()) if w]
        joined = f" {' '.join(words)} "
        hit = set(words) & NEGATION_WORDS or any(f" {p} " in joined for p in NEGATION_PHRASES)
        out[q] = "negation" if hit else "no negation"
    return out


def read_segment_file(path: str | Path) -> dict[str, str]:
    """``qid<TAB>segment`` a line (blank lines and ``#`` comments skipped), or the ESCI sources file's
    ``query_id,source`` CSV (told by its header); a query listed twice, a line without a tab, or an
    empty segment is one error naming the file and line."""
    p = Path(path)
    first = next((line for _, line in text_lines(p, "segment file")), "")
    if first.strip().lstrip("\ufeff").replace(" ", "").startswith(",".join(SOURCES_HEADER)):
        return read_sources(p)
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


def stored_here(by: str) -> bool:
    """Whether a run stores segmentation ``by`` in its folder (:data:`STORED_FILE`): what the folder's
    own files cannot give again (the dataset's segmentations and user files)."""
    return by in FROM_DATASET or by not in BUILT_IN


def stored_tsv(assignments: Mapping[str, Mapping[str, str]]) -> str:
    """:data:`STORED_FILE`'s text: ``segmentation<TAB>qid<TAB>segment`` a line."""
    return "".join(f"{by}\t{q}\t{seg}\n" for by, a in assignments.items() for q, seg in a.items())


def read_stored(text: str, source: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        parts = line.split("\t")
        if len(parts) != 3:
            raise DataError(f"{source}, line {no}: expected 'segmentation<TAB>qid<TAB>segment'")
        out.setdefault(parts[0], {})[parts[1]] = parts[2]
    return out


@dataclass(frozen=True)
class SegmentSources:
    """Where segmentations come from, each read only when one needs it: the query texts, the qrels, and
    the assignments stored by the run (or the dataset's ``query_groups``), segmentation -> qid -> segment."""

    query_texts: Callable[[], Mapping[str, str]]
    qrels: Callable[[], Mapping[str, Mapping[str, int]]]
    stored: Callable[[], Mapping[str, Mapping[str, str]]]
    threshold: int


def assignment_for(by: str, queries: Sequence[str], src: SegmentSources) -> tuple[dict[str, str], str]:
    """The segments of ``queries`` ``by`` a built-in (:data:`BUILT_IN`) or a user file's path, and how
    they were made in one line."""
    if by == "length":
        return length_segments(src.query_texts(), queries), "query length in words"
    if by == "negation":
        return negation_segments(src.query_texts(), queries), "whether the query holds a negation word (without, no, not, ...)"
    if by == "judged":
        return judged_segments(src.qrels(), queries), "judged products per query, in thirds of the queries"
    if by == "relevant":
        return (relevant_segments(src.qrels(), queries, src.threshold),
                f"relevant products (grade >= {src.threshold}) per query, in thirds of the queries")  # fmt: skip
    describe = {"locale": "the product locale of each query (the dataset's)",
                "source": "the query source of the ESCI sources file (the dataset's)"}.get(by, f"the segments of {by}")  # fmt: skip
    stored = src.stored()
    if by in stored:
        return dict(stored[by]), describe
    if by in FROM_DATASET:
        raise StagebenchError(f"segments by {by}: the run did not store them (its config's evaluation.segments did not "
                              f"name {by}, or its dataset gives none); pass a file instead: --by FILE"
                              + (" (e.g. the release's shopping_queries_dataset_sources.csv)" if by == "source" else ""))
    return read_segment_file(by), describe


def segment_tables(bys: Sequence[str], src: SegmentSources, ev, per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
                   stages: Mapping[str, Sequence[str]], queries: Sequence[str], measures: Sequence[str],
                   min_queries: int = MIN_QUERIES) -> list[SegmentTable]:  # fmt: skip
    """One table per segmentation in ``bys``, tested with the evaluation record ``ev``'s permutations,
    seed and alpha: the one path of a run's segments and of ``stagebench segments``."""
    out = []
    for by in bys:
        assignment, describe = assignment_for(by, queries, src)
        if not set(assignment) & set(queries):
            raise StagebenchError(f"segments by {by}: no query of it is a scored query of the run (e.g. "
                                  f"{next(iter(assignment), 'none')!r}; the run scored e.g. {queries[0]!r})")  # fmt: skip
        out.append(segment_table(by, describe, assignment, per_query, stages, queries, measures,
                                 permutations=ev.permutations, seed=ev.seed, alpha=ev.alpha, min_queries=min_queries))  # fmt: skip
    return out


def folder_segments(folder: RunFolder, bys: Sequence[str], min_queries: int = MIN_QUERIES) -> list[SegmentTable]:
    """A finished folder's scored queries segmented by each of ``bys``: a built-in (:data:`BUILT_IN`)
    or a user file's path. Every file is read verified (:class:`RunFolder`): the per-query values rescored
    from the runs and qrels where the folder holds them, else read from ``per_query.csv``."""
    ev = folder.manifest.evaluation
    names = [s.name for s in folder.stages]
    if folder.holds_runs():
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
            raise StagebenchError(f"{folder.path}: segments by judged or relevant products need the folder's qrels.trec, "
                                  "which it does not hold (a committed folder keeps its tables, not its runs and "
                                  "qrels): run its config again, or segment by length, negation or a file")  # fmt: skip
        return folder.qrels()

    def stored():
        if not folder.holds(STORED_FILE):
            return {}
        return read_stored(folder.verified(STORED_FILE).read_text(encoding="utf-8"), str(folder.path / STORED_FILE))

    src = SegmentSources(lambda: folder.texts()["queries"], qrels, stored, ev.relevance_threshold)
    return segment_tables(bys, src, ev, per_query, {s.name: list(s.inputs or []) for s in stages}, queries, folder.metrics,
                          min_queries)  # fmt: skip


__all__ = ["BUILT_IN", "Change", "FROM_DATASET", "MIN_QUERIES", "NEGATION_WORDS", "STORED_FILE", "Segment", "SegmentSources",
           "SegmentTable", "assignment_for", "count_segments", "folder_segments", "judged_segments", "length_segments",
           "negation_segments", "read_segment_file", "read_stored", "relevant_segments", "segment_table", "segment_tables",
           "stored_here", "stored_tsv"]
