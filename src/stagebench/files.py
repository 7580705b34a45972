"""Writing files without losing anything: atomic writes, and output folders that are ours.

* :func:`atomic_write` - a file is written to a hidden temporary name beside it and renamed
  over the target, so a reader never sees half a file and a crash leaves the old one.
* :func:`check_replaceable` - an output folder may be replaced only when it is absent, empty,
  or provably written by stagebench (the caller says how to prove it); anything else is a
  one-line error before any work starts.
* :func:`check_writable` - the folder a path would be created in is writable (tried, not
  guessed from permission bits, so read-only mounts and full quotas are caught too).
* :func:`check_apart` - two folders (results and cache) must not contain each other.
* :func:`swap_in` - put a finished folder in place of an old one, keeping the old one
  until the new one is there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from stagebench.errors import StagebenchError


def atomic_write(path: str | Path, data: str | bytes | Iterable[str]) -> None:
    """Write ``data`` (text, bytes, or an iterable of text chunks) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part-{os.getpid()}")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        elif isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for chunk in data:
                    fh.write(chunk)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise named(exc, path) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def named(exc: OSError, path: str | Path) -> OSError:
    """``exc`` with a file name: a failed ``write()`` (disk full, file too large) names no file,
    and an error message must say which one."""
    if exc.filename is not None:
        return exc
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable(path: str | Path, what: str) -> None:
    """Fail unless a folder can be created (or written) at ``path``: its nearest existing
    ancestor is a folder in which a file can really be created."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StagebenchError(f"{path}: the {what} is a file, not a folder")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise StagebenchError(f"{path}: cannot create the {what}: {base} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".stagebench-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StagebenchError(f"{path}: the {what} is not writable ({base}: {exc.strerror})") from None


def check_replaceable(folder: str | Path, what: str, not_ours: Callable[[Path], str | None]) -> None:
    """Fail unless ``folder`` is absent, empty, or ``not_ours(folder)`` returns None (it is a
    folder stagebench wrote and may replace); otherwise the message says why not."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return
    if not folder.is_dir():
        raise StagebenchError(f"{folder}: exists and is not a folder; refusing to replace it with the {what}")
    if not any(folder.iterdir()):
        return
    why = not_ours(folder)
    if why:
        raise StagebenchError(f"{folder}: {why}; refusing to replace it with the {what} "
                              "(choose another output folder, or move its contents away)")  # fmt: skip


def check_apart(a: str | Path, a_what: str, b: str | Path, b_what: str) -> None:
    """Fail when folder ``a`` and folder ``b`` are the same or one contains the other."""
    ra, rb = Path(a).resolve(), Path(b).resolve()
    if ra == rb:
        raise StagebenchError(f"{a}: the {a_what} and the {b_what} are the same folder; they must be apart")
    if ra.is_relative_to(rb):
        raise StagebenchError(f"{a}: the {a_what} is inside the {b_what} ({b}); they must be apart")
    if rb.is_relative_to(ra):
        raise StagebenchError(f"{b}: the {b_what} is inside the {a_what} ({a}); they must be apart")


def swap_in(new: Path, target: Path) -> None:
    """Rename the finished folder ``new`` to ``target``. An existing ``target`` (already
    checked replaceable) is renamed aside first and removed only once ``new`` is in place."""
    if not target.exists():
        os.replace(new, target)
        return
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old)
