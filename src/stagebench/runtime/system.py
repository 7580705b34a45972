"""The machine a run ran on, and the peak memory of a stretch of work.

Peak memory per stage uses Linux's resident-set high-water mark: writing ``5`` to
``/proc/self/clear_refs`` resets ``VmHWM`` in ``/proc/self/status``, so the value read
after the stage is that stage's own peak. Where that is not possible the peak comes
from a sampling thread (every 20 ms) and is reported as ``sampled``.
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import threading
from pathlib import Path


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def compute_threads() -> int:
    """The threads a model computes with (torch, onnxruntime, BM25's pool): ``STAGEBENCH_THREADS``
    when set (an engine's workers, a machine shared with other work), else every core."""
    return max(1, int(os.environ.get("STAGEBENCH_THREADS", os.cpu_count() or 1)))


def rss_mb() -> float:
    kb = _status_kb("VmRSS")
    if kb is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return kb / 1024


def peak_rss_mb() -> float:
    """The process's resident-set high-water mark (VmHWM; ru_maxrss where /proc is absent)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return kb / 1024


def code_commit() -> dict:
    """The commit of the source tree this stagebench runs from, where it runs from a git checkout (a clone,
    ``pip install -e``): ``{"commit": sha, "dirty": whether tracked files differ from it}``; an installed
    package, or no git, gives ``{"commit": None, "dirty": None}``. What a committed results folder says
    about the code that wrote it (results/README.md)."""
    here = Path(__file__).resolve().parents[1]  # the package's folder
    try:
        top = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=10)  # fmt: skip
        lines = top.stdout.split()
        if top.returncode != 0 or len(lines) != 2 or not (Path(lines[0]) / "src" / "stagebench").is_dir():
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "-C", lines[0], "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": lines[1], "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable, "ram_gb": ram,
            "os": platform.platform(), "python": platform.python_version()}  # fmt: skip


class PeakMemory:
    """``with PeakMemory() as pm: ...`` then ``pm.peak_mb`` (RSS high-water mark in MB) and ``pm.method``."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self.method = "hwm"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            if _status_kb("VmHWM") is None:
                raise OSError
        except OSError:
            self.method = "sampled"
            self.peak_mb = rss_mb()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_mb = max(self.peak_mb, rss_mb())

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self.peak_mb, rss_mb())
        else:
            self.peak_mb = peak_rss_mb()
