"""``loader: ir_datasets``: any collection ir_datasets names (``beir/scifact/test``,
``msmarco-passage/trec-dl-2019/judged``, ``cranfield``...), read through ir_datasets itself.

ir_datasets downloads, checks and caches the source files (under ``IR_DATASETS_HOME``,
``~/.ir_datasets`` by default); this loader streams its documents into stagebench's columnar
corpus (:class:`~stagebench.data.corpus.Corpus`) without building ir_datasets' own doc store,
so a large corpus is held once. Every text field is cleaned as the other loaders clean theirs
(HTML stripped, whitespace collapsed), graded qrels stay graded, and a judgment given twice is an
error, as in a TREC qrels file. The collection is identified by its content (the fingerprints);
its id and the ir_datasets version are recorded as the dataset's source.

ir_datasets is an optional extra (``pip install 'stagebench[irds]'``), imported when a config
names this loader.
"""

from __future__ import annotations

import logging
import typing
from contextlib import contextmanager
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from stagebench.data.corpus import Corpus
from stagebench.data.jsonl import _finish
from stagebench.data.dataset import Dataset, check_queries, judged_queries
from stagebench.data.text import render, strip_html, template_fields
from stagebench.errors import DataError
from stagebench.optional import need
from stagebench.params import PositiveInt, param
from stagebench.runs import check_id
from stagebench.runtime.progress import progress

#: the default document text: the first of these whose fields the collection's documents have
DOC_TEMPLATES = ("{title} {text}", "{title} {body}", "{text}", "{body}", "{title}")
#: the default query text: the first field the collection's queries have (TREC topics: the title)
QUERY_FIELDS = ("text", "title", "query", "description")


@dataclass
class IrdsOptions:
    id: str = param(doc="the ir_datasets id, e.g. beir/scifact/test or msmarco-passage/trec-dl-2019/judged")
    text_template: str | None = param(
        None, "the indexed text over the documents' own fields (default: {title} {text} when they have both, "
              "else {text}, else every text field)")  # fmt: skip
    query_template: str | None = param(
        None, "the query text over the queries' own fields (default: {text}, else {title} - TREC topics)")
    corpus_scope: Literal["catalog", "judged"] = param("catalog", "index the whole corpus, or only the judged documents")
    max_queries: PositiveInt | None = param(None, "keep the first N judged queries, for quick runs")


def _text_fields(cls: type, id_field: str) -> list[str]:
    """The string fields of an ir_datasets record class (a NamedTuple), its id left out."""
    hints = typing.get_type_hints(cls) if getattr(cls, "__annotations__", None) else {}
    return [f for f in cls._fields if f != id_field and hints.get(f, str) is str]


def _template(given: str | None, fields: list[str], defaults: tuple[str, ...], key: str, ds_id: str) -> str:
    """The template a key names, checked against the record fields; or the first default that fits."""
    if given is None:
        for t in defaults:
            if set(template_fields(t)) <= set(fields):
                return t
        if not fields:
            raise DataError(f"dataset.id {ds_id!r}: its records have no text field")
        return " ".join("{" + f + "}" for f in fields)
    unknown = [f for f in template_fields(given) if f not in fields]
    if unknown:
        raise DataError(f"dataset.{key}: field(s) {unknown} are not fields of {ds_id!r} (its fields: {fields})")
    return given


def _failure(ds_id: str, what: str, exc: BaseException) -> DataError:
    """One line for an ir_datasets failure: a download that could not happen, or files it could not read."""
    requests = need("requests", "loader: ir_datasets")
    url = None
    causes = [exc, *(e for _, e in exc.args[1] if isinstance(e, BaseException))] \
        if isinstance(exc, RuntimeError) and len(exc.args) == 2 and isinstance(exc.args[1], list) else [exc]  # fmt: skip
    for e in causes:
        if isinstance(e, requests.exceptions.RequestException):
            url = getattr(e.request, "url", None) if e.request is not None else None
            break
    home = need("ir_datasets", "loader: ir_datasets").util.home_path()
    first = str(causes[-1]).splitlines()[0] if str(causes[-1]) else type(causes[-1]).__name__
    if url is not None or any(isinstance(e, requests.exceptions.RequestException) for e in causes):
        return DataError(f"dataset.id {ds_id!r}: ir_datasets needs to download its {what}{f' from {url}' if url else ''} "
                         f"and could not ({type(causes[-1]).__name__}: {first[:200]}); run it once with internet, or "
                         f"place the files under {home} (IR_DATASETS_HOME)")  # fmt: skip
    return DataError(f"dataset.id {ds_id!r}: ir_datasets could not read its {what} ({type(exc).__name__}: {first[:200]}); "
                     f"a file of its cache under {home} (IR_DATASETS_HOME) may be damaged or cut short: remove the "
                     "collection's folder there and let ir_datasets build it again")  # fmt: skip


