"""Loaders for JSONL collections: BEIR folders and search-ranking-stack's sampled triplet."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stagebench.data.esci import ESCI_LABEL_NAMES
from stagebench.data.dataset import Dataset, check_queries, judged_queries
from stagebench.data.text import strip_html
from stagebench.errors import DataError
from stagebench.params import PositiveInt, param
from stagebench.runs import check_id
from stagebench.textfile import text_lines


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    for lineno, line in text_lines(path, "JSONL file"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, row


def _get(row: dict, key: str, path: Path, lineno: int):
    if key not in row:
        raise DataError(f"{path}:{lineno}: missing key {key!r}")
    return row[key]


@dataclass
class BeirOptions:
    path: str = param(doc="the BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv")
    split: str = param("test", "reads qrels/<split>.tsv")
    text_template: str = param("{title} {text}", "the indexed text, over title and text")
    corpus_scope: Literal["catalog", "judged"] = param("catalog", "index the whole corpus, or only the judged documents")
    max_queries: PositiveInt | None = param(None, "keep the first N judged queries, for quick runs")


def load_beir(opts: BeirOptions) -> Dataset:
    root = Path(opts.path)
    if not root.is_dir():
        raise DataError(f"{root}: BEIR folder not found (expected corpus.jsonl, queries.jsonl, qrels/{opts.split}.tsv)")
    corpus: dict[str, dict[str, str]] = {}
    cpath = root / "corpus.jsonl"
    for lineno, row in read_jsonl(cpath):
        did = check_id(_get(row, "_id", cpath, lineno), "document", f"{cpath}:{lineno}")
        if did in corpus:
            raise DataError(f"{cpath}:{lineno}: duplicate document id {did!r}")
        corpus[did] = {"title": strip_html(row.get("title") or ""), "text": strip_html(row.get("text") or "")}
    qpath = root / "queries.jsonl"
    all_queries: dict[str, str] = {}
    for lineno, row in read_jsonl(qpath):
        qid = check_id(_get(row, "_id", qpath, lineno), "query", f"{qpath}:{lineno}")
        if qid in all_queries:
            raise DataError(f"{qpath}:{lineno}: duplicate query id {qid!r}")
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{qpath}:{lineno}: query {qid!r} has empty text")
        all_queries[qid] = text
    qrels_path = root / "qrels" / f"{opts.split}.tsv"
    queries, qrels = judged_queries(all_queries, _read_beir_qrels(qrels_path), opts.max_queries, str(qrels_path), str(qpath))
    return _finish(Dataset(
        name=f"beir:{root.name}", corpus=corpus, queries=queries, qrels=qrels,
        text_template=opts.text_template, corpus_scope="catalog",
        splits={q: opts.split for q in queries}, source=str(root),
    ), opts.corpus_scope)  # fmt: skip


def _read_beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    reader = csv.reader((line for _, line in text_lines(path, "qrels file")), delimiter="\t")
    for lineno, row in enumerate(reader, start=1):
        if not row:
            continue
        if lineno == 1 and row[0] == "query-id":
            continue
        if len(row) != 3:
            raise DataError(f"{path}:{lineno}: expected 3 tab-separated columns query-id corpus-id score")
        try:
            grade = int(row[2])
        except ValueError:
            raise DataError(f"{path}:{lineno}: score {row[2]!r} is not an integer") from None
        check_id(row[0], "query", f"{path}:{lineno}")
        check_id(row[1], "document", f"{path}:{lineno}")
        docs = qrels.setdefault(row[0], {})
        if row[1] in docs:
            raise DataError(f"{path}:{lineno}: duplicate judgment for query {row[0]!r} document {row[1]!r} "
                            f"(first on line {first_line[row[0], row[1]]})")  # fmt: skip
        docs[row[1]] = grade
        first_line[row[0], row[1]] = lineno
    return qrels


def _finish(ds: Dataset, scope: str) -> Dataset:
    if scope == "judged":
        ds = ds.judged_only()
    if ds.qrels_docs_missing:
        ds = ds.with_warnings(
            f"{ds.source}: {ds.qrels_docs_missing} judgment(s) name documents absent from the corpus; "
            "they stay in the qrels (they count in recall denominators and can never be retrieved)"
        )
    return ds


@dataclass
class SrsJsonlOptions:
    """search-ranking-stack's sample: corpus.jsonl / queries.jsonl / qrels.jsonl."""

    path: str = param(doc="the folder holding corpus.jsonl, queries.jsonl and qrels.jsonl")
    text_template: str = param("{product_text}", "the indexed text, over product_text, title, brand, color")
    corpus_scope: Literal["catalog", "judged"] = param("catalog", "the sample itself only holds judged products")


def load_srs_jsonl(opts: SrsJsonlOptions) -> Dataset:
    root = Path(opts.path)
    if not root.is_dir():
        raise DataError(f"{root}: folder not found (expected corpus.jsonl, queries.jsonl, qrels.jsonl)")
    cpath, qpath, rpath = root / "corpus.jsonl", root / "queries.jsonl", root / "qrels.jsonl"
    corpus: dict[str, dict[str, str]] = {}
    for lineno, row in read_jsonl(cpath):
        pid = check_id(_get(row, "product_id", cpath, lineno), "product", f"{cpath}:{lineno}")
        if pid in corpus:
            raise DataError(f"{cpath}:{lineno}: duplicate product_id {pid!r}")
        corpus[pid] = {
            "product_text": strip_html(row.get("product_text") or ""),
            "title": strip_html(row.get("product_title") or ""),
            "brand": row.get("product_brand") or "",
            "color": row.get("product_color") or "",
        }
    queries: dict[str, str] = {}
    for lineno, row in read_jsonl(qpath):
        qid = check_id(_get(row, "query_id", qpath, lineno), "query", f"{qpath}:{lineno}")
        if qid in queries:
            raise DataError(f"{qpath}:{lineno}: duplicate query_id {qid!r}")
        queries[qid] = _get(row, "query", qpath, lineno)
        if not isinstance(queries[qid], str) or not queries[qid].strip():
            raise DataError(f"{qpath}:{lineno}: query {qid!r} has empty text")
    qrels: dict[str, dict[str, int]] = {}
    for lineno, row in read_jsonl(rpath):
        qid = check_id(_get(row, "query_id", rpath, lineno), "query", f"{rpath}:{lineno}")
        pid = check_id(_get(row, "product_id", rpath, lineno), "product", f"{rpath}:{lineno}")
        rel = _get(row, "relevance", rpath, lineno)
        if not isinstance(rel, int) or isinstance(rel, bool):
            raise DataError(f"{rpath}:{lineno}: relevance {rel!r} is not an integer grade")
        if qid not in queries:
            raise DataError(f"{rpath}:{lineno}: query_id {qid!r} not in {qpath}")
        docs = qrels.setdefault(qid, {})
        if pid in docs:
            raise DataError(f"{rpath}:{lineno}: duplicate judgment for query_id {qid!r} product_id {pid!r}")
        docs[pid] = rel
    check_queries(queries, str(qpath))
    queries = {q: t for q, t in queries.items() if q in qrels}
    return _finish(Dataset(
        name=f"srs-jsonl:{root.name}", corpus=corpus, queries=queries, qrels=qrels,
        text_template=opts.text_template, label_names=dict(ESCI_LABEL_NAMES), source=str(root),
    ), opts.corpus_scope)  # fmt: skip
