"""Fault injection at every durable write (issue 50): the harness behind tests/test_faults.py.

Every operation that makes durable state under the folders a command writes (the results folder's
parent, the cache) is counted in the order the command makes it: a file opened for writing
(``open``, ``io.open``, ``os.open`` - so ``Path.write_text``, ``atomic_write``, ``shutil.copy2``, numpy's
and matplotlib's files too), a folder made (``os.mkdir``) and a rename (``os.replace``, ``os.rename``:
the commit of ``atomic_write``, ``swap_in`` and every cache entry). A switch makes the N-th such
operation:

* ``kill`` - SIGKILL of the process, before the operation;
* ``torn`` - the bytes half written, then SIGKILL (power loss before the rename: a file opened for
  writing keeps half of what was written to it when it is closed; before a rename, the file (or the
  largest file of the folder) being renamed is cut to half);
* ``enospc``, ``eio`` - the ``OSError`` a full disk or a failing device raises, at the operation.

The commands run in children forked from one warm driver (``python -m tests.faults SPEC``): the driver
imports stagebench once and runs nothing itself, so a child costs what its command computes. For each
fault at each chosen point the driver runs the command with the fault (expecting SIGKILL, or exit 2
with one line naming the path and the cause, or success with the same outputs), then runs it again
without one, and checks: the rerun succeeds with outputs byte-identical to an uninterrupted run, the
user's files beside the output are unchanged, and no partial folder or temporary file is left.

The spec (JSON): ``{"work": DIR, "roots": [...], "setup": [argv, ...], "command": argv, "compare": [glob, ...],
"user_files": {path: text}, "points": "every" | "kinds", "faults": [...]}``; the answer is JSON on stdout:
every write point with the faults injected there and whether each held.
"""

from __future__ import annotations

import builtins
import importlib
import errno
import io
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path

FAULTS = ("kill", "torn", "enospc", "eio")
#: the faults each operation can meet: a folder made has no bytes to tear (and a device error at
#: mkdir is the disk-full path), a rename has no device error of its own beyond a full disk
FAULTS_OF = {"open": FAULTS, "rename": ("kill", "torn", "enospc"), "mkdir": ("kill", "enospc")}
#: names a command leaves only while it runs: staging folders, cache temp entries, atomic_write's parts
LEFTOVER = re.compile(r"\.partial-\d+$|^\.tmp-|\.part-\d+$|\.old-\d+$")

_real = {"open": builtins.open, "os_open": os.open, "mkdir": os.mkdir, "replace": os.replace, "rename": os.rename}


