"""Writing files without losing anything: atomic writes, and folders that are ours to replace.

* :func:`atomic_write` - a file is written to a hidden temporary name beside it and renamed
  over the target, so a reader never sees half a file and a crash leaves the old one.
* :func:`file_digest`, :func:`inventory` - the sha256 of a file, and of every file under a
  folder (every depth, hidden ones included): what a folder stagebench writes records about
  itself (a results folder's ``manifest.json``, a trained model's ``stagebench_training.json``,
  a generated dataset's ``stagebench_dataset.json``).
* :class:`Owned` and :func:`check_replaceable` - the one rule for what stagebench may replace:
  a destination that is absent, empty, or a folder whose **every** entry, at every depth,
  hidden ones included, is a file its record lists with the digest it has now (or a *kept*
  file, which is carried into the replacement). Anything else - a ``.git``, a note, a file
  edited since, a symbolic link, an empty folder nobody recorded - is refused, naming the
  first foreign entry, before any work starts. A destination that is itself a symbolic link
  is refused too (it is never written through).
* :func:`check_writable` - the folder a path would be created in is writable (tried, not
  guessed from permission bits, so read-only mounts and full quotas are caught too).
* :func:`check_apart` - two folders (results and cache) must not contain each other.
* :func:`staging`, :func:`swap_in`, :func:`remove_stale_staging` - a new folder is built in a
  hidden sibling (``.<name>.partial-<pid>``, marked as ours) and put in place of the old one
  only when complete; the old one is removed only once the new one is there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import glob
import os
import shutil
import stat
import tempfile
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stagebench.errors import StagebenchError

log = logging.getLogger("stagebench")

#: the file that marks a staging folder as stagebench's (removed before it is swapped in)
STAGING_MARK = ".stagebench-staging"


def atomic_write(path: str | Path, data: str | bytes | Iterable[str]) -> None:
    """Write ``data`` (text, bytes, or an iterable of text chunks) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.part-*"):  # a killed writer's half-written file
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)) and stale.is_file():
            stale.unlink(missing_ok=True)
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


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def inventory(folder: str | Path, leave_out: Collection[str] = ()) -> dict[str, str]:
    """Every regular file under ``folder`` (every depth, hidden ones included; POSIX paths
    relative to it, sorted) -> its sha256, less the relative paths in ``leave_out``."""
    folder = Path(folder)
    out = {}
    for rel, kind in _walk(folder):
        if kind == "file" and rel not in leave_out:
            out[rel] = file_digest(folder / rel)
    return dict(sorted(out.items()))


def _walk(folder: Path, prefix: str = "") -> Iterable[tuple[str, str]]:
    """(relative path, kind) of every entry below ``folder``, depth first, sorted, links not
    followed; kind: file | dir | link | other."""
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        rel = f"{prefix}{e.name}"
        if e.is_symlink():
            yield rel, "link"
        elif e.is_dir(follow_symlinks=False):
            yield rel, "dir"
            yield from _walk(Path(e.path), rel + "/")
        elif stat.S_ISREG(e.stat(follow_symlinks=False).st_mode):
            yield rel, "file"
        else:
            yield rel, "other"


@dataclass(frozen=True)
class Owned:
    """How to tell that a folder is one stagebench wrote, for one kind of destination.

    ``record`` is the file that lists the others; ``files(folder)`` reads it and returns
    relative path -> sha256 of every other file the folder may hold, or a string saying why
    the folder is not ours (no record, an unreadable one). ``kept`` are files a later step
    adds (``stagebench check --update``'s expected values, a screenshot): they are carried
    into the replacement, never deleted."""

    what: str
    record: str
    files: Callable[[Path], Mapping[str, str] | str]
    kept: frozenset[str] = field(default_factory=frozenset)


