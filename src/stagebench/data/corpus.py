"""The corpus, held column by column in Arrow instead of one Python dict per document.

A million products as ``{id: {field: str}}`` cost about 1.7 KB each in Python objects (a dict,
five ``str`` headers, the key); the same texts in Arrow string columns cost their bytes plus an
offset. :class:`Corpus` keeps the document ids and one ``large_string`` column per field, in
chunks of :data:`CHUNK` rows, and reads a document by position. It is still a read-only
``Mapping`` from doc id to a ``{field: text}`` dict (built when asked for), so code that asks
``corpus[doc_id]`` or ``doc_id in corpus`` keeps working; the id -> position index is built on
the first such look-up. :class:`TextColumn` is the same idea for the rendered texts that stages
index: a sequence read by position, iterated chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: rows per Arrow chunk: Python lists of this many strings are the most any conversion holds at once
CHUNK = 1 << 16


def _string_chunks(values: Iterable[str]) -> pa.ChunkedArray:
    """``values`` as a chunked ``large_string`` array, converted :data:`CHUNK` values at a time."""
    chunks, buf = [], []
    for v in values:
        buf.append(v)
        if len(buf) == CHUNK:
            chunks.append(pa.array(buf, pa.large_string()))
            buf = []
    if buf or not chunks:
        chunks.append(pa.array(buf, pa.large_string()))
    return pa.chunked_array(chunks, pa.large_string())


def _rechunk(arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """The same values in chunks of exactly :data:`CHUNK` rows (the last one shorter), so that
    row ``i`` is chunk ``i // CHUNK``, offset ``i % CHUNK``."""
    arr = arr.cast(pa.large_string())
    if isinstance(arr, pa.ChunkedArray) and all(len(c) == CHUNK for c in arr.chunks[:-1]):
        return arr  # already cut at CHUNK rows: no copy
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    return pa.chunked_array([arr.slice(i, CHUNK) for i in range(0, max(n, 1), CHUNK)] if n else [arr], pa.large_string())


