"""A content-addressed cache for stage runs, embeddings and indexes.

An entry is a folder ``<root>/<kind>/<key>/`` holding its data files and an
``entry.json`` that records, for every file, its sha256 and size, plus what the key
was made of (``key_parts``) and metadata such as the compute time. The key is the
sha256 of the canonical JSON of those parts, so anything that changes a result changes
its key; nothing is ever looked up by a fixed path.

Crash safety: an entry is written into ``<root>/<kind>/.tmp-<key>-<pid>/`` and renamed
into place only when every file and ``entry.json`` are on disk, so a killed process
leaves at most a ``.tmp-*`` folder (removed by ``stagebench cache prune``) and never a
half-written entry under a real key. Every read re-hashes the files; an entry whose
files do not match ``entry.json`` (flipped bytes, truncation, a missing file) is
reported once, removed, and the caller recomputes it.

:func:`memo` is the one "from the cache, else compute, time, log and store" used by stage
runs, corpus embeddings and BM25 indexes (and anything later).

The cache root is, in order: ``--cache-dir``, ``$STAGEBENCH_CACHE``, the config's
``cache_dir``, and ``.stagebench-cache`` in the working directory.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from stagebench.files import file_digest, named, process_alive, swap_in
from stagebench.runtime.system import PeakMemory
from stagebench.version import __version__

log = logging.getLogger("stagebench")

DEFAULT_ROOT = ".stagebench-cache"
ENV_VAR = "STAGEBENCH_CACHE"
ENTRY_FILE = "entry.json"


def cache_root(cli_value: str | None = None, config_value: str | None = None) -> Path:
    """Where the cache lives: ``--cache-dir`` > ``$STAGEBENCH_CACHE`` > config ``cache_dir`` > default."""
    for v in (cli_value, os.environ.get(ENV_VAR) or None, config_value):
        if v:
            return Path(v).expanduser()
    return Path(DEFAULT_ROOT)


def make_key(parts: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``parts`` (sorted keys, no whitespace), 32 hex digits."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


@lru_cache(maxsize=256)
def module_source_hash(module: str) -> str:
    """sha256 (16 hex) of a module's source file: the "version" of the code a cached result came from.

    Falls back to the stagebench version when the source cannot be read (e.g. a zipped install).
    """
    spec = importlib.util.find_spec(module)
    origin = getattr(spec, "origin", None) if spec else None
    if origin and os.path.isfile(origin):
        return file_digest(Path(origin))[:16]
    return f"stagebench=={__version__}"


def code_identity(modules: Iterable[str]) -> dict[str, str]:
    """The code a cached entry computed by ``modules`` depends on: the source hash of each of them and of
    every stagebench module they import, directly or not (:func:`import_closure`, traced from the
    source: one form for every key, never a hand-kept list)."""
    return {m: module_source_hash(m) for m in import_closure(modules)}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a name inside a module (`from stagebench.runs import ranked`)
        return False


@lru_cache(maxsize=None)
def stagebench_imports(module: str) -> frozenset[str]:
    """The stagebench modules ``module``'s source imports, anywhere in it (inside functions and
    typing-only blocks too: read, not executed)."""
    spec = importlib.util.find_spec(module)
    origin = getattr(spec, "origin", None) if spec else None
    if not origin or not os.path.isfile(origin):
        return frozenset()
    out: set[str] = set()
    for node in ast.walk(ast.parse(Path(origin).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "stagebench":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if _is_module(sub) else node.module)  # type: ignore[arg-type]
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "stagebench"}
    return frozenset(out - {module})


def import_closure(modules: Iterable[str]) -> tuple[str, ...]:
    """``modules`` and every stagebench module they import, directly or not: the code a result
    computed by them can depend on, derived from the source instead of a hand-kept list."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(stagebench_imports(m))
    return tuple(sorted(seen))


@dataclass
class Memo:
    """What :func:`memo` returns: the value, whether it was ``cached`` or ``computed`` in this
    run, its key, the seconds it took now and when it was computed, and peak memory."""

    value: Any
    status: str
    key: str
    seconds: float
    computed_seconds: float | None
    peak_rss_mb: float | None = None
    computed_peak_rss_mb: float | None = None


@dataclass
class Entry:
    kind: str
    key: str
    path: Path
    meta: dict

    def file(self, name: str) -> Path:
        return self.path / name


class CorruptEntry(Exception):
    pass


