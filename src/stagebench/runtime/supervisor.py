"""A run on Ray, watched from outside: when the Ray runtime ends the run's own process.

A Ray driver is part of its cluster: when the cluster goes away under it (``ray stop``, a head
node lost, the local object store gone), Ray's native core ends the driver process at once
("the connection to the plasma store is failed. Terminate the process"), with exit status 0 or
1 and no Python code run: no error line, no clean-up. So ``stagebench run`` with a Ray engine
runs the run in a child process (the same command) and waits. The child tells the parent, over
an inherited pipe, that it finished the way stagebench finishes (results written, or its own
error line printed); a child that ends without saying so is reported here in one line, with a
non-zero exit, and its staging folder (``.<name>.partial-<pid>``, marked as ours) and its
half-written cache entries are removed. Signals sent to the parent (Ctrl-C, SIGTERM, SIGHUP)
are passed to the child, which stops as a local run does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from stagebench.runtime.engine import EngineParams
from stagebench.errors import StagebenchError
from stagebench.files import remove_stale_staging

#: the environment variable naming the file descriptor a watched child reports on
STATUS_FD_ENV = "STAGEBENCH_STATUS_FD"
#: what a watched child writes there when it ends the way stagebench ends
FINISHED = b"finished\n"


def _status_fd() -> int | None:
    """The pipe to report on, when this process is the child of :func:`run_watched` (the variable
    names the parent, so a process further down that inherits the variable does not use it)."""
    fd, _, parent = os.environ.get(STATUS_FD_ENV, "").partition(":")
    if fd.isdigit() and parent.isdigit() and int(parent) == os.getppid():
        return int(fd)
    return None


def watched() -> bool:
    """Whether this process is the child of :func:`run_watched`; its report pipe is then kept
    from the processes it starts (a Ray cluster's must not hold the parent's pipe open)."""
    fd = _status_fd()
    if fd is None:
        return False
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return False
    return True


def report_finished() -> None:
    """Tell the watching parent (if any) that this process ends the way stagebench ends."""
    fd = _status_fd()
    if fd is not None:
        try:
            os.write(fd, FINISHED)
            os.close(fd)
        except OSError:  # the parent is gone: nobody to tell
            pass


def run_watched(argv: Sequence[str], config_path: Path, engine: EngineParams, out: Path,
                remove_leftovers: Callable[[int], object]) -> int:  # fmt: skip
    """Run ``python -m stagebench *argv`` in a child and return its exit status, or report (one
    line, exit 2) a child the Ray runtime ended before it could report anything itself, after
    ``remove_leftovers(its pid)`` (the cache's half-written entries of that process)."""
    read_end, write_end = os.pipe()
    env = {**os.environ, STATUS_FD_ENV: f"{write_end}:{os.getpid()}"}
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    # its own session: a terminal's Ctrl-C reaches the child once, through the parent
    child = subprocess.Popen([sys.executable, "-m", "stagebench", *argv], env=env, pass_fds=(write_end,),
                             start_new_session=True)  # fmt: skip
    os.close(write_end)
    # a signal this process ignores (SIGINT in a background job) stays ignored, and the child inherits that
    old = {sig: signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
           for sig in forwarded if signal.getsignal(sig) is not signal.SIG_IGN}  # fmt: skip
    try:
        code = child.wait()  # not the pipe's end: a process the child started may still hold it
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    os.set_blocking(read_end, False)
    with os.fdopen(read_end, "rb") as status:
        said = status.read() or b""
    if FINISHED in said:
        return code
    remove_stale_staging(out)
    remove_leftovers(child.pid)
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    address, source = engine.resolved_address()
    cluster = f"the Ray cluster at {address} (from {source})" if address else "the run's local Ray cluster"
    raise StagebenchError(f"{config_path}: engine: the Ray runtime ended the run mid-stage without a word ({how}): "
                          f"{cluster} or this node's Ray processes went away (`ray stop`, a node lost); no results "
                          "folder was written or changed, every stage that finished is in the cache, so the same "
                          "command resumes after the last finished stage once the cluster is back")  # fmt: skip


__all__ = ["FINISHED", "STATUS_FD_ENV", "report_finished", "run_watched", "watched"]