class Injector:
    """Counts the durable operations under ``roots`` and makes the ``at``-th one fail as ``fault``
    (``None``: count only). ``ops``: (n, operation, path) of each one seen."""

    def __init__(self, roots: list[str], fault: str | None = None, at: int = 0) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self.fault, self.at = fault, at
        self.ops: list[tuple[int, str, str]] = []

    def _under(self, path) -> bool:
        try:
            p = os.path.realpath(os.fspath(path))
        except TypeError:
            return False
        return any(p == r or p.startswith(r + os.sep) for r in self.roots)

    def _count(self, op: str, path) -> bool:
        """Record one operation; True when it is the one to fail."""
        if not self._under(path):
            return False
        n = len(self.ops) + 1
        self.ops.append((n, op, os.path.realpath(os.fspath(path))))
        return self.fault is not None and n == self.at

    def _fail(self, path, torn_target=None) -> None:
        if self.fault in ("enospc", "eio"):
            code = errno.ENOSPC if self.fault == "enospc" else errno.EIO
            raise OSError(code, os.strerror(code), os.fspath(path))
        if self.fault == "torn" and torn_target is not None and LEFTOVER.search(Path(os.fspath(torn_target)).name):
            _halve(torn_target)  # only what was just written can be torn: not a folder set aside
        os.kill(os.getpid(), signal.SIGKILL)

    # ---------------------------------------------------------------- the patched operations
    def open(self, file, mode="r", *args, **kwargs):
        writes = isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+")
        if writes and self._count("open", file):
            if self.fault == "torn":
                fh = _real["open"](file, mode, *args, **kwargs)
                return _Torn(fh, file)
            self._fail(file)
        return _real["open"](file, mode, *args, **kwargs)

    def os_open(self, path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and self._count("open", path):
            self._fail(path)
        return _real["os_open"](path, flags, *args, **kwargs)

    def mkdir(self, path, *args, **kwargs):
        if not os.path.lexists(path) and self._count("mkdir", path):  # an existing folder: nothing is made
            self._fail(path)
        return _real["mkdir"](path, *args, **kwargs)

    def replace(self, src, dst, *args, **kwargs):
        if self._count("rename", dst):
            self._fail(dst, torn_target=src)
        return _real["replace"](src, dst, *args, **kwargs)

    def rename(self, src, dst, *args, **kwargs):
        if self._count("rename", dst):
            self._fail(dst, torn_target=src)
        return _real["rename"](src, dst, *args, **kwargs)

    def install(self) -> None:
        builtins.open = io.open = self.open
        os.open, os.mkdir, os.replace, os.rename = self.os_open, self.mkdir, self.replace, self.rename


class _Torn:
    """A file whose close keeps half of what was written, then the process dies."""

    def __init__(self, fh, path) -> None:
        self._fh, self._path = fh, path

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return iter(self._fh)

    def close(self) -> None:
        self._fh.close()
        _halve(self._path)
        os.kill(os.getpid(), signal.SIGKILL)


def _halve(path) -> None:
    """Cut a file (or a folder's largest file) to half its bytes."""
    p = Path(os.fspath(path))
    if p.is_dir():
        files = [f for f in p.rglob("*") if f.is_file()]
        if not files:
            return
        p = max(files, key=lambda f: f.stat().st_size)
    if p.is_file():
        size = p.stat().st_size
        with _real["open"](p, "r+b") as fh:
            fh.truncate(size // 2)


# -------------------------------------------------------------------------------- the driver


def _flat_plots() -> None:
    """Plots drawn as a fixed small PNG: a plot is one more atomic write of the results folder, and
    drawing five of them with matplotlib took most of a small run's time (what a plot shows is tested
    in tests/results and tests/report)."""
    import matplotlib.figure

    def savefig(self, fname, *args, **kwargs):
        data = b"\x89PNG\r\n\x1a\n" + b"flat plot"
        if hasattr(fname, "write"):
            fname.write(data)
        else:
            with open(fname, "wb") as fh:
                fh.write(data)

    matplotlib.figure.Figure.savefig = savefig


spec_flat_plots = False


def _child(argv: list[str], injector: Injector | None, log: Path, cwd: str) -> int:
    """Fork; the child runs the CLI in ``cwd`` with ``injector`` installed (its ops written to ``log``)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            os.chdir(cwd)
            fd = _real["os_open"](str(log.with_suffix(".err")), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 2)
            out = _real["os_open"](os.devnull, os.O_WRONLY)
            os.dup2(out, 1)
            from stagebench.cli import main

            if spec_flat_plots:
                _flat_plots()
            if injector is not None:
                injector.install()
            try:
                code = main(argv)
            finally:
                if injector is not None:
                    with _real["open"](log, "w") as fh:
                        json.dump(injector.ops, fh)
        except BaseException:  # noqa: BLE001 - the child must never return into the driver
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 70)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _kind(path: str, roots: list[str]) -> str:
    """A write point's kind: its path with process ids, cache keys and times taken out."""
    for r in roots:
        r = os.path.realpath(r)
        if path.startswith(r + os.sep):
            path = f"<{Path(r).name}>/" + path[len(r) + 1:]
            break
    path = re.sub(r"\.tmp-[0-9a-f]+-\d+-\d+(/.*)?$", lambda m: ".tmp-<key>" + ("/*" if m[1] else ""), path)
    path = re.sub(r"/\.([^/]+)\.partial-\d+(/.*)?$", lambda m: f"/.{m[1]}.partial-<pid>" + (
        ("/**/.*.part" if m[2].endswith(".part") or re.search(r"\.part-\d+$", m[2]) else "/**/*") if m[2] else ""), path)
    path = re.sub(r"\.stagebench-write-test-.*$", ".stagebench-write-test-*", path)
    path = re.sub(r"/[0-9a-f]{32,64}(?=/|$)", "/<key>", path)
    path = re.sub(r"\.part-\d+$", ".part", path)
    return path


def _snapshot(work: Path, patterns: list[str]) -> dict[str, bytes]:
    return {str(p.relative_to(work)): p.read_bytes() for pat in patterns for p in sorted(work.glob(pat)) if p.is_file()}


def _leftovers(roots: list[str]) -> list[str]:
    found = []
    for r in roots:
        for dirpath, dirnames, filenames in os.walk(r):
            found += [os.path.join(dirpath, n) for n in (*dirnames, *filenames) if LEFTOVER.search(n)]
    return found


def _reset(spec: dict, pristine: Path) -> None:
    """The work folder back to the state before the command (after the setup commands)."""
    work = Path(spec["work"])
    for p in work.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    shutil.copytree(pristine, work, symlinks=True, dirs_exist_ok=True)


def drive(spec: dict) -> dict:
    global spec_flat_plots
    spec_flat_plots = spec.get("flat_plots", True)
    import stagebench.cli  # noqa: F401 - imported once here, so a forked child starts warm
    from stagebench.report import plots

    plots._fig()  # matplotlib on Agg, imported before the first fork
    for name in spec.get("preload", ()):  # model libraries a child would import on every run
        importlib.import_module(name)
    work, roots = Path(spec["work"]), spec["roots"]
    logs = Path(spec["logs"])
    logs.mkdir(parents=True, exist_ok=True)
    for rel, text in spec.get("user_files", {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    for i, argv in enumerate(spec.get("setup", [])):
        code = _child(argv, None, logs / f"setup{i}.json", str(work))
        if code != 0:
            raise SystemExit(f"setup {argv} exited {code}: {(logs / f'setup{i}.err').read_text()[-2000:]}")
    pristine = logs / "pristine"
    shutil.copytree(work, pristine, symlinks=True)
    # the uninterrupted run: its outputs, and every write point it makes
    counter = Injector(roots)
    code = _child(spec["command"], counter, logs / "count.json", str(work))
    if code != 0:
        raise SystemExit(f"{spec['command']} exited {code}: {(logs / 'count.err').read_text()[-2000:]}")
    ops = [tuple(o) for o in json.loads((logs / "count.json").read_text())]
    want = _snapshot(work, spec["compare"])
    if not want:
        raise SystemExit(f"nothing to compare: {spec['compare']} matched no file")
    kinds: dict[str, list[int]] = {}
    for n, op, path in ops:
        kinds.setdefault(f"{op} {_kind(path, roots)}", []).append(n)
    only = re.compile(spec.get("only", ""))
    if spec.get("points", "every") == "every":
        chosen = [n for n, op, path in ops if only.search(f"{op} {_kind(path, roots)}")]
    else:  # the first point of each kind
        chosen = sorted(ns[0] for k, ns in kinds.items() if only.search(k))
    results = []
    first_mkdir = next((n for n in chosen if ops[n - 1][1] == "mkdir"), None)
    for n in chosen:
        op, path = ops[n - 1][1], ops[n - 1][2]
        faults = spec.get("faults", FAULTS_OF[op])
        if spec.get("fast"):  # make test: the faults that take a path of their own (make faults: every one)
            faults = [f for f in faults if f != "eio"]  # EIO takes ENOSPC's path: an OSError at the same call
            if op == "rename":  # a rename's torn source is a torn file's .part: the open's torn covers it
                faults = [f for f in faults if f != "torn"]
            if op == "mkdir" and n != first_mkdir:  # one folder made: a kill there is a kill at the write before
                continue
        for fault in faults:
            _reset(spec, pristine)
            log = logs / f"f{n}-{fault}.json"
            code = _child(spec["command"], Injector(roots, fault, n), log, str(work))
            err = log.with_suffix(".err").read_text(errors="replace")
            lines = [ln for ln in err.splitlines() if ln.startswith("stagebench: error:")]
            problems = []
            if fault in ("kill", "torn"):
                if code != -signal.SIGKILL:
                    problems.append(f"expected SIGKILL, exit {code}")
            elif code == 2:
                if "Traceback" in err or len(lines) != 1:
                    problems.append(f"not one line: {err[-600:]!r}")
                elif not re.search(r"(?i)no space left on (the )?device|input/output error", lines[0]):
                    problems.append(f"the cause is not named: {lines[0]!r}")
            elif code == 0:
                if _snapshot(work, spec["compare"]) != want:
                    problems.append("exit 0 after the fault with outputs that differ")
            else:
                problems.append(f"exit {code}: {err[-600:]!r}")
            code2 = _child(spec["command"], None, log.with_name(log.stem + "-rerun.json"), str(work))
            if code2 != 0:
                problems.append(f"rerun exit {code2}: {log.with_name(log.stem + '-rerun.err').read_text()[-600:]!r}")
            elif _snapshot(work, spec["compare"]) != want:
                got = _snapshot(work, spec["compare"])
                problems.append("rerun differs: " + ", ".join(sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k)))[:400])
            for rel, text in spec.get("user_files", {}).items():
                if (work / rel).read_text() != text:
                    problems.append(f"the user's file {rel} changed")
            if left := _leftovers(roots):
                problems.append(f"left behind: {left[:3]}")
            results.append({"n": n, "op": op, "kind": _kind(path, roots), "fault": fault, "exit": code,
                            "held": not problems, "problems": problems})  # fmt: skip
    return {"points": len(ops), "kinds": {k: len(v) for k, v in kinds.items()}, "chosen": chosen, "results": results}


def table(folder: Path) -> str:
    """results/faults.md: each path's write points by kind, the faults injected and how many held."""
    out = ["# Faults injected at every write (`make faults`)", "",
           "Written by `make faults` (tests/test_faults.py with every write point of each command faulted, not only the "
           "first of each kind as `make test` does; tests/faults.py explains the faults). A fault *held* when the rerun "
           "gave outputs byte-identical to an uninterrupted run, the user's file beside them was unchanged, nothing "
           "partial was left, and an I/O error was one line naming the path and the cause.", ""]  # fmt: skip
    for f in sorted(folder.glob("*.json")):
        found = json.loads(f.read_text())
        rs = found["results"]
        out += [f"## stagebench {found['command']}", "",
                f"{found['points']} write points of {len(found['kinds'])} kinds; {len(rs)} faults injected at "
                f"{len({r['n'] for r in rs})} points; **{sum(r['held'] for r in rs)} held**.", "",
                "| operation | where (pids, keys and names taken out) | points | faulted | kill | torn | ENOSPC | EIO | held |",
                "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for kind, count in found["kinds"].items():
            op, where = kind.split(" ", 1)
            mine = [r for r in rs if f"{r['op']} {r['kind']}" == kind]
            by = {fault: sum(1 for r in mine if r["fault"] == fault) for fault in FAULTS}
            out.append(f"| {op} | `{where}` | {count} | {len({r['n'] for r in mine})} | " + " | ".join(
                str(by[x]) if by[x] else "-" for x in FAULTS) + f" | {sum(r['held'] for r in mine)} of {len(mine)} |")
        bad = [r for r in rs if not r["held"]]
        out += [""] + [f"* did not hold: {r['op']} {r['kind']} (point {r['n']}), {r['fault']}: {'; '.join(r['problems'])}"
                       for r in bad] + ([""] if bad else [])  # fmt: skip
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        sys.stdout.write(table(Path(sys.argv[2])))
    else:
        spec = json.loads(Path(sys.argv[1]).read_text())
        print(json.dumps(drive(spec), indent=1))
