"""The dataset model: corpus + queries + graded qrels (+ optional splits and label names)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property

from stagebench.data.corpus import Corpus, DocTexts, TextColumn, as_corpus
from stagebench.data.text import render, template_fields
from stagebench.errors import DataError
from stagebench.runs import qrels_digest


def judged_doc_ids(qrels: dict[str, dict[str, int]]) -> set[str]:
    """Every document judged for some query (grade 0 included): what a judged-only corpus holds."""
    return {d for docs in qrels.values() for d in docs}


@dataclass(frozen=True)
class Dataset:
    """A test collection, immutable: derived values (texts, fingerprints) are computed once,
    and :meth:`subset`, :meth:`judged_only` and :meth:`with_warnings` return new datasets.

    * ``corpus``: doc id -> field name -> text (already cleaned, e.g. HTML stripped), held as
      Arrow columns (:class:`~stagebench.data.corpus.Corpus`; a dict given here is converted)
    * ``text_template``: ``str.format`` template over the corpus fields that builds the
      text every stage indexes, e.g. ``"{title} {brand} {color} {bullet_points}"``
    * ``queries``: query id -> text (only the queries to evaluate)
    * ``qrels``: query id -> doc id -> integer grade
    * ``label_names``: grade -> display label (ESCI: 3 -> "E" ...), for label analysis
    * ``corpus_scope``: ``catalog`` (all documents) or ``judged`` (only judged ones)
    * ``query_groups``: segmentations the data itself gives, name -> query id -> segment (ESCI:
      ``locale``, and ``source`` from the release's sources file), for the segments table
    """

    name: str
    corpus: Corpus
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    text_template: str
    corpus_scope: str = "catalog"
    label_names: dict[int, str] | None = None
    splits: dict[str, str] | None = None
    source: str = ""
    warnings: tuple[str, ...] = ()
    query_groups: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "corpus", as_corpus(self.corpus))
        fields_used = template_fields(self.text_template)
        if not fields_used:
            raise DataError(f"{self.source or self.name}: text_template {self.text_template!r} names no field")
        if len(self.corpus):
            known = set(self.corpus.fields)
            unknown = [f for f in fields_used if f not in known]
            if unknown:
                raise DataError(
                    f"{self.source or self.name}: text_template field(s) {unknown} not in the corpus fields {sorted(known)}"
                )

    @cached_property
    def doc_ids(self) -> list[str]:
        return list(self.corpus.ids)

    @cached_property
    def doc_texts(self) -> TextColumn:
        """The indexed texts in corpus order (an Arrow column read by position)."""
        names = template_fields(self.text_template)
        return TextColumn.build(render(self.text_template, row) for row in self.corpus.field_rows(names))

    @cached_property
    def doc_text(self) -> DocTexts:
        """Doc id -> indexed text."""
        return DocTexts(self.corpus, self.doc_texts)

    @cached_property
    def query_ids(self) -> list[str]:
        return list(self.queries)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 over doc ids and indexed texts: identifies exactly what stages index."""
        h = hashlib.sha256()
        for d, t in zip(self.doc_ids, self.doc_texts):
            h.update(d.encode())
            h.update(b"\x00")
            h.update(t.encode())
            h.update(b"\x01")
        return h.hexdigest()

    @cached_property
    def queries_fingerprint(self) -> str:
        """sha256 over the (query id, text) pairs, in evaluation order."""
        h = hashlib.sha256()
        for q in self.query_ids:
            h.update(f"{q}\x00{self.queries[q]}\x01".encode())
        return h.hexdigest()

    @cached_property
    def qrels_fingerprint(self) -> str:
        """sha256 over the sorted (query, doc, grade) judgments (:func:`stagebench.runs.qrels_digest`)."""
        return qrels_digest(self.qrels)

    @cached_property
    def qrels_docs_missing(self) -> int:
        """Judgments naming documents absent from the corpus (they stay in the qrels)."""
        return sum(1 for docs in self.qrels.values() for d in docs if d not in self.corpus)

    def stats(self) -> dict:
        grades: dict[int, int] = {}
        for docs in self.qrels.values():
            for g in docs.values():
                grades[g] = grades.get(g, 0) + 1
        judged_docs = {d for docs in self.qrels.values() for d in docs}
        return {
            "name": self.name,
            "source": self.source,
            "corpus_scope": self.corpus_scope,
            "documents": len(self.corpus),
            "judged_documents": len(judged_docs),
            "unjudged_documents": sum(1 for d in self.corpus if d not in judged_docs),
            "queries": len(self.queries),
            "judgments": sum(len(v) for v in self.qrels.values()),
            "grades": {str(k): grades[k] for k in sorted(grades)},
            "label_names": {str(k): v for k, v in (self.label_names or {}).items()},
            "qrels_docs_missing_from_corpus": self.qrels_docs_missing,
            "text_template": self.text_template,
            "fingerprint": self.fingerprint,
            "queries_fingerprint": self.queries_fingerprint,
            "qrels_fingerprint": self.qrels_fingerprint,
        }

    def judged_only(self) -> Dataset:
        """The same collection with only the judged documents in the corpus (scope ``judged``)."""
        judged = judged_doc_ids(self.qrels)
        return replace(self, corpus=self.corpus.take([d in judged for d in self.corpus.ids]), corpus_scope="judged")

    def subset(self, query_ids: Iterable[str]) -> Dataset:
        """The same collection evaluated on ``query_ids`` only (queries, qrels and splits cut)."""
        keep = set(query_ids)
        return replace(self, queries={q: t for q, t in self.queries.items() if q in keep},
                       qrels={q: d for q, d in self.qrels.items() if q in keep},
                       splits=None if self.splits is None else {q: s for q, s in self.splits.items() if q in keep},
                       query_groups={g: {q: s for q, s in a.items() if q in keep} for g, a in self.query_groups.items()})  # fmt: skip

    def with_warnings(self, *messages: str) -> Dataset:
        return replace(self, warnings=(*self.warnings, *messages))


def judged_queries(all_queries: dict[str, str], qrels: dict[str, dict[str, int]], max_queries: int | None,
                   where: str, queries_source: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:  # fmt: skip
    """The queries that have judgments, in the queries' order (the first ``max_queries``), and
    their qrels; a judged query missing from the queries is an error naming ``where``."""
    unknown = [q for q in qrels if q not in all_queries]
    if unknown:
        raise DataError(f"{where}: query id {unknown[0]!r} not in {queries_source}")
    qids = [q for q in all_queries if q in qrels]
    if max_queries is not None:
        qids = qids[:max_queries]
    return {q: all_queries[q] for q in qids}, {q: qrels[q] for q in qids}


def check_queries(queries: dict[str, str], source: str) -> None:
    for qid, text in queries.items():
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{source}: query {qid!r} has empty text")
