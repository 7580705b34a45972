"""The one reader of text files (TREC runs and qrels, TSV, JSONL, topics, prompts, configs,
expected values, a results folder's own files).

Every text file is UTF-8; a leading byte-order mark (which Windows editors add) is stripped,
never read as part of the first id or key. A missing file, a folder, a file larger than the
reader allows, and undecodable bytes are each one error naming the file (and, for bytes
that are not UTF-8, the line and byte offset), raised as the caller's error type.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from stagebench.errors import DataError, StagebenchError

BOM = b"\xef\xbb\xbf"


def _check(path: Path, what: str, error: type[StagebenchError], limit: int | None) -> None:
    if not path.exists():
        raise error(f"{path}: {what} not found")
    if not path.is_file():
        raise error(f"{path}: the {what} is a folder (or not a regular file), not a text file")
    if limit is not None and path.stat().st_size > limit:
        raise error(f"{path}: the {what} has {path.stat().st_size:,} bytes, more than the {limit:,} it may have")


def utf16(raw: bytes) -> str | None:
    """How a file looks when it is UTF-16 rather than UTF-8 (its byte-order mark, or a NUL byte beside every
    ASCII character, which UTF-8 would read as valid text full of NULs), or None."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 (its byte-order mark)"
    head = raw[:4096]
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    share = lambda b: b.count(0) / max(len(b), 1)  # noqa: E731
    if share(odd) > 0.3 and share(even) < 0.05:
        return "UTF-16LE without a byte-order mark (a NUL byte after each character)"
    if share(even) > 0.3 and share(odd) < 0.05:
        return "UTF-16BE without a byte-order mark (a NUL byte before each character)"
    return None


def _undecodable(path: Path, what: str, raw: bytes, start: int, offset: int, lineno: int) -> str:
    hint = utf16(raw) if offset == 0 else None  # a file's encoding shows at its start, not in a later line
    if hint is not None:
        return f"{path}: the {what} is saved as {hint}, not UTF-8; save it as UTF-8"
    if raw[start] == 0:
        return (f"{path}:{lineno}: the {what} is not a UTF-8 text file (a NUL byte at byte offset {offset + start}: a "
                "binary file?)")  # fmt: skip
    return (f"{path}:{lineno}: the {what} is not UTF-8 text (byte 0x{raw[start]:02x} at byte offset {offset + start} "
            "cannot be decoded); save it as UTF-8")  # fmt: skip


def _decode(raw: bytes) -> str:
    """UTF-8 text without NUL bytes (no text format stagebench reads holds one; a binary file does)."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise UnicodeDecodeError("utf-8", raw, nul, nul + 1, "NUL byte")
    return raw.decode("utf-8")


def text_lines(path: str | Path, what: str, error: type[StagebenchError] = DataError) -> Iterator[tuple[int, str]]:
    """(line number from 1, line with its ending) of a UTF-8 text file, read as it goes."""
    path = Path(path)
    _check(path, what, error, None)
    offset = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(BOM):
                raw, offset = raw[len(BOM):], len(BOM)
            try:
                line = _decode(raw)
            except UnicodeDecodeError as exc:
                raise error(_undecodable(path, what, raw, exc.start, offset, lineno)) from None
            offset += len(raw)
            yield lineno, line


def read_text(path: str | Path, what: str, error: type[StagebenchError] = DataError, limit: int | None = None) -> str:
    """A whole UTF-8 text file (a leading BOM stripped); ``limit``: the most bytes it may have."""
    path = Path(path)
    _check(path, what, error, limit)
    raw = path.read_bytes()
    skip = len(BOM) if raw.startswith(BOM) else 0
    try:
        return _decode(raw[skip:])
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        lineno = raw.count(b"\n", 0, at) + 1
        line_start = raw.rfind(b"\n", 0, at) + 1
        raise error(_undecodable(path, what, raw[line_start:], at - line_start, line_start, lineno)) from None
