"""A run on Ray, watched from outside: when the Ray runtime ends the run's own process.

A Ray driver is part of its cluster: when the cluster goes away under it (``ray stop``, a head
node lost, the local object store gone), Ray's native core ends the driver process at once
("the connection to the plasma store is failed. Terminate the process"), with exit status 0 or
1 and no Python code run: no error line, no clean-up. So ``stagebench run`` with a Ray engine
runs the run in a child process (the same command) and waits. The child tells the parent, over
an inherited pipe, that it finished the way stagebench finishes (results written, or its own
error line printed) and with which exit status; a child that ends without saying so is reported
here in one line, with a non-zero exit, and its staging folder (``.<name>.partial-<pid>``, marked
as ours) and its half-written cache entries are removed. Ray's teardown can end a process too
(a Ray Data thread still fetching when ``ray.shutdown`` runs: "the core worker has already been
shutdown ... The process will exit"), so the child connects to the cluster before its run and
leaves the teardown to its own exit, after it has printed and reported its outcome; the status
it reported is the one the parent exits with. Signals sent to the parent (Ctrl-C, SIGTERM, SIGHUP)
are passed to the child, which stops as a local run does; a child the signal stops before it can
report (still starting) is said once, with the status a local run gives (130, 143), never taken for
a lost cluster.

The child runs in a session of its own (a terminal's Ctrl-C reaches it once, through the
parent), so nothing ties it to its parent by default: a parent killed with SIGKILL would leave
the run going on behind the user's back. The parent therefore holds the write end of a second
pipe, its lifeline, that nothing else holds; the child watches the read end, and when it reads
end-of-file (the parent is gone, however it died) it stops as on SIGTERM - no results folder,
every finished stage in the cache - and, should it not have stopped within
:data:`LIFELINE_GRACE` seconds, ends at once.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from stagebench.errors import StagebenchError, Terminated
from stagebench.files import remove_stale_staging
from stagebench.runtime.cluster.failures import ClusterLost
from stagebench.runtime.cluster.session import connect, new_ray_log, put_ray_output_aside, ray_output_log
from stagebench.runtime.engine import EngineParams

log = logging.getLogger("stagebench")

#: the environment variable naming the file descriptor a watched child reports on
STATUS_FD_ENV = "STAGEBENCH_STATUS_FD"
#: what a watched child writes there when it ends the way stagebench ends, followed by its exit
#: status and a newline
FINISHED = b"finished "
#: what a watched child writes there when the cluster went away under its run (then the parent says so)
LOST = b"lost\n"
#: the environment variable naming the read end of the parent's lifeline (``fd:parent pid``)
LIFELINE_FD_ENV = "STAGEBENCH_LIFELINE_FD"
#: the environment variable naming the file a watched child puts Ray's standard-error output into
RAY_LOG_ENV = "STAGEBENCH_RAY_LOG"
#: seconds a child whose parent died has to stop on its own before it ends at once
LIFELINE_GRACE = 20.0


def _inherited_fd(variable: str) -> int | None:
    """A pipe end :func:`run_watched` gave this process (the variable names the parent, so a
    process further down that inherits the variable does not use it)."""
    fd, _, parent = os.environ.get(variable, "").partition(":")
    if fd.isdigit() and parent.isdigit() and int(parent) == os.getppid():
        return int(fd)
    return None


def _status_fd() -> int | None:
    """The pipe to report on, when this process is the child of :func:`run_watched`."""
    return _inherited_fd(STATUS_FD_ENV)


def watched() -> bool:
    """Whether this process is the child of :func:`run_watched`; its pipes are then kept from the
    processes it starts (a Ray cluster's must not hold the parent's pipe open), and it starts
    watching its parent's lifeline."""
    fd = _status_fd()
    if fd is None:
        return False
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return False
    life = _inherited_fd(LIFELINE_FD_ENV)
    if life is not None:
        os.set_inheritable(life, False)
        threading.Thread(target=_watch_lifeline, args=(life,), name="stagebench-lifeline", daemon=True).start()
    return True


def _watch_lifeline(fd: int) -> None:
    """Block until the parent's end of the lifeline closes (nothing is ever written on it), then
    stop this run as SIGTERM stops it; end at once if that has not ended it in the grace time."""
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(LIFELINE_GRACE)
    os._exit(128 + signal.SIGTERM)


def report_lost() -> None:
    """Tell the watching parent that the cluster went away under this run (a ``ClusterLost`` this
    process caught): the parent says so in the words it uses when Ray's core ended this process
    first, so the line is the same whichever came first."""
    _report(LOST)


def _report(message: bytes) -> None:
    fd = _status_fd()
    if fd is not None:
        try:
            os.write(fd, message)
            os.close(fd)
        except OSError:  # the parent is gone: nobody to tell
            pass


def report_finished(code: int) -> None:
    """Tell the watching parent (if any) that this process ends the way stagebench ends, with exit
    status ``code``: what the parent exits with, whatever Ray's teardown does to this process after."""
    _report(FINISHED + b"%d\n" % code)


