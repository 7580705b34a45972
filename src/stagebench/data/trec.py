"""Plain TREC collections: TREC qrels + a topics file + a corpus file.

* qrels: ``qid iter docid grade`` lines.
* topics: a TSV (``qid<TAB>text``) or TREC SGML (``<top><num> ... <title> ...</top>``).
* corpus: JSONL (``_id`` / ``id`` / ``docid``, with ``title`` and ``text`` / ``contents``) or
  TSV (``docid<TAB>text``).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stagebench.data.jsonl import _finish, read_jsonl
from stagebench.data.dataset import Dataset, check_queries
from stagebench.data.text import strip_html
from stagebench.errors import DataError
from stagebench.params import param
from stagebench.runs import check_id, read_trec_qrels
from stagebench.textfile import read_text, text_lines


@dataclass
class TrecOptions:
    qrels: str = param(doc="TREC qrels: qid iter docid grade")
    topics: str = param(doc="topics: a TSV (qid<TAB>text) or TREC SGML (<top><num> ... <title> ...)")
    corpus: str = param(doc="the corpus: JSONL (_id/id/docid, title, text/contents) or TSV (docid<TAB>text)")
    topic_field: Literal["title", "desc"] = param("title", "which SGML topic field is the query")
    text_template: str = param("{title} {text}", "the indexed text, over title and text")
    corpus_scope: Literal["catalog", "judged"] = param("catalog", "index the whole corpus, or only the judged documents")


def read_topics(path: Path, field: str = "title") -> dict[str, str]:
    text = read_text(path, "topics file")
    topics: dict[str, str] = {}
    if "<top>" in text:
        for m in re.finditer(r"<top>(.*?)</top>", text, flags=re.S):
            block = m.group(1)
            lineno = text.count("\n", 0, m.start()) + 1
            num = re.search(r"<num>\s*(?:Number:)?\s*([^\s<]+)", block)
            body = re.search(rf"<{field}>\s*(?:Description:|Topic:)?(.*?)(?=<|\Z)", block, flags=re.S)
            if not num or not body:
                raise DataError(f"{path}:{lineno}: a <top> block lacks <num> or <{field}>")
            if num.group(1) in topics:
                raise DataError(f"{path}:{lineno}: duplicate <num> {num.group(1)!r}")
            topics[num.group(1)] = " ".join(body.group(1).split())
        return topics
    for lineno, row in enumerate(csv.reader(io.StringIO(text, newline=""), delimiter="\t"), start=1):
        if not row:
            continue
        if len(row) != 2:
            raise DataError(f"{path}:{lineno}: expected 2 tab-separated columns 'qid<TAB>text', got {len(row)}")
        check_id(row[0], "query", f"{path}:{lineno}")
        if row[0] in topics:
            raise DataError(f"{path}:{lineno}: duplicate query id {row[0]!r}")
        topics[row[0]] = row[1]
    return topics


def read_corpus(path: Path) -> dict[str, dict[str, str]]:
    corpus: dict[str, dict[str, str]] = {}
    if path.suffix == ".jsonl":
        for lineno, row in read_jsonl(path):
            did = row.get("_id", row.get("id", row.get("docid")))
            if did is None:
                raise DataError(f"{path}:{lineno}: missing document id ('_id', 'id' or 'docid')")
            did = check_id(did, "document", f"{path}:{lineno}")
            if did in corpus:
                raise DataError(f"{path}:{lineno}: duplicate document id {did!r}")
            corpus[did] = {"title": strip_html(row.get("title") or ""), "text": strip_html(row.get("text") or row.get("contents") or "")}
        return corpus
    for lineno, row in enumerate(csv.reader((ln for _, ln in text_lines(path, "corpus file")), delimiter="\t"), start=1):
        if not row:
            continue
        if len(row) < 2:
            raise DataError(f"{path}:{lineno}: expected 'docid<TAB>text'")
        check_id(row[0], "document", f"{path}:{lineno}")
        if row[0] in corpus:
            raise DataError(f"{path}:{lineno}: duplicate document id {row[0]!r}")
        corpus[row[0]] = {"title": "", "text": strip_html(row[1])}
    return corpus


def load_trec(opts: TrecOptions) -> Dataset:
    qrels = read_trec_qrels(opts.qrels)
    topics = read_topics(Path(opts.topics), opts.topic_field)
    check_queries(topics, opts.topics)
    unknown = [q for q in qrels if q not in topics]
    if unknown:
        raise DataError(f"{opts.qrels}: query id {unknown[0]!r} not in topics file {opts.topics}")
    corpus = read_corpus(Path(opts.corpus))
    queries = {q: t for q, t in topics.items() if q in qrels}
    return _finish(Dataset(
        name=f"trec:{Path(opts.qrels).stem}", corpus=corpus, queries=queries, qrels=qrels,
        text_template=opts.text_template, source=str(opts.qrels),
    ), opts.corpus_scope)  # fmt: skip
