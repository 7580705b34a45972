"""Runs and qrels: the currency between stages, and their TREC file forms.

A *run* maps query id -> doc id -> score. Ranks are never stored; they are derived
by :func:`ranked` with one deterministic tie rule, the one trec_eval applies:

    score descending, then doc id in descending (byte-wise) lexicographic order.

Using trec_eval's rule everywhere means a run file written by stagebench, scored
by trec_eval/pytrec_eval or by :mod:`stagebench.metrics`, yields the same ranks.
"""

from __future__ import annotations

import hashlib
import logging
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stagebench.errors import DataError
from stagebench.files import atomic_write
from stagebench.textfile import text_lines

log = logging.getLogger("stagebench")

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """Return ``(docid, score)`` pairs in rank order (the trec_eval tie rule)."""
    # Sorting by docid descending first, then stably by score descending, gives
    # score desc with ties broken by docid desc.
    items = sorted(scores.items(), key=lambda kv: kv[0], reverse=True)
    items.sort(key=lambda kv: kv[1], reverse=True)
    return items


def ranked_ids(scores: Mapping[str, float]) -> list[str]:
    return [d for d, _ in ranked(scores)]


def rankings(runs: Mapping[str, Run], stages: Sequence[str], queries: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """stage -> query -> its ranking (trec_eval's tie rule), computed once for every use."""
    return {s: {q: ranked_ids(runs[s].get(q, {})) for q in queries} for s in stages}


def truncate(run: Mapping[str, Mapping[str, float]], depth: int) -> Run:
    """Keep the top ``depth`` documents of every query (rank order as :func:`ranked`)."""
    return {q: dict(ranked(docs)[:depth]) for q, docs in run.items()}


def run_digest(run: Mapping[str, Mapping[str, float]]) -> str:
    """sha256 of a run's content (queries sorted, documents in rank order, scores as ``repr``):
    equal digests mean equal runs, however they were computed."""
    h = hashlib.sha256()
    for qid in sorted(run):
        h.update(f"{qid}\x00".encode())
        for docid, score in ranked(run[qid]):
            h.update(f"{docid}\x00{float(score)!r}\x01".encode())
    return h.hexdigest()


def from_ranking(ranking: Mapping[str, list[str]]) -> Run:
    """Build a run from ordered doc lists: score = -rank (1-based), so order is exact."""
    return {q: {d: float(-(i + 1)) for i, d in enumerate(docs)} for q, docs in ranking.items()}


def qrels_digest(qrels: Mapping[str, Mapping[str, int]]) -> str:
    """sha256 over the sorted (query, doc, grade) judgments."""
    h = hashlib.sha256()
    for q in sorted(qrels):
        for d in sorted(qrels[q]):
            h.update(f"{q}\t{d}\t{qrels[q][d]}\n".encode())
    return h.hexdigest()


def check_id(value: Any, kind: str, where: str) -> str:
    """The one id check, for every loader and the Python API: an id is a string or an integer
    (returned as its decimal string) that a TREC file can hold - not null, not a float (a
    column with a null reads as floats: ``100164.0``), not empty, no whitespace or control
    character (newlines included). ``where`` names file and row (or the argument)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise DataError(f"{where}: the {kind} id is missing (null)")
    if isinstance(value, bool) or not isinstance(value, str | numbers.Integral):
        if isinstance(value, numbers.Real):
            raise DataError(f"{where}: {kind} id {value!r} is a float; ids are strings or integers (a column that holds "
                            "a null is read as floats)")  # fmt: skip
        raise DataError(f"{where}: {kind} id {value!r} is a {type(value).__name__}; ids are strings or integers")
    text = value if isinstance(value, str) else str(int(value))
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise DataError(f"{where}: {kind} id {text!r} is empty or holds whitespace or control characters (run and "
                        "qrels files are whitespace-separated and cannot hold it)")  # fmt: skip
    return text


def _checked(table: Any, where: str, value: str, convert: Any) -> dict[str, dict[str, Any]]:
    """{qid: {docid: value}} given in Python, ids by :func:`check_id`; ``convert(v)`` returns the
    value or None when it is not a ``value``. The one walk behind :func:`checked_run` and
    :func:`checked_qrels`."""
    if not isinstance(table, Mapping):
        raise DataError(f"{where}: expected a mapping query id -> {{doc id: {value}}}, got {type(table).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for q, docs in table.items():
        qid = check_id(q, "query", where)
        if not isinstance(docs, Mapping):
            raise DataError(f"{where}[{qid!r}]: expected a mapping doc id -> {value}, got {type(docs).__name__}")
        if qid in out:
            raise DataError(f"{where}: query id {qid!r} appears twice (as {q!r} and as a string or integer)")
        inner = out[qid] = {}
        for d, v in docs.items():
            did = check_id(d, "document", f"{where}[{qid!r}]")
            got = None if isinstance(v, bool) else convert(v)
            if got is None:
                raise DataError(f"{where}[{qid!r}][{did!r}]: {value} {v!r} is not {'a finite number' if value == 'score' else 'an integer'}")
            if did in inner:
                raise DataError(f"{where}[{qid!r}]: document id {did!r} appears twice")
            inner[did] = got
    return out


def checked_run(run: Mapping[Any, Mapping[Any, Any]], where: str = "run") -> Run:
    """A run given in Python (the API), checked as a run file is read: ids by :func:`check_id`,
    scores finite numbers."""
    return _checked(run, where, "score",
                    lambda v: float(v) if isinstance(v, numbers.Real) and math.isfinite(v) else None)  # fmt: skip


def checked_qrels(qrels: Mapping[Any, Mapping[Any, Any]], where: str = "qrels") -> Qrels:
    """Qrels given in Python (the API), checked as a qrels file is read: ids by
    :func:`check_id`, grades integers (not fractions, not booleans)."""
    return _checked(qrels, where, "grade", lambda v: int(v) if isinstance(v, numbers.Integral) else None)


_HEADER_WORD = re.compile(r"[A-Za-z][A-Za-z_-]*")


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "stagebench") -> None:
    """Write a run as ``qid Q0 docid rank score tag`` lines, ranks from :func:`ranked`.

    Scores are written with ``repr`` so they round-trip exactly and re-reading the
    file reproduces the same order.
    """

    def lines() -> Iterable[str]:
        for qid in sorted(run):
            for rank, (docid, score) in enumerate(ranked(run[qid]), start=1):
                yield f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n"

    atomic_write(Path(path), lines())


def _comment(line: str) -> bool:
    """A comment line as trec_eval 10 reads one: ``#`` in its first column (runs and qrels alike)."""
    return line.startswith("#")


def read_trec_run(path: str | Path, max_per_query: int | None = None) -> Run:
    """Read a TREC run file as trec_eval 10 reads it: ``qid Q0 docid rank score tag`` (the rank column
    ignored), ``#`` comment lines skipped, columns after the tag ignored (how many lines had them is
    logged); ``max_per_query``: keep each query's top N in trec_eval's order (``trec_eval -M N``)."""
    path = Path(path)
    run: Run = {}
    extra = 0
    for lineno, line in text_lines(path, "run file"):
        if not line.strip() or _comment(line):
            continue
        parts = line.split()
        if len(parts) < 6:
            raise DataError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}")
        extra += len(parts) > 6
        qid, _, docid, _, score_s, _ = parts[:6]
        try:
            score = float(score_s)
        except ValueError:
            raise DataError(f"{path}:{lineno}: score {score_s!r} is not a number") from None
        if not math.isfinite(score):
            raise DataError(f"{path}:{lineno}: score {score_s!r} is not a finite number")
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise DataError(f"{path}:{lineno}: duplicate line for query {qid!r} document {docid!r} (a run ranks a "
                            "document once)")  # fmt: skip
        docs[docid] = score
    if extra:
        log.warning("%s: %d line(s) have columns after the run tag; ignored, as trec_eval 10 ignores them", path, extra)
    if max_per_query is not None:
        if max_per_query < 1:
            raise DataError(f"{path}: at most {max_per_query} documents per query: give N >= 1")
        run = truncate(run, max_per_query)
    return run


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> None:
    def lines() -> Iterable[str]:
        for qid in sorted(qrels):
            for docid in sorted(qrels[qid]):
                yield f"{qid} 0 {docid} {int(qrels[qid][docid])}\n"

    atomic_write(Path(path), lines())


