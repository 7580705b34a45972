"""The connection to a Ray cluster for one run: the address probed before ``ray.init`` (which would
wait minutes on a port where no cluster answers), the local cluster started for a run without an
address, Ray's own output put aside into a log file (named by the line that ends a run, else
removed), and :func:`ray_session`, the context a stage runs in."""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any



from stagebench.errors import StagebenchError
from stagebench.optional import need
from stagebench.runtime.cluster.auth import (authentication_message, check_authentication, check_token_given,
                                             check_workers_answer, is_authentication_failure)  # fmt: skip
from stagebench.runtime.cluster.failures import RayFailed
from stagebench.runtime.engine import EngineParams, RECONNECT_ENV

log = logging.getLogger("stagebench")

#: seconds a TCP connection to a cluster's address may take before it counts as not answering
PROBE_TIMEOUT_S = 5.0


#: an HTTP/2 client's opening (the connection preface and an empty SETTINGS frame): a Ray
#: cluster's GCS and its client server speak gRPC, so they answer with a SETTINGS frame
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def probe(address: str, where: str) -> None:
    """One clear line, within seconds, when nothing listens at a ``host:port`` cluster address,
    or what listens there is not a Ray cluster (it does not answer as a gRPC server does;
    ``ray.init`` would wait on it for minutes). With TLS (``RAY_USE_TLS``) only the
    connection is tried."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise StagebenchError(f"{where}: {address!r} is not auto, host:port or ray://host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S) as sock:
            if os.environ.get("RAY_USE_TLS", "0") in ("0", ""):
                sock.sendall(_H2_PREFACE)
                head = b""
                while len(head) < 9:
                    got = sock.recv(9 - len(head))
                    if not got:
                        break
                    head += got
                if len(head) < 9 or head[3] != 0x04:
                    raise StagebenchError(f"{where}: {address} answers, but not as a Ray cluster does (no gRPC "
                                          f"handshake: {'it closed the connection' if len(head) < 9 else repr(head[:16])}); "
                                          "check the address and port (the head node's GCS port, 6379 by default, or "
                                          "ray://host:10001)")  # fmt: skip
    except TimeoutError:
        raise StagebenchError(f"{where}: {address} accepts connections but does not answer as a Ray cluster does "
                              f"(no gRPC handshake within {PROBE_TIMEOUT_S:g} s); check the address and port") from None
    except OSError as exc:
        raise StagebenchError(f"{where}: no Ray cluster answers at {address} ({type(exc).__name__}: {exc}); start one "
                              "with `ray start --head`, or set address: null to run a local cluster") from exc  # fmt: skip


def _local_cluster() -> str | None:
    """For ``address: auto``: the ``host:port`` of the cluster ``ray start`` runs on this machine, as
    ``ray.init`` finds it, with this process's token settings made what ``ray.init`` makes them there
    (it turns token authentication on where a token exists and RAY_AUTH_MODE is unset). None where
    none is found, or Ray's private helpers for it are missing (then ``ray.init`` says it)."""
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return None
    try:
        found = canonicalize_bootstrap_address("auto")
    except Exception:  # noqa: BLE001 - nothing found: ray.init says so in its words
        return None
    if not found:
        return None
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    return found