def run_watched(argv: Sequence[str], config_path: Path, engine: EngineParams, out: Path,
                remove_leftovers: Callable[[int], object]) -> int:  # fmt: skip
    """Run ``python -m stagebench *argv`` in a child and return its exit status, or report (one
    line, exit 2) a child the Ray runtime ended before it could report anything itself, after
    ``remove_leftovers(its pid)`` (the cache's half-written entries of that process). The child
    puts what Ray writes on its standard error into a log file (:data:`RAY_LOG_ENV`); it removes
    the file unless its error line names it, and a child that ended without a word has it named
    in this function's line."""
    ray_log = new_ray_log()
    try:
        return _run_watched(argv, config_path, engine, out, remove_leftovers, ray_log)
    finally:  # a child that reported removed the file unless its line names it; one that did not: named here
        if ray_log.is_file() and not ray_log.stat().st_size:
            ray_log.unlink()


def ray_log_given() -> Path | None:
    """The file :func:`run_watched` gave this process for Ray's output, when it is that child."""
    return Path(os.environ[RAY_LOG_ENV]) if _status_fd() is not None and os.environ.get(RAY_LOG_ENV) else None


def connect_watched(engine: EngineParams, where: str) -> None:
    """The watched child's start: Ray's output put aside (for good: its teardown too) into the file the
    parent gave, then connected before the run; Ray's teardown is left to this process's exit, after
    its outcome is printed and reported (:func:`report_finished`)."""
    given = ray_log_given()
    if given is not None:
        put_ray_output_aside(given)
    connect(engine, where)


def output_log() -> Path | None:
    """The file Ray's output is put aside into in this process, if it is: kept only where a line names it."""
    return ray_output_log()


def _run_watched(argv: Sequence[str], config_path: Path, engine: EngineParams, out: Path,
                 remove_leftovers: Callable[[int], object], ray_log: Path) -> int:  # fmt: skip
    read_end, write_end = os.pipe()
    life_read, life_write = os.pipe()  # the lifeline: only this process holds its write end (not inheritable)
    env = {**os.environ, STATUS_FD_ENV: f"{write_end}:{os.getpid()}", LIFELINE_FD_ENV: f"{life_read}:{os.getpid()}",
           RAY_LOG_ENV: str(ray_log)}  # fmt: skip
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    # its own session: a terminal's Ctrl-C reaches the child once, through the parent
    try:
        child = subprocess.Popen([sys.executable, "-m", "stagebench", *argv], env=env,
                                 pass_fds=(write_end, life_read), start_new_session=True)  # fmt: skip
    except BaseException:
        os.close(life_write)
        raise
    finally:
        os.close(write_end)
        os.close(life_read)
    passed: list[int] = []  # the signals passed on to the child, first first

    def pass_on(signum: int, _frame) -> None:
        passed.append(signum)
        child.send_signal(signum)

    # a signal this process ignores (SIGINT in a background job) stays ignored, and the child inherits that
    old = {sig: signal.signal(sig, pass_on) for sig in forwarded if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        code = child.wait()  # not the pipe's end: a process the child started may still hold it
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        os.close(life_write)
    os.set_blocking(read_end, False)
    with os.fdopen(read_end, "rb") as status:
        said = status.read() or b""
    if said.startswith(FINISHED) and said.endswith(b"\n") and said[len(FINISHED):-1].isdigit():
        return int(said[len(FINISHED):-1])  # the child's own status, not what Ray's teardown left
    remove_stale_staging(out)
    remove_leftovers(child.pid)
    if passed and said != LOST:  # the user's signal, whenever it reached the child (its start-up included)
        return _stopped_by(passed[0], code)
    if said != LOST and code < 0:  # a signal from outside: Ray's runtime ends a driver with an exit status, not a signal
        raise StagebenchError(f"{config_path}: the run's process (pid {child.pid}) was ended by signal "
                              f"{signal.Signals(-code).name}, sent by something outside stagebench (a kill, the "
                              "out-of-memory killer, a job scheduler's limit); no results folder was written or "
                              "changed, every stage that finished is in the cache, so the same command resumes "
                              f"after the last finished stage{_said(ray_log)}")  # fmt: skip
    log.debug("the run's process (pid %d) ended with status %d%s", child.pid, code,
              " after it saw the cluster go" if said == LOST else ", ended by Ray's core before it could report")  # fmt: skip
    address, source = engine.resolved_address()
    cluster = f"the Ray cluster at {address} (from {source})" if address else "the run's local Ray cluster"
    raise StagebenchError(f"{config_path}: engine: {cluster}, or this node's Ray processes, went away during a stage "
                          "(`ray stop`, its head or a node lost); no results folder was written or changed, every "
                          "stage that finished is in the cache, so the same command resumes after the last finished "
                          f"stage once the cluster is back{_said(ray_log)}")  # fmt: skip


def _stopped_by(signum: int, code: int) -> int:
    """The exit of a child stopped by the signal ``signum`` passed on to it before it could report: the status a
    local run gives (130 for SIGINT, 128 + the signal's number otherwise), said once. A child that exits with
    that status said its own line (its start-up handler, which stops before the command can report); one the
    signal ended before any handler (the interpreter's own start) is said here, as Ctrl-C of a local run is."""
    want = 130 if signum == signal.SIGINT else 128 + signum
    if code == want:
        return code
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _said(log: Path) -> str:
    return f" (Ray's own messages: {log})" if log.is_file() and log.stat().st_size else ""


__all__ = ["ClusterLost", "FINISHED", "LIFELINE_FD_ENV", "LOST", "RAY_LOG_ENV", "STATUS_FD_ENV", "connect_watched",
           "output_log", "ray_log_given", "report_finished", "report_lost", "run_watched", "watched"]