class Cache:
    """A cache rooted at ``root``. ``read=False`` never reads (but still writes: a refresh)."""

    def __init__(self, root: str | Path, read: bool = True, stores: frozenset[str] | None = None) -> None:
        # absolute from the start: a Ray worker (or a thread after a chdir) that is handed this cache
        # writes where the run's own cache is, never under its own working directory (issue 71)
        self.root = Path(root).expanduser().absolute()
        self.read = read
        #: the kinds :func:`memo` stores here (None: every kind); the others are computed and not kept
        self.stores = stores
        self._swept: set[str] = set()  # the kinds whose dead writers' leftovers this process removed

    def storing_only(self, kinds: frozenset[str]) -> Cache:
        """The same cache, read as it is, storing only ``kinds`` (a forecast's probe keeps the models it
        builds, never the indexes and runs of the slices it probes)."""
        return Cache(self.root, self.read, kinds)

    @staticmethod
    def _remove_dead(folder: Path) -> None:
        """Remove the half-written entries in ``folder`` (one kind) of writers that are gone, and an
        old entry a killed writer had set aside to replace it (``.<key>.old-<pid>``)."""
        for d in folder.glob(".*") if folder.is_dir() else ():
            old = d.name.rsplit(".old-", 1)
            pid = _writer(d) if d.name.startswith(".tmp-") else int(old[1]) if len(old) == 2 and old[1].isdigit() else None
            if pid is not None and pid != os.getpid() and not process_alive(pid) and d.is_dir() and not d.is_symlink():
                log.info("cache: removing %s, left by an interrupted run", d)
                shutil.rmtree(d, ignore_errors=True)

    # ---------------------------------------------------------------- entries
    def _dir(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def _verify(self, path: Path) -> dict:
        meta_path = path / ENTRY_FILE
        if not meta_path.is_file():
            raise CorruptEntry("entry.json is missing")
        try:
            info = json.loads(meta_path.read_text(encoding="utf-8"))
            files = info["files"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptEntry(f"entry.json is unreadable ({exc})") from None
        for name, want in files.items():
            p = path / name
            if not p.is_file():
                raise CorruptEntry(f"{name} is missing")
            if p.stat().st_size != want["bytes"]:
                raise CorruptEntry(f"{name} has {p.stat().st_size} bytes, expected {want['bytes']}")
            got = file_digest(p)
            if got != want["sha256"]:
                raise CorruptEntry(f"{name} checksum {got[:12]}... does not match {want['sha256'][:12]}...")
        return info

    def get(self, kind: str, key: str) -> Entry | None:
        """The verified entry, or None (absent, reads disabled, or corrupt - then it is removed)."""
        path = self._dir(kind, key)
        if not self.read or not path.is_dir():
            return None
        try:
            info = self._verify(path)
        except CorruptEntry as exc:
            log.warning("cache: %s entry %s is corrupt (%s); removed it, recomputing", kind, path, exc)
            shutil.rmtree(path, ignore_errors=True)
            return None
        os.utime(path / ENTRY_FILE)  # last use, for `cache prune --older-than`
        return Entry(kind, key, path, info.get("meta", {}))

    def put(self, kind: str, key: str, write: Callable[[Path], None], meta: dict, key_parts: dict | None = None,
            check: Callable[[Path], None] | None = None) -> Entry:  # fmt: skip
        """Write an entry atomically: ``write(folder)`` creates the data files in a temp folder,
        ``check(folder)`` (if given) must read them back without raising, then checksums and
        ``entry.json`` are added and the folder is renamed into place. An entry that does not
        read back is never stored."""
        final = self._dir(kind, key)
        if kind not in self._swept:  # once per kind: what killed writers left here goes first
            self._swept.add(kind)
            self._remove_dead(final.parent)
        tmp = final.parent / f".tmp-{key}-{os.getpid()}-{time.monotonic_ns()}"
        tmp.mkdir(parents=True)
        try:
            write(tmp)
            if check is not None:
                check(tmp)
            files = {p.name: {"sha256": file_digest(p), "bytes": p.stat().st_size} for p in sorted(tmp.iterdir())}
            info = {"kind": kind, "key": key, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "stagebench_version": __version__, "files": files, "meta": meta, "key_parts": key_parts or {}}  # fmt: skip
            (tmp / ENTRY_FILE).write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
            try:
                swap_in(tmp, final)  # a stale entry under the same key is replaced once ours is in place
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not final.is_dir():  # not another process's entry under the same key: a real failure
                    raise
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise named(exc, final) from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Entry(kind, key, final, meta)

    def remove_leftovers(self, pid: int) -> list[Path]:
        """Remove the half-written entries (``.tmp-<key>-<pid>-*``) of a process that is gone."""
        gone = []
        if self.root.is_dir():
            for d in self.root.glob(f"*/.tmp-*-{pid}-*"):
                if d.is_dir() and not d.is_symlink() and d.name.split("-")[-2] == str(pid):
                    shutil.rmtree(d)
                    gone.append(d)
        return gone

    # ---------------------------------------------------------------- listing and pruning
    def list(self) -> list[dict]:
        """Every entry (not verified: see ``verify``), newest use first."""
        out = []
        if not self.root.is_dir():
            return out
        for kind_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for d in sorted(kind_dir.iterdir()):
                if not d.is_dir():
                    continue
                row = {"kind": kind_dir.name, "key": d.name, "path": str(d), "bytes": _du(d), "partial": d.name.startswith(".tmp-")}
                mp = d / ENTRY_FILE
                try:
                    info = json.loads(mp.read_text(encoding="utf-8"))
                    row.update(created=info.get("created"), meta=info.get("meta", {}), last_used=mp.stat().st_mtime)
                except (OSError, ValueError):
                    row.update(created=None, meta={}, last_used=d.stat().st_mtime)
                out.append(row)
        out.sort(key=lambda r: -r["last_used"])
        return out

    def verify(self, kind: str, key: str) -> str | None:
        """None if the entry is intact, else why not."""
        try:
            self._verify(self._dir(kind, key))
        except CorruptEntry as exc:
            return str(exc)
        return None

    def prune(self, older_than_days: float | None = None, everything: bool = False, dry_run: bool = False) -> list[dict]:
        """Remove leftovers of killed runs (``.tmp-*``), corrupt entries, and - with
        ``older_than_days`` - entries unused for that long, or everything. Returns what went."""
        now = time.time()
        gone = []
        for row in self.list():
            why = None
            writer = _writer(Path(row["path"])) if row["partial"] else None
            if writer is not None and writer != os.getpid() and process_alive(writer):
                continue  # a live run is writing it (it renames it into place, or removes it, itself)
            if everything:
                why = "all"
            elif row["partial"]:
                why = "partial write of a killed run"
            else:
                bad = self.verify(row["kind"], row["key"])
                if bad:
                    why = f"corrupt: {bad}"
                elif older_than_days is not None and now - row["last_used"] > older_than_days * 86400:
                    why = f"unused for {(now - row['last_used']) / 86400:.1f} days"
            if why:
                row["reason"] = why
                gone.append(row)
                if not dry_run:
                    shutil.rmtree(row["path"], ignore_errors=True)
        return gone


def _writer(path: Path) -> int | None:
    """The pid in a half-written entry's name (``.tmp-<key>-<pid>-<ns>``)."""
    parts = path.name.split("-")
    return int(parts[-2]) if len(parts) >= 4 and parts[-2].isdigit() else None


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def memo(cache: Cache | None, kind: str, parts: dict, compute: Callable[[], Any], save: Callable[[Any, Path], None],
         load: Callable[[Entry], Any], *, label: str, what: str, describe: Callable[[Any], str] = lambda v: "",
         meta: Callable[[Any], dict] = lambda v: {}, check: Callable[[Any, Path], None] | None = None,
         measure_memory: bool = False, quiet: bool = False,
         unstorable: Callable[[Any], str | None] = lambda v: None) -> Memo:  # fmt: skip
    """The value keyed by ``parts`` under ``kind``: read from ``cache`` (checksum-verified) when
    it is there, else computed, timed, logged and stored (``cache=None``: computed, not stored).

    ``save(value, folder)`` writes the entry's files, ``load(entry)`` reads them back;
    ``check(value, folder)``, if given, must accept what ``save`` wrote before it is stored.
    ``describe(value)`` adds detail to the log line, ``meta(value)`` to the entry's metadata.
    ``measure_memory`` records the peak RSS of the computation (not nested: the high-water
    mark is reset for it). ``quiet`` logs at debug level (for many small entries, such as an
    LLM's answers). ``unstorable(value)`` may give a reason not to store a computed value
    (e.g. a run some of whose requests failed): it is logged and the value is not cached.
    """
    info = log.debug if quiet else log.info
    key = make_key(parts)
    entry = cache.get(kind, key) if cache is not None else None
    if entry is not None:
        with PeakMemory() if measure_memory else _no_memory() as pm:
            t0 = time.perf_counter()
            value = load(entry)
            dt = time.perf_counter() - t0
        detail = describe(value)
        info("%s: cached %s (key %s, computed in %.1fs; loaded in %.2fs)%s", label, what, key[:12],
                 entry.meta.get("seconds", float("nan")), dt, f": {detail}" if detail else "")  # fmt: skip
        return Memo(value, "cached", key, dt, entry.meta.get("seconds"), pm.peak_mb if pm else None,
                    entry.meta.get("peak_rss_mb"))  # fmt: skip
    info("%s: computing %s (key %s)", label, what, key[:12])
    with PeakMemory() if measure_memory else _no_memory() as pm:
        t0 = time.perf_counter()
        value = compute()
        dt = time.perf_counter() - t0
    peak = round(pm.peak_mb, 1) if pm else None
    detail = describe(value)
    info("%s: computed %s%s [%.1fs%s]", label, what, f": {detail}" if detail else "", dt,
         f", peak RSS {peak:.0f} MB" if peak is not None else "")  # fmt: skip
    why_not = unstorable(value) if cache is not None else None
    if why_not:
        log.warning("%s: %s not cached: %s", label, what, why_not)
    elif cache is not None and (cache.stores is None or kind in cache.stores):
        entry_meta = {**meta(value), "seconds": round(dt, 3), **({"peak_rss_mb": peak} if peak is not None else {})}
        stored = cache.put(kind, key, lambda folder: save(value, folder), entry_meta, parts,
                           check=(lambda folder: check(value, folder)) if check else None)  # fmt: skip
        info("%s: stored %s in %s", label, what, stored.path)
    return Memo(value, "computed", key, dt, dt, peak, peak)


class _no_memory:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None