def read_trec_qrels(path: str | Path) -> Qrels:
    """Read TREC qrels (``qid iter docid grade``; a BEIR-style 3-column TSV with a header also works;
    ``#`` comment lines skipped, as trec_eval 10 skips them).

    Line 1 is skipped only when it is a header: its grade column is a word such as ``score``
    (``q1 0 d1 3.5`` is an error, not a header). A query-document pair judged twice is an
    error naming both lines, whether the grades agree or not.
    """
    path = Path(path)
    qrels: Qrels = {}
    first_line: dict[tuple[str, str], int] = {}
    for lineno, line in text_lines(path, "qrels file"):
        parts = line.split()
        if not parts or _comment(line):
            continue
        if len(parts) == 4:
            qid, _, docid, grade_s = parts
        elif len(parts) == 3:
            qid, docid, grade_s = parts
        else:
            raise DataError(f"{path}:{lineno}: expected 'qid iter docid grade', got {len(parts)} columns")
        try:
            grade = int(grade_s)
        except ValueError:
            if lineno == 1 and _HEADER_WORD.fullmatch(grade_s):  # a header such as "query-id corpus-id score"
                continue
            raise DataError(f"{path}:{lineno}: grade {grade_s!r} is not an integer") from None
        docs = qrels.setdefault(qid, {})
        if docid in docs:
            other = "" if docs[docid] == grade else f" with grade {docs[docid]}, here {grade}"
            raise DataError(f"{path}:{lineno}: query {qid!r} document {docid!r} is judged twice (first on line "
                            f"{first_line[qid, docid]}{other})")  # fmt: skip
        docs[docid] = grade
        first_line[qid, docid] = lineno
    return qrels