class TextColumn(Sequence[str]):
    """A read-only sequence of strings over an Arrow column (O(1) access by position)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self.column = _rechunk(column)

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.column.chunk(i // CHUNK)[i % CHUNK].as_py()

    def __iter__(self) -> Iterator[str]:
        for chunk in self.column.chunks:
            yield from chunk.to_pylist()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    @property
    def nbytes(self) -> int:
        return self.column.nbytes

    @classmethod
    def build(cls, values: Iterable[str]) -> TextColumn:
        return cls(_string_chunks(values))


class Corpus(Mapping[str, dict[str, str]]):
    """Document id -> ``{field: text}``, stored as Arrow columns (see the module docstring)."""

    def __init__(self, ids: TextColumn, columns: Mapping[str, TextColumn]) -> None:
        for name, col in columns.items():
            if len(col) != len(ids):
                raise ValueError(f"corpus field {name!r} has {len(col)} values for {len(ids)} documents")
        self.ids = ids
        self.columns = dict(columns)

    # ---------------------------------------------------------------- building
    @classmethod
    def from_dict(cls, docs: Mapping[str, Mapping[str, str]]) -> Corpus:
        """From ``{id: {field: text}}`` (every field any document has; absent ones are empty)."""
        names: dict[str, None] = {}
        for fields in docs.values():
            names.update(dict.fromkeys(fields))
        return cls(TextColumn.build(docs), {f: TextColumn.build((d.get(f) or "") for d in docs.values()) for f in names})

    @classmethod
    def from_records(cls, records: Iterable[tuple[str, Sequence[str]]], names: Sequence[str]) -> Corpus:
        """From ``(id, (value of each of names))`` records in one pass, :data:`CHUNK` rows at a time:
        a streamed corpus is never held as Python strings all at once."""
        ids: list[pa.Array] = []
        cols: list[list[pa.Array]] = [[] for _ in names]
        buf_ids: list[str] = []
        bufs: list[list[str]] = [[] for _ in names]

        def flush() -> None:
            ids.append(pa.array(buf_ids, pa.large_string()))
            for col, buf in zip(cols, bufs):
                col.append(pa.array(buf, pa.large_string()))
                buf.clear()
            buf_ids.clear()

        for doc_id, values in records:
            buf_ids.append(doc_id)
            for buf, v in zip(bufs, values):
                buf.append(v)
            if len(buf_ids) == CHUNK:
                flush()
        if buf_ids or not ids:
            flush()
        return cls(TextColumn(pa.chunked_array(ids, pa.large_string())),
                   {n: TextColumn(pa.chunked_array(c, pa.large_string())) for n, c in zip(names, cols)})  # fmt: skip

    def duplicate_id(self) -> str | None:
        """A document id held twice, or None (counted in Arrow, not in a Python set)."""
        if pc.count_distinct(self.ids.column).as_py() == len(self):
            return None
        counts = pc.value_counts(self.ids.column)
        return next(str(c["values"]) for c in counts.to_pylist() if c["counts"] > 1)

    @classmethod
    def from_arrow(cls, ids: pa.Array | pa.ChunkedArray, fields: Mapping[str, pa.Array | pa.ChunkedArray],
                   clean: Callable[[str | None], str] | None = None) -> Corpus:  # fmt: skip
        """From Arrow columns; ``clean`` (e.g. HTML stripping) is applied to every field value,
        a chunk at a time (nulls become ``""``)."""
        def cleaned(col: pa.Array | pa.ChunkedArray) -> TextColumn:
            if clean is None:
                return TextColumn(col.cast(pa.large_string()).fill_null(""))
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            return TextColumn.build(clean(v) for ch in chunks for v in ch.to_pylist())

        return cls(TextColumn(ids), {name: cleaned(col) for name, col in fields.items()})

    # ---------------------------------------------------------------- reading
    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.columns)

    @cached_property
    def position(self) -> dict[str, int]:
        """Doc id -> row, built on the first look-up by id."""
        return {d: i for i, d in enumerate(self.ids)}

    def row(self, i: int) -> dict[str, str]:
        return {name: col[i] for name, col in self.columns.items()}

    def __getitem__(self, doc_id: str) -> dict[str, str]:
        return self.row(self.position[doc_id])

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.position

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def field_rows(self, names: Sequence[str]) -> Iterator[dict[str, str]]:
        """``{name: text}`` for ``names``, document by document in corpus order, a chunk at a time."""
        cols = [self.columns[n].column for n in names]
        for k in range(cols[0].num_chunks if cols else 0):
            lists = [c.chunk(k).to_pylist() for c in cols]
            for values in zip(*lists):
                yield dict(zip(names, values))

    def take(self, keep: Sequence[bool]) -> Corpus:
        """The documents whose ``keep`` flag is true, in order."""
        mask = pa.array(keep, pa.bool_())
        return Corpus(TextColumn(self.ids.column.combine_chunks().filter(mask)),
                      {n: TextColumn(c.column.combine_chunks().filter(mask)) for n, c in self.columns.items()})  # fmt: skip

    @property
    def nbytes(self) -> int:
        """Bytes of the Arrow buffers (ids and fields)."""
        return self.ids.nbytes + sum(c.nbytes for c in self.columns.values())

    def __repr__(self) -> str:
        return f"Corpus({len(self)} documents, fields {list(self.columns)}, {self.nbytes / 2**20:.1f} MiB)"


class DocTexts(Mapping[str, str]):
    """Doc id -> indexed text, read by position from a :class:`TextColumn`."""

    def __init__(self, corpus: Corpus, texts: TextColumn) -> None:
        self.corpus, self.texts = corpus, texts

    def __getitem__(self, doc_id: str) -> str:
        return self.texts[self.corpus.position[doc_id]]

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.corpus

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[str]:
        return iter(self.corpus)


def as_corpus(value: Any) -> Corpus:
    return value if isinstance(value, Corpus) else Corpus.from_dict(value)


__all__ = ["CHUNK", "Corpus", "DocTexts", "TextColumn", "as_corpus"]
