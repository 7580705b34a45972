"""Runs and qrels: the currency between stages, and their TREC file forms.

A *run* maps query id -> doc id -> score. Ranks are never stored; they are derived
by :func:`ranked` with one deterministic tie rule, the one trec_eval applies:

    score descending, then doc id in descending (byte-wise) lexicographic order.

Using trec_eval's rule everywhere means a run file written by stagebench, scored
by trec_eval/pytrec_eval or by :mod:`stagebench.metrics`, yields the same ranks.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from stagebench.errors import DataError

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


def truncate(run: Mapping[str, Mapping[str, float]], depth: int) -> Run:
    """Keep the top ``depth`` documents of every query (rank order as :func:`ranked`)."""
    return {q: dict(ranked(docs)[:depth]) for q, docs in run.items()}


def run_digest(run: Mapping[str, Mapping[str, float]]) -> str:
    """sha256 of a run's content (queries sorted, documents in rank order, scores as ``repr``):
    equal digests mean equal runs, however they were computed."""
    import hashlib

    h = hashlib.sha256()
    for qid in sorted(run):
        h.update(f"{qid}\x00".encode())
        for docid, score in ranked(run[qid]):
            h.update(f"{docid}\x00{float(score)!r}\x01".encode())
    return h.hexdigest()


def from_ranking(ranking: Mapping[str, list[str]]) -> Run:
    """Build a run from ordered doc lists: score = -rank (1-based), so order is exact."""
    return {q: {d: float(-(i + 1)) for i, d in enumerate(docs)} for q, docs in ranking.items()}


def _atomic_write(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line)
    os.replace(tmp, path)


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "stagebench") -> None:
    """Write a run as ``qid Q0 docid rank score tag`` lines, ranks from :func:`ranked`.

    Scores are written with ``repr`` so they round-trip exactly and re-reading the
    file reproduces the same order.
    """

    def lines() -> Iterable[str]:
        for qid in sorted(run):
            for rank, (docid, score) in enumerate(ranked(run[qid]), start=1):
                yield f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n"

    _atomic_write(Path(path), lines())


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run file (6 whitespace-separated columns; the rank column is ignored)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: run file not found")
    run: Run = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise DataError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}")
            qid, _, docid, _, score_s, _ = parts
            try:
                score = float(score_s)
            except ValueError:
                raise DataError(f"{path}:{lineno}: score {score_s!r} is not a number") from None
            if math.isnan(score):
                raise DataError(f"{path}:{lineno}: score is NaN")
            docs = run.setdefault(qid, {})
            if docid in docs:
                raise DataError(f"{path}:{lineno}: duplicate document {docid!r} for query {qid!r}")
            docs[docid] = score
    return run


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> None:
    def lines() -> Iterable[str]:
        for qid in sorted(qrels):
            for docid in sorted(qrels[qid]):
                yield f"{qid} 0 {docid} {int(qrels[qid][docid])}\n"

    _atomic_write(Path(path), lines())


def read_trec_qrels(path: str | Path) -> Qrels:
    """Read TREC qrels (``qid iter docid grade``; a BEIR-style 3-column TSV with header also works)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: qrels file not found")
    qrels: Qrels = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
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
                if lineno == 1:  # a header line such as "query-id corpus-id score"
                    continue
                raise DataError(f"{path}:{lineno}: grade {grade_s!r} is not an integer") from None
            docs = qrels.setdefault(qid, {})
            if docid in docs and docs[docid] != grade:
                raise DataError(f"{path}:{lineno}: conflicting grades for query {qid!r} document {docid!r}")
            docs[docid] = grade
    return qrels