def _records(ds_id: str, what: str, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """ir_datasets' records of one kind; its download and read errors become one line. Any exception
    caught here was raised inside ir_datasets (the caller's loop body runs outside this generator): a
    damaged cache file surfaces as anything, a TypeError from deep in its reader included."""
    try:
        yield from make()
    except Exception as exc:  # noqa: BLE001 - ir_datasets' own failure, whatever its type: one line
        raise _failure(ds_id, what, exc) from exc


@contextmanager
def _quiet() -> Iterator[None]:
    """ir_datasets' own INFO and WARNING lines (downloads, retries, the files it builds) kept off the
    screen while it loads: it gives each of its loggers a handler of its own at INFO, created on first
    use, so no logger setting can reach them; they are disabled for the load (stagebench logs nothing
    there) and the previous threshold put back. Its failures become one line (:func:`_failure`)."""
    before = logging.root.manager.disable
    logging.disable(max(before, logging.WARNING))
    try:
        yield
    finally:
        logging.disable(before)


def load_irds(opts: IrdsOptions) -> Dataset:
    with _quiet():
        return _load_irds(opts)


def _load_irds(opts: IrdsOptions) -> Dataset:
    irds = need("ir_datasets", "loader: ir_datasets")
    try:
        src = irds.load(opts.id)
    except KeyError:
        raise DataError(f"dataset.id {opts.id!r}: not an ir_datasets id (ir_datasets {irds.__version__}; the ids are "
                        "listed at https://ir-datasets.com)") from None  # fmt: skip
    missing = [kind for kind in ("docs", "queries", "qrels") if not getattr(src, f"has_{kind}")()]
    if missing:
        raise DataError(f"dataset.id {opts.id!r}: the collection has no {' and no '.join(missing)} in ir_datasets "
                        f"{irds.__version__}; a benchmark needs documents, queries and graded judgments "
                        "(a sub-collection with judgments may exist, e.g. .../judged, .../test)")  # fmt: skip

    queries_cls = src.queries_cls()
    q_fields = _text_fields(queries_cls, "query_id")
    q_template = _template(opts.query_template, q_fields, tuple("{" + f + "}" for f in QUERY_FIELDS),
                           "query_template", opts.id)  # fmt: skip
    all_queries: dict[str, str] = {}
    for q in _records(opts.id, "queries", src.queries_iter):
        qid = check_id(q.query_id, "query", f"ir_datasets {opts.id!r} queries")
        if qid in all_queries:
            raise DataError(f"ir_datasets {opts.id!r} queries: duplicate query id {qid!r}")
        all_queries[qid] = render(q_template, {f: strip_html(getattr(q, f)) for f in template_fields(q_template)})

    qrels: dict[str, dict[str, int]] = {}
    for r in _records(opts.id, "qrels", src.qrels_iter):
        where = f"ir_datasets {opts.id!r} qrels"
        qid, did = check_id(r.query_id, "query", where), check_id(r.doc_id, "document", where)
        docs = qrels.setdefault(qid, {})
        if did in docs:
            raise DataError(f"{where}: query {qid!r} document {did!r} is judged twice (grades {docs[did]} and "
                            f"{r.relevance})")  # fmt: skip
        docs[did] = int(r.relevance)
    queries, qrels = judged_queries(all_queries, qrels, opts.max_queries, f"ir_datasets {opts.id!r} qrels", "its queries")
    check_queries(queries, f"ir_datasets {opts.id!r} queries")

    docs_cls = src.docs_cls()
    d_fields = _text_fields(docs_cls, "doc_id")
    d_template = _template(opts.text_template, d_fields, DOC_TEMPLATES, "text_template", opts.id)
    names = list(dict.fromkeys(template_fields(d_template)))
    corpus = _stream_corpus(src, opts.id, names)
    return _finish(Dataset(
        name=f"ir_datasets:{opts.id}", corpus=corpus, queries=queries, qrels=qrels, text_template=d_template,
        source=f"ir_datasets {irds.__version__}: {opts.id}",
    ), opts.corpus_scope)  # fmt: skip


def _stream_corpus(src: Any, ds_id: str, names: list[str]) -> Corpus:
    """The documents' ids and ``names`` fields, cleaned, streamed into Arrow columns (one pass)."""
    try:
        total = src.docs_count()
    except Exception:  # noqa: BLE001 - a count is only for the progress bar; reading the documents says what failed
        total = None
    where = f"ir_datasets {ds_id!r} documents"

    def records() -> Iterator[tuple[str, list[str]]]:
        with progress(total or 0, f"ir_datasets {ds_id}: documents", "doc") as bar:
            for doc in _records(ds_id, "documents", src.docs_iter):
                yield check_id(doc.doc_id, "document", where), [strip_html(getattr(doc, n)) for n in names]
                bar.update(1)

    corpus = Corpus.from_records(records(), names)
    dup = corpus.duplicate_id()
    if dup is not None:
        raise DataError(f"{where}: duplicate document id {dup!r}")
    return corpus