class _RayDataProgress(logging.Filter):
    """Drops Ray Data's lines about its own progress, which a stagebench stage reports in its own
    words: the advice to turn on the progress bars stagebench turned off, and each dataset's
    "execution finished/failed" (the stage logs its units done on Ray, a failure its one error line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        return not (said.startswith("Progress bars disabled") or (" execution f" in said and "Dataset " in said))


#: the Ray Data loggers that say those lines (a renamed one only brings the lines back)
RAY_DATA_PROGRESS_LOGGERS = ("ray.data._internal.progress", "ray.data._internal.execution.streaming_executor")
_RAY_DATA_PROGRESS = _RayDataProgress()


def answers(params: EngineParams, where: str = "engine") -> str:
    """Whether the cluster ``params`` names answers, in seconds and without starting anything on it (``run
    --dry-run``): a line saying so, or the error :func:`connect` would raise first (nothing listens there, it
    is not a Ray cluster, it refuses the token this process sends, ``auto`` finds none on this machine). A
    run that starts a local cluster of its own has nothing to ask."""
    address, source = params.resolved_address()
    named = f"{where}.address" if source == "engine.address" else source
    if address is None:
        return f"engine ray: a local Ray cluster is started for the run ({params.local_cpus or os.cpu_count()} CPUs)"
    check_token_given(where)
    if address == "auto":
        need("ray", "engine: ray")
        found = _local_cluster()
        if found is None:
            raise StagebenchError(f"{named}: auto: no Ray cluster runs on this machine (start one with `ray start "
                                  "--head`, name its address, or set address: null to run a local cluster)")  # fmt: skip
        probe(found, f"{named} (auto: the cluster `ray start` runs on this machine)")
        check_authentication(found, f"{named} (auto: the cluster `ray start` runs on this machine)")
        return f"engine ray: the cluster `ray start` runs on this machine ({found}) answers; nothing was started on it"
    probe(address, named)
    check_authentication(address, named)
    return f"engine ray: the cluster at {address} (from {source}) answers; nothing was started on it"


def connect(params: EngineParams, where: str = "engine") -> None:
    """Connect this process to the cluster ``params`` names (``ray.init``), or start a local one
    when it names none; the caller shuts it down (:func:`ray_session`), or leaves that to Ray's
    own exit handler. A SIGTERM handler the caller installed in Python (the command line's, which
    stops a run as Ctrl-C does) is kept: ``ray.init`` replaces it with an immediate exit and its
    native core adds a stack dump, so a terminated run would skip its one line."""
    ray = need("ray", "engine: ray")
    _ray_loggers_aside()  # Ray's loggers, configured on its import: to the file, where Ray's output is put aside
    address, source = params.resolved_address()
    named = f"{where}.address" if source == "engine.address" else source
    check_token_given(where)
    address_found: str | None = None
    if address not in (None, "auto"):
        probe(address, named)
        check_authentication(address, named)
    elif address == "auto":
        found = _local_cluster()
        if found is not None:  # the token ray.init would send, asked at once instead of after its retries
            check_authentication(found, f"{named} (auto: the cluster `ray start` runs on this machine)")
        address_found = found
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": False}
    if address is None:
        kwargs["num_cpus"] = params.local_cpus or os.cpu_count()
    # the driver's patience with a lost cluster: Ray's core reads it once, as ray.init starts it
    os.environ.setdefault(RECONNECT_ENV, str(params.lost_after_s))
    main = threading.current_thread() is threading.main_thread()
    term = signal.getsignal(signal.SIGTERM) if main else None
    t0 = time.perf_counter()
    try:
        # "local": a new cluster, as documented, even where `ray start` runs one on this machine
        # (ray.init(None) would join that one instead, and refuse num_cpus)
        ray.init(address=address or "local", **kwargs)
    except Exception as exc:
        if is_authentication_failure(exc):
            raise StagebenchError(authentication_message(address or "auto", named)) from exc
        first = str(exc).strip().splitlines()
        raise StagebenchError(f"{named}: cannot connect to Ray at {address or 'a new local cluster'} "
                              f"({type(exc).__name__}: {first[0] if first else ''})") from exc  # fmt: skip
    finally:
        if callable(term):
            signal.signal(signal.SIGTERM, term)
    if address is not None and os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        check_workers_answer(address if address != "auto" else (address_found or "auto"), named)
    res = ray.cluster_resources()
    log.info("engine ray: connected to %s in %.1fs: %g CPU, %g GPU", address or "a new local cluster",
             time.perf_counter() - t0, res.get("CPU", 0), res.get("GPU", 0))  # fmt: skip
    data_ctx = ray.data.DataContext.get_current()
    data_ctx.enable_progress_bars = False  # stagebench draws its own, in its units
    data_ctx.print_on_execution_start = False
    for name in RAY_DATA_PROGRESS_LOGGERS:
        logging.getLogger(name).addFilter(_RAY_DATA_PROGRESS)
    _ray_loggers_aside()  # where Ray's output is put aside (put_ray_output_aside), Ray Data's loggers' too


def new_ray_log() -> Path:
    """A new file for what Ray says on a run's standard error (:func:`put_ray_output_aside`), in the
    system's temporary folder: removed after a run that ended well, kept and named after one that did not."""
    fd, name = tempfile.mkstemp(prefix="stagebench-ray-", suffix=".log")
    os.close(fd)
    return Path(name)