def json_record(record: str, kind: str) -> Callable[[Path], Mapping[str, str] | str]:
    """``Owned.files`` for a folder whose record ``record`` is a JSON object holding ``files``
    (relative path -> sha256); ``kind`` names such a folder in the reason it is not ours."""

    def files(folder: Path) -> Mapping[str, str] | str:
        path = folder / record
        if not path.is_file():
            return f"not {kind} (no {record})"
        try:
            listed = json.loads(path.read_text(encoding="utf-8"))["files"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            listed = None
        if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
            return (f"not {kind} this stagebench can verify ({record} is unreadable or, written by an older "
                    "stagebench, lists no file digests)")  # fmt: skip
        return listed

    return files


def foreign_entry(folder: Path, owned: Owned) -> str | None:
    """None when every entry of ``folder`` is ours (see :class:`Owned`), else the first one
    that is not, with why."""
    listed = owned.files(folder)
    if isinstance(listed, str):
        return listed
    ours = {owned.record, *listed}
    allowed_dirs = {"/".join(p.split("/")[:i]) for p in (*ours, *owned.kept) for i in range(1, p.count("/") + 1)}
    for rel, kind in _walk(folder):
        if kind == "dir":
            if rel not in allowed_dirs:
                return f"{rel}/ is a folder no stagebench run wrote"
        elif kind == "link":
            return f"{rel} is a symbolic link (stagebench writes none)"
        elif kind == "other":
            return f"{rel} is not a regular file"
        elif rel in owned.kept or rel == owned.record or rel == STAGING_MARK:  # the mark: ours (a swap cut short)
            continue
        elif rel not in listed:
            return f"{rel} was not written by stagebench (not listed in {owned.record})"
        elif file_digest(folder / rel) != listed[rel]:
            return f"{rel} was changed after stagebench wrote it (its digest differs from {owned.record})"
    return None


def check_replaceable(folder: str | Path, owned: Owned) -> None:
    """Fail unless ``folder`` is absent, empty, or entirely stagebench's (:func:`foreign_entry`);
    a destination that is a symbolic link is refused (never written through)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise StagebenchError(f"{folder}: is a symbolic link (to {os.readlink(folder)}); stagebench never writes "
                              f"the {owned.what} through a link: give the real folder ({folder.resolve()})")  # fmt: skip
    if not folder.exists():
        return
    if not folder.is_dir():
        raise StagebenchError(f"{folder}: exists and is not a folder; refusing to replace it with the {owned.what}")
    if not any(folder.iterdir()):
        return
    why = foreign_entry(folder, owned)
    if why:
        raise StagebenchError(f"{folder}: {why}; refusing to replace it with the {owned.what} "
                              "(choose another output folder, or move that entry away)")  # fmt: skip


def enclosing(path: str | Path, folders: Sequence[Owned]) -> tuple[Path, Owned] | None:
    """The nearest folder above ``path`` that is one of ``folders``' kinds (its record is there and
    reads as one), with its kind; None when there is none, or when ``path`` is a file that folder
    keeps (:attr:`Owned.kept`, e.g. a results folder's ``expected.yaml``)."""
    target = Path(path).absolute()
    for above in target.parents:
        for owned in folders:
            if (above / owned.record).is_file() and not isinstance(owned.files(above), str):
                rel = target.relative_to(above).as_posix()
                return None if rel in owned.kept else (above, owned)
    return None


def check_outside(path: str | Path, what: str, folders: Sequence[Owned]) -> None:
    """Fail when ``path`` (a file or folder a command would create) lies inside a folder of one of
    ``folders``' kinds: stagebench writes there only what that folder records, and anything else
    would make it refuse the folder later as changed."""
    inside = enclosing(path, folders)
    if inside is not None:
        above, owned = inside
        raise StagebenchError(f"{path}: is inside the {owned.what} {above}; stagebench writes the {what} only "
                              f"outside such a folder (a file it does not record makes it refuse the folder as "
                              f"changed): give a path outside it")  # fmt: skip


@dataclass(frozen=True)
class OutputFile:
    """A file a command writes at a path the user names (``--json``, ``--plot``, a worksheet, an
    expected-values file, the reproduction matrix). The one rule for all of them
    (:func:`check_output_file`): never over a file stagebench did not write for this purpose
    (``ours(head)`` says whether the first 64 KiB of a file are such a file's; ``replace=False``:
    never over any file, e.g. a worksheet raters may have filled), never inside a folder stagebench
    keeps a record of, unless the path is a file that folder keeps."""

    what: str
    ours: Callable[[bytes], bool]
    replace: bool = True


#: how much of an existing file :attr:`OutputFile.ours` reads
HEAD_BYTES = 1 << 16


def check_output_file(path: str | Path, out: OutputFile, folders: Sequence[Owned]) -> None:
    """Fail, naming the path and the rule, unless ``out`` may be written at ``path`` (:class:`OutputFile`)."""
    path = Path(path)
    if path.is_symlink():
        raise StagebenchError(f"{path}: is a symbolic link; stagebench never writes the {out.what} through a link")
    check_outside(path, out.what, folders)
    if path.exists():
        if not path.is_file():
            raise StagebenchError(f"{path}: exists and is not a file; refusing to write the {out.what} there")
        if not out.replace:
            raise StagebenchError(f"{path}: exists; the {out.what} is never written over: give another path")
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
        if not out.ours(head):
            raise StagebenchError(f"{path}: exists, and stagebench did not write it as the {out.what}; refusing to write "
                                  "over it (give another path, or move that file away)")  # fmt: skip


def write_output_file(path: str | Path, data: str | bytes, out: OutputFile, folders: Sequence[Owned]) -> None:
    """:func:`check_output_file`, then :func:`atomic_write`; ``data`` must be recognised as ours (so the
    next run may replace it)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not out.ours(raw[:HEAD_BYTES]):
        raise AssertionError(f"the {out.what} stagebench writes lacks its own mark")
    check_output_file(path, out, folders)
    atomic_write(path, raw)


def json_mark(purpose: str) -> tuple[str, Callable[[bytes], bool]]:
    """The key-value a JSON output carries first (``"written_by": "stagebench <purpose>"``) and its
    recogniser."""
    value = f"stagebench {purpose}"

    def ours(head: bytes) -> bool:
        try:
            return json.loads(head.decode("utf-8")).get("written_by") == value
        except (ValueError, UnicodeDecodeError, AttributeError):
            return head.lstrip().startswith(b'{\n  "written_by": ' + json.dumps(value).encode())  # longer than the head

    return value, ours


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_mark(purpose: str) -> tuple[bytes, Callable[[bytes], bool]]:
    """The PNG text chunk (``Comment``: ``written_by stagebench <purpose>``) a PNG output carries right
    after its header, and its recogniser."""
    data = b"Comment\x00written_by stagebench " + purpose.encode("latin-1")
    chunk = len(data).to_bytes(4, "big") + b"tEXt" + data + zlib.crc32(b"tEXt" + data).to_bytes(4, "big")

    def ours(head: bytes) -> bool:
        return head.startswith(PNG_SIGNATURE) and chunk in head

    return chunk, ours


def with_png_chunk(png: bytes, chunk: bytes) -> bytes:
    """``png`` with ``chunk`` inserted after its IHDR chunk (always the first: 8 + 25 bytes)."""
    if not png.startswith(PNG_SIGNATURE) or png[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    return png[:33] + chunk + png[33:]


def first_line_mark(*lines: str) -> Callable[[bytes], bool]:
    """The recogniser of a text output whose first line is one of ``lines``."""
    wanted = {line.encode("utf-8") for line in lines}

    def ours(head: bytes) -> bool:
        return head.split(b"\n", 1)[0].rstrip(b"\r") in wanted

    return ours


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


def check_destination(folder: str | Path, owned: Owned) -> None:
    """Everything that decides, before any work, whether ``folder`` can receive the new
    ``owned.what``: it is ours to replace, and its parent - where the new folder is staged
    and renamed into place - is writable."""
    folder = Path(folder)
    if not folder.name or folder.name in (".", ".."):
        raise StagebenchError(f"{folder}: give the {owned.what} folder a name (not '.' or '..')")
    check_replaceable(folder, owned)
    if folder.parent.exists() or folder.parent.is_symlink():
        if not folder.parent.is_dir():
            raise StagebenchError(f"{folder}: cannot create the {owned.what}: {folder.parent} is a file, not a folder")
    check_writable(folder.parent, f"folder that holds the {owned.what} (it is built beside it, then renamed)")


def check_apart(a: str | Path, a_what: str, b: str | Path, b_what: str) -> None:
    """Fail when folder ``a`` and folder ``b`` are the same or one contains the other."""
    ra, rb = Path(a).resolve(), Path(b).resolve()
    if ra == rb:
        raise StagebenchError(f"{a}: the {a_what} and the {b_what} are the same folder; they must be apart")
    if ra.is_relative_to(rb):
        raise StagebenchError(f"{a}: the {a_what} is inside the {b_what} ({b}); they must be apart")
    if rb.is_relative_to(ra):
        raise StagebenchError(f"{b}: the {b_what} is inside the {a_what} ({a}); they must be apart")


def staging(target: Path) -> Path:
    """A new, empty hidden sibling of ``target`` to build its replacement in, marked as ours."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target)
    folder = target.parent / f".{target.name}.partial-{os.getpid()}"
    if folder.exists():
        remove_staging(folder)
    folder.mkdir()
    try:
        (folder / STAGING_MARK).write_text(f"{os.getpid()}\n", encoding="utf-8")
    except BaseException:  # no mark, so nothing would ever remove it: the empty folder goes now
        (folder / STAGING_MARK).unlink(missing_ok=True)
        folder.rmdir()
        raise
    return folder


def remove_staging(folder: Path) -> None:
    """Remove a staging folder this or an earlier stagebench process made (it holds the mark);
    anything else of that name is left alone."""
    if folder.is_dir() and not folder.is_symlink() and (folder / STAGING_MARK).is_file():
        shutil.rmtree(folder)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` is running (one another user owns counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_set_aside(target: Path) -> list[Path]:
    """A folder a killed :func:`swap_in` had set aside (``.<name>.old-<pid>``, its process gone) is
    put back where ``target`` is missing (the kill came between the two renames), else removed.
    Every reader of a folder stagebench replaces calls this first."""
    gone = []
    for d in target.parent.glob(f".{glob.escape(target.name)}.old-*"):
        pid = d.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid)) or not d.is_dir() or d.is_symlink():
            continue
        if not target.exists():
            log.info("putting back %s, set aside by an interrupted run", target)
            os.replace(d, target)
        else:
            log.info("removing %s, set aside by an interrupted run", d)
            shutil.rmtree(d)
            gone.append(d)
    return gone


def remove_stale_staging(target: Path) -> list[Path]:
    """Remove the staging folders of ``target`` left by processes that are gone (and recover what a
    killed swap set aside: :func:`recover_set_aside`)."""
    gone = recover_set_aside(target)
    for d in target.parent.glob(f".{target.name}.partial-*"):
        pid = d.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid)):
            continue  # ours, or another live run's
        if (d / STAGING_MARK).is_file():
            log.info("removing %s, left by an interrupted run", d)
            remove_staging(d)
            gone.append(d)
        elif d.is_dir() and not d.is_symlink() and not any(d.iterdir()):  # killed before its mark was written
            d.rmdir()
            gone.append(d)
    return gone


def swap_in(new: Path, target: Path, kept: Collection[str] = ()) -> None:
    """Put the complete folder ``new`` in place of ``target`` (already checked replaceable).
    ``kept`` files of the old folder are copied into the new one first (the old folder's copy
    wins: it is the destination's); the old folder is renamed aside and removed only once
    ``new`` is in place."""
    for rel in kept:
        src = target / rel
        if src.is_file() and not src.is_symlink():
            (new / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, new / rel)
    # the mark goes in with the folder and is removed from its new place: a process killed before the
    # rename leaves a marked staging folder that the next run removes (remove_stale_staging)
    if not target.exists():
        os.replace(new, target)
        (target / STAGING_MARK).unlink(missing_ok=True)
        return
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        raise
    (target / STAGING_MARK).unlink(missing_ok=True)
    shutil.rmtree(old)