def _stderr_is_the_screen() -> bool:
    """Whether ``sys.stderr`` writes to file descriptor 2 itself: in a notebook (its own stream, the
    kernel's descriptor 2 is not the notebook) or under a capture, Ray's native output never reaches
    what the user reads, and stagebench's lines must stay where they are."""
    try:
        return sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False


def ray_output_log() -> Path | None:
    """The file Ray's output is put aside into in this process, if it is (:func:`put_ray_output_aside`)."""
    return sys.stderr.path if isinstance(sys.stderr, _Screen) else None


def put_ray_output_aside(path: Path) -> Callable[[], None]:
    """Send what this process writes to file descriptor 2 from now on - Ray's native core
    (``core_worker.cc`` lines), its Python loggers, Ray Data's error logging and tracebacks - to
    the file ``path`` (appended), while stagebench's own lines and progress bars stay on the
    screen: ``sys.stderr`` and the root logger's handlers move to a copy of the screen's
    descriptor, and the ``ray`` loggers' stream handlers to the file. Returns the function that
    puts everything back (a watched child never calls it: Ray's teardown at its exit stays in
    the file too)."""
    sys.stderr.flush()
    old = sys.stderr
    screen_fd = os.dup(2)
    file_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(file_fd, 2)
    os.close(file_fd)
    screen = _Screen(open(screen_fd, "wb", closefd=True), encoding=getattr(old, "encoding", None) or "utf-8",
                     errors="backslashreplace", line_buffering=True)  # fmt: skip
    screen.aside, screen.path = old, path
    sys.stderr = screen
    moved = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler) and h.stream is old]
    for h in moved:
        h.setStream(screen)

    def restore() -> None:
        screen.flush()
        os.dup2(screen.fileno(), 2)
        for h in moved:
            h.setStream(old)
        sys.stderr = old
        screen.close()

    return restore


class _Screen(io.TextIOWrapper):
    """``sys.stderr`` while Ray's output is put aside: the screen; ``aside`` is the stream that
    now writes to the file ``path``."""

    aside: Any = None
    path: Path | None = None


def _ray_loggers_aside() -> None:
    """The ``ray`` loggers configured after :func:`put_ray_output_aside` (Ray Data's, on its
    import) hold the screen's stream: moved to the file."""
    screen = sys.stderr
    if not isinstance(screen, _Screen):
        return
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.split(".")[0] == "ray" and isinstance(logger, logging.Logger):
            for h in logger.handlers:
                if isinstance(h, logging.StreamHandler) and h.stream is screen:
                    h.setStream(screen.aside)


@contextmanager
def ray_session(params: EngineParams | None, where: str = "engine") -> Iterator[None]:
    """Connect to (or start) the cluster ``params`` names for the duration of a run, before any
    stage runs; a cluster this call started is stopped at the end. ``None`` or local: nothing.
    A session the caller holds (a notebook's ``ray.init``, :func:`connect`) is used and left as it is.
    What Ray writes on standard error goes to a log file for the duration (:func:`new_ray_log`,
    unless the caller put it aside already, or standard error is not the process's descriptor 2: a
    notebook), named in the line of a stage Ray failed (:class:`RayFailed`) and removed when the
    session ends well."""
    if params is None or params.type != "ray":
        yield
        return
    ray = need("ray", "engine: ray")
    log_file, restore, ok = None, None, False
    try:
        if ray.is_initialized():
            yield
            ok = True
            return
        if ray_output_log() is None and _stderr_is_the_screen():
            log_file = new_ray_log()
            restore = put_ray_output_aside(log_file)
        try:
            connect(params, where)
            try:
                yield
            finally:
                ray.shutdown()
        finally:
            if restore is not None:
                restore()
        ok = True
    except RayFailed as exc:
        said = log_file or ray_output_log()
        if said is not None and said.is_file() and said.stat().st_size:
            raise type(exc)(f"{exc} (Ray's own messages: {said})") from exc
        raise
    finally:
        if log_file is not None and (ok or not log_file.stat().st_size):
            log_file.unlink(missing_ok=True)


__all__ = ["answers", "PROBE_TIMEOUT_S", "RAY_DATA_PROGRESS_LOGGERS", "connect", "new_ray_log", "probe", "put_ray_output_aside", "ray_output_log", "ray_session"]
