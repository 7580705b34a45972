"""Where a stage's work runs: in this process (``local``) or on a Ray cluster (``ray``).

A stage cuts its work into **units** whose composition never depends on the engine: one model
batch of texts (dense), one ``score_pairs`` call (rerankers), one query's windows (LLM). It
hands the units and a picklable **task** (a callable that loads its model lazily, once) to
:meth:`Engine.map`, which returns one result per unit, in order. The local engine calls the
task in this process; the Ray engine runs Ray Data ``map_batches`` over an actor pool: each
actor unpickles the task once (so loads the model once) and applies it to ``batch_size`` units
per call. Because units and tasks are the same, both engines compute the same bits (on the same
hardware and libraries), and the cache keys do not name the engine: what one computed, the
other reuses.

Ray Data restarts a killed actor and retries its task (``max_restarts=-1``,
``max_task_retries=-1`` for actor pools), so a worker lost mid-stage costs time, not results.
Ray is optional (``pip install 'stagebench[ray]'``) and imported only when an engine is ``ray``.
"""

from __future__ import annotations

import io
import logging
import math
import os
import threading
import pickle
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stagebench.errors import StagebenchError
from stagebench.optional import need
from stagebench.params import NonNegativeFloat, PositiveFloat, PositiveInt, param
from stagebench.ui import progress

log = logging.getLogger("stagebench")

#: seconds a TCP connection to a cluster's address may take before it counts as not answering
PROBE_TIMEOUT_S = 5.0
#: the settings that only mean something for ``type: ray``
RAY_ONLY = ("address", "num_workers", "num_cpus_per_worker", "num_gpus_per_worker", "batch_size", "local_cpus",
            "lost_after_s")
#: the Ray setting :attr:`EngineParams.lost_after_s` gives the driver (read by Ray's core when it starts)
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"


@dataclass
class EngineParams:
    type: Literal["local", "ray"] = param("local", "local: in this process; ray: Ray Data actor pools (docs/scale.md)")
    address: str | None = param(None, "ray: auto (the cluster `ray start` runs on this machine) | host:port | "
                                "ray://host:port; null: start a local cluster for this run")  # fmt: skip
    num_workers: PositiveInt | None = param(None, "ray: actors per stage, each loading the model once "
                                            "(null: the cluster's CPUs / num_cpus_per_worker, or its GPUs / num_gpus_per_worker)")  # fmt: skip
    num_cpus_per_worker: PositiveFloat = param(1.0, "ray: CPUs reserved per actor; its model runs that many threads")
    num_gpus_per_worker: NonNegativeFloat = param(0.0, "ray: GPUs per actor (a fraction shares one); > 0 runs the "
                                                  "models on the actor's GPU")  # fmt: skip
    batch_size: PositiveInt = param(4, "ray: units per task: model batches (dense), score_pairs calls (rerankers), "
                                    "queries (LLM); never changes the results")  # fmt: skip
    local_cpus: PositiveInt | None = param(None, "ray, address null: CPUs of the local cluster (null: this machine's)")
    lost_after_s: PositiveInt = param(10, "ray: seconds a driver whose cluster stopped answering tries to reach it "
                                      "again before the run ends (Ray's RAY_gcs_rpc_server_reconnect_timeout_s, "
                                      "default 60; that variable, where set, wins)")  # fmt: skip

    def validate(self) -> list[tuple[str, str]]:
        if self.type == "local":
            default = EngineParams()
            return [(k, "applies to engine type ray") for k in RAY_ONLY if getattr(self, k) != getattr(default, k)]
        if self.address is not None and self.local_cpus is not None:
            return [("local_cpus", "sizes a local cluster; with an address the cluster is already sized")]
        return []

    def resolved_address(self) -> tuple[str | None, str]:
        """The cluster address a Ray run connects to and where it came from: the config's
        ``address``, else ``$RAY_ADDRESS`` (which ``ray.init`` itself reads), else None (a local
        cluster started for the run)."""
        if self.address:
            return self.address, "engine.address"
        env = os.environ.get("RAY_ADDRESS") or None
        return (env, "$RAY_ADDRESS") if env else (None, "engine.address")

    @property
    def gpus(self) -> bool:
        """Whether the work runs on GPUs the driver may not have (Ray actors with GPUs)."""
        return self.type == "ray" and self.num_gpus_per_worker > 0

    def describe(self) -> str:
        if self.type == "local":
            return "local (this process)"
        address, source = self.resolved_address()
        where = f"{address} (from {source})" if address else f"a local cluster ({self.local_cpus or os.cpu_count()} CPUs)"
        return (f"ray on {where}: {self.num_workers or 'auto'} worker(s) x {self.num_cpus_per_worker:g} CPU"
                f"{f' + {self.num_gpus_per_worker:g} GPU' if self.num_gpus_per_worker else ''}, "
                f"{self.batch_size} unit(s) per task")  # fmt: skip


class Engine:
    """Runs a task over units; see the module docstring."""

    params: EngineParams

    def map(self, task: Callable[[Any], Any], units: Sequence[Any], *, desc: str, unit: str = "unit",
            sizes: Sequence[int] | None = None, threads: int = 1, progress_bar: bool = True) -> list[Any]:  # fmt: skip
        """``[task(u) for u in units]``; ``sizes`` weighs each unit in the progress bar (e.g. texts per batch);
        ``progress_bar=False`` shows none (many short maps, e.g. one per served query);
        ``threads``: units in flight at once (tasks that wait on a server, e.g. LLM queries): in this
        process, or across the cluster on Ray (:func:`ray_shape`). When one unit fails, the others not yet
        started are dropped and a task with ``cancel()`` is told to stop the ones in flight."""
        raise NotImplementedError

    @property
    def remote(self) -> bool:
        return False


class LocalEngine(Engine):
    def __init__(self, params: EngineParams | None = None) -> None:
        self.params = params or EngineParams()

    def map(self, task, units, *, desc, unit="unit", sizes=None, threads=1, progress_bar=True):
        sizes = list(sizes) if sizes is not None else [1] * len(units)
        with progress(sum(sizes), desc, unit, enabled=progress_bar) as bar:
            if threads <= 1 or len(units) <= 1:
                out = []
                for u, s in zip(units, sizes):
                    out.append(task(u))
                    bar.update(s)
                return out
            return _threaded(task, units, sizes, threads, bar, desc)


def _threaded(task: Callable[[Any], Any], units: Sequence[Any], sizes: list[int], threads: int, bar: Any,
              desc: str) -> list[Any]:  # fmt: skip
    """The units on ``threads`` threads. The first unit that fails stops the map at once, from its
    own thread: no unit starts after it (a freed thread would otherwise take the next one before
    the map could cancel), and a task with ``cancel()`` is told to stop the ones in flight."""
    stop = threading.Event()
    first: list[BaseException] = []
    lock = threading.Lock()
    cancel = getattr(task, "cancel", None)

    def stopping(exc: BaseException | None) -> None:
        with lock:
            if stop.is_set():
                return
            if exc is not None:
                first.append(exc)
            stop.set()
        if callable(cancel):
            cancel()

    def guarded(u: Any) -> Any:
        if stop.is_set():
            raise _NotStarted()
        try:
            return task(u)
        except BaseException as exc:
            stopping(exc)
            raise

    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"stagebench-{desc.split(':')[0]}")
    try:
        futures = [pool.submit(guarded, u) for u in units]
        for f, n in zip(futures, sizes):
            f.add_done_callback(lambda _f, n=n: bar.update(n))
        wait(futures, return_when=FIRST_EXCEPTION)
        if first:
            raise first[0]
        return [f.result() for f in futures]
    except BaseException:
        stopping(None)  # Ctrl-C in this thread: the units in flight are told too
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Raised(Exception):
    """A unit's stagebench error that came back from a Ray worker (:class:`_WorkerError`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RayFailed(StagebenchError):
    """A stage's work lost to Ray itself (the cluster, a node, authentication, a worker's
    process), as opposed to a stagebench error a unit raised: :func:`ray_session` names the file
    that holds Ray's own messages about it."""


class ClusterLost(RayFailed):
    """The cluster (or a node of it) went away under a stage: a watched run leaves its line to the
    parent (:mod:`stagebench.runtime.supervisor`), which says it the same way whether the driver
    saw the loss or Ray's core ended the driver first."""


class _NotStarted(Exception):
    """A unit the map did not start because an earlier one failed."""


def ray_shape(workers: int, in_flight: int, batch_size: int, units: int) -> tuple[int, int, int]:
    """How a map spreads over the Ray workers: (workers, units in flight on each, units per task).
    A task that waits on a server (``in_flight`` > 1: an LLM stage's ``concurrency``) keeps at most
    ``in_flight`` units in flight across the cluster, as it does in one process: at most that many
    workers, each running ``in_flight // workers`` of its task's units at once (a task holds at least
    that many units). Any other task: one unit at a time on each worker."""
    if in_flight <= 1:
        return max(1, min(workers, math.ceil(units / batch_size))), 1, batch_size
    n = max(1, min(workers, in_flight, units))
    each = in_flight // n
    size = max(batch_size, each)
    return max(1, min(n, math.ceil(units / size))), each, size


def apply_units(task: Callable[[Any], Any], units: Sequence[Any], in_flight: int, stopped: Callable[[], bool]) -> list[Any]:
    """``[task(u) for u in units]``, ``in_flight`` at a time (threads, as the local engine runs them), no
    unit started once ``stopped()``: then the units done before it (a sequential run), or none (threads;
    the map has failed elsewhere and its error is what the driver reports). A unit's error is raised."""
    if in_flight <= 1:
        out = []
        for u in units:
            if stopped():
                break
            out.append(task(u))
        return out

    def guarded(u: Any) -> Any:
        if stopped():
            raise _NotStarted()
        return task(u)

    with progress(len(units), "ray worker", "unit", enabled=False) as bar:
        try:
            return _threaded(guarded, units, [1] * len(units), in_flight, bar, "ray worker")
        except _NotStarted:
            return []


def _worker_class(task_blob: bytes, threads: str, stop_key: str, in_flight: int = 1) -> type:
    """The Ray Data actor class: unpickles the task once per actor (the task loads its model on
    first use), then applies it to the units of each batch, ``in_flight`` at a time
    (:func:`apply_units`). The task travels inside the class (by value), not as a constructor
    argument in the object store, so a restarted actor rebuilds it. A unit that fails for good
    marks ``stop_key`` in the cluster's key-value store, and no worker starts a unit after that mark
    (Ray Data would hand a freed worker the next batch: issue 71)."""

    class StagebenchWorker:
        def __init__(self) -> None:
            os.environ["STAGEBENCH_THREADS"] = threads
            self.task = pickle.loads(task_blob)

        def __call__(self, batch: dict) -> dict:
            np = need("numpy", "the ray engine")
            kv = need("ray", "the ray engine").experimental.internal_kv
            try:  # a unit failed for good elsewhere: start nothing more
                outs = [pickle.dumps(x, protocol=5) for x in apply_units(
                    lambda b: self.task(pickle.loads(b)), list(batch["unit"]), in_flight,
                    lambda: kv._internal_kv_exists(stop_key))]  # fmt: skip
            except StagebenchError as exc:  # its words travel as data: Ray's wrapping cannot lose them
                kv._internal_kv_put(stop_key, b"1")
                return {"i": batch["i"][:1], "out": np.array([pickle.dumps(_WorkerError(str(exc)), protocol=5)], dtype=object)}
            return {"i": batch["i"][: len(outs)], "out": np.array(outs, dtype=object)}

    return StagebenchWorker


class _WorkerError:
    """A stagebench error a unit raised on a Ray worker, sent back as the unit's result: every Ray
    version wraps a task's exception differently (``RayTaskError``, a ``UserCodeException`` with no
    cause), so the one line is carried as data and raised again here, word for word."""

    def __init__(self, message: str) -> None:
        self.message = message


def _root_cause(exc: BaseException) -> BaseException:
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, StagebenchError):
            return cur
        cur = getattr(cur, "cause", None) or cur.__cause__
    return exc


#: what Ray says, anywhere in a failure's chain, when the cluster or a node went away under a run
_LOST = ("owner has died", "node has crashed", "node died", "raylet", "gcs", "connection to the cluster",
         "failed to connect", "cluster was lost", "ray stop", "the driver is disconnected",
         "cancelled before it started running")
#: ... and when the driver's and the cluster's authentication do not match
#: (an actor "cancelled before it started running" is what `ray stop` mid-stage leaves, 4 times in 8; a
#: driver whose token the cluster's workers cannot answer is named before any stage: check_workers_answer)
_AUTH = ("invalidauthtoken", "authentication", "auth token", "unauthenticated")


def _chain(exc: BaseException) -> list[BaseException]:
    """An exception and its causes (Ray's ``cause`` attribute, then Python's own links), each once."""
    chain, seen, cur = [], set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = getattr(cur, "cause", None) or cur.__cause__ or cur.__context__
    return chain


def ray_failure(desc: str, exc: BaseException, cluster: str = "the Ray cluster",
                kind: Literal["lost", "auth", "worker"] = "worker") -> str:  # fmt: skip
    """One line for a Ray failure under a stage, naming what it is (``kind``: :func:`failure_kind`):
    the cluster (or a node) lost, an authentication mismatch between driver and cluster, or a worker
    that died; each says that the same command resumes (every finished stage is in the cache). Ray's
    own tracebacks stay in the exception chain (``--verbose`` prints it), not on the screen."""
    chain = _chain(exc)
    last = str(chain[-1]).strip().splitlines()
    detail = f"{type(chain[-1]).__name__}: {last[-1][:200] if last else ''}"
    resume = "nothing of this stage was written; the same command resumes (finished stages come from the cache)"
    if kind == "lost":
        return (f"{desc}: {cluster}, or a node of it, was lost during the stage (ray stop, or its head or a node "
                f"died; {detail}); {resume}, once the cluster is back")  # fmt: skip
    if kind == "auth":
        return (f"{desc}: the Ray workers never started: the driver's and the cluster's authentication do not match "
                f"(RAY_AUTH_MODE / the token on both sides; {detail}); {resume}")  # fmt: skip
    return f"{desc}: a Ray worker failed: {detail}; {resume}"


def failure_kind(exc: BaseException, answers: bool = True) -> Literal["lost", "auth", "worker"]:
    """What a Ray failure under a stage is (:func:`ray_failure`), from the words and types in its chain;
    ``answers``: whether the cluster still accepts a connection (:func:`_cluster_answers`): one that
    does not is lost, whatever the words."""
    chain = _chain(exc)
    text = " ".join(f"{type(e).__name__} {e}" for e in chain).lower()
    names = {type(e).__name__ for e in chain}
    if not answers:
        return "lost"
    if any(k in text for k in _AUTH) or "AuthenticationError" in names:
        return "auth"
    if names & {"NodeDiedError", "LocalRayletDiedError", "OwnerDiedError", "RaySystemError", "RpcError"} or \
            any(k in text for k in _LOST):  # fmt: skip
        return "lost"
    return "worker"


def _cluster_answers() -> bool:
    """Whether the connected cluster's GCS still accepts a TCP connection (within 2 s)."""
    try:
        address = need("ray", "engine: ray").get_runtime_context().gcs_address
        host, _, port = address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=2.0):
            return True
    except Exception:  # noqa: BLE001 - no address, refused, timed out: it does not answer
        return False


class RayEngine(Engine):
    """Ray Data ``map_batches`` with an actor pool; the cluster is connected by :func:`ray_session`."""

    def __init__(self, params: EngineParams) -> None:
        self.params = params

    @property
    def remote(self) -> bool:
        return True

    def workers(self) -> int:
        ray = need("ray", "engine: ray")
        p = self.params
        if p.num_workers is not None:
            return p.num_workers
        res = ray.cluster_resources()
        n = int(res.get("CPU", 1) // p.num_cpus_per_worker)
        if p.num_gpus_per_worker > 0:
            n = min(n, int(res.get("GPU", 0) // p.num_gpus_per_worker))
        return max(1, n)

    def map(self, task, units, *, desc, unit="unit", sizes=None, threads=1, progress_bar=True):  # threads: across the cluster
        ray = need("ray", "engine: ray")
        np = need("numpy", "the ray engine")
        if not ray.is_initialized():
            raise StagebenchError(f"{desc}: engine ray is not connected (stagebench.runtime.engine.ray_session)")
        p = self.params
        sizes = list(sizes) if sizes is not None else [1] * len(units)
        if not units:
            return []
        n_workers, in_flight, batch_size = ray_shape(self.workers(), threads, p.batch_size, len(units))
        model_threads = str(max(1, int(p.num_cpus_per_worker)))
        rows = [{"i": i, "unit": pickle.dumps(u, protocol=5)} for i, u in enumerate(units)]
        ds = ray.data.from_items(rows, override_num_blocks=math.ceil(len(units) / batch_size))
        stop_key = f"stagebench-stop-{uuid.uuid4().hex}"
        out = ds.map_batches(_worker_class(pickle.dumps(task, protocol=5), model_threads, stop_key, in_flight),
                             batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=n_workers),
                             num_cpus=p.num_cpus_per_worker, num_gpus=p.num_gpus_per_worker or None,
                             batch_format="numpy")  # fmt: skip
        results: list[Any] = [None] * len(units)
        got = np.zeros(len(units), dtype=bool)
        flight = f", {in_flight} in flight on each ({n_workers * in_flight} across the cluster)" if in_flight > 1 else ""
        (log.info if progress_bar else log.debug)("%s: %d %ss in %d units on %d Ray worker(s), %d unit(s) per task%s",
                                                  desc, sum(sizes), unit, len(units), n_workers, batch_size, flight)  # fmt: skip
        t0 = time.perf_counter()
        with progress(sum(sizes), desc, unit, enabled=progress_bar) as bar:
            try:
                for row in out.iter_rows():
                    i = int(row["i"])
                    results[i] = pickle.loads(row["out"])
                    if isinstance(results[i], _WorkerError):
                        raise _Raised(results[i].message)
                    got[i] = True
                    bar.update(sizes[i])
            except _Raised as exc:
                raise StagebenchError(exc.message) from None
            except Exception as exc:
                root = _root_cause(exc)
                if isinstance(root, StagebenchError):
                    raise StagebenchError(str(root)) from exc
                address, source = p.resolved_address()
                where = f"the Ray cluster at {address} (from {source})" if address else "the run's local Ray cluster"
                kind = failure_kind(exc, _cluster_answers())
                raise (ClusterLost if kind == "lost" else RayFailed)(ray_failure(desc, exc, where, kind)) from exc
        ray.experimental.internal_kv._internal_kv_del(stop_key)
        if not got.all():
            raise StagebenchError(f"{desc}: Ray returned {int(got.sum())} of {len(units)} results")
        log.info("%s: done on Ray in %.1fs", desc, time.perf_counter() - t0)
        return results


def make_engine(params: EngineParams | None) -> Engine:
    return RayEngine(params) if params is not None and params.type == "ray" else LocalEngine(params)


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


#: where Ray 2.5x+ reads the token a process sends when ``RAY_AUTH_MODE=token`` (first found wins)
TOKEN_SOURCES = ("$RAY_AUTH_TOKEN", "$RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")


def _token_source() -> str | None:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "$RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"$RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})"
    home = os.path.expanduser("~/.ray/auth_token")
    return "~/.ray/auth_token" if os.path.isfile(home) else None


def check_token_given(where: str) -> None:
    """``RAY_AUTH_MODE=token`` with no token anywhere Ray reads one (:data:`TOKEN_SOURCES`): one line, before
    anything connects (``ray.init`` would fail inside Ray's core, which may end the process before it can say
    why, and the line would blame a lost cluster)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" and _token_source() is None:
        raise StagebenchError(f"{where}: RAY_AUTH_MODE=token, but no token is set here: put the cluster's token in "
                              f"{' or '.join(TOKEN_SOURCES)} (`ray get-auth-token` on the head shows it), or unset "
                              "RAY_AUTH_MODE for a cluster without authentication (docs/scale.md)")  # fmt: skip


def authentication_message(address: str, where: str) -> str:
    """The line for a cluster that refused this process for want of the right token. Ray (2.5x+)
    turns token authentication on for a cluster that ``ray start`` starts where a token exists,
    and a driver sends its token only with ``RAY_AUTH_MODE=token`` (or ``address: auto``, for
    a cluster on this machine): stagebench never sends a token the user did not point it at."""
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    token = _token_source()
    if mode != "token":
        return (f"{where}: the Ray cluster at {address} requires token authentication, and this process sends no "
                f"token (RAY_AUTH_MODE is {mode or 'unset'}, not token); set RAY_AUTH_MODE=token with the "
                f"cluster's token in {' or '.join(TOKEN_SOURCES)}"
                f"{f' (found: {token})' if token else ' (none is set here)'}; the head's token is shown by "
                "`ray get-auth-token` there (docs/scale.md)")  # fmt: skip
    if token is None:
        return (f"{where}: the Ray cluster at {address} requires token authentication and RAY_AUTH_MODE=token, but no "
                f"token is set here: put the cluster's token in {' or '.join(TOKEN_SOURCES)} (`ray get-auth-token` "
                "on the head shows it; docs/scale.md)")  # fmt: skip
    return (f"{where}: the Ray cluster at {address} rejected this process's authentication token (from {token}); "
            "use the head's token (`ray get-auth-token` there; docs/scale.md)")


def _authentication_failure(exc: BaseException) -> bool:
    """Whether a failed connection was refused for its token (Ray's ``AuthenticationError``, or its
    ``InvalidAuthToken`` status inside the connection error ``ray.init`` raises after retrying)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def check_authentication(address: str, where: str) -> None:
    """For a ``host:port`` (GCS) address: ask the cluster for its id the way ``ray.init`` does
    (Ray's own client, with this process's authentication settings), so a cluster that wants a
    token is named as such at once instead of after ``ray.init``'s 20 s of retries. Ray
    versions without that client, and the Ray Client (``ray://``), are left to ``ray.init``."""
    if address.startswith("ray://"):
        return
    client = getattr(getattr(need("ray", "engine: ray"), "_raylet", None), "GcsClient", None)
    if client is None:  # Ray's GCS client is private: a version without it is left to ray.init
        return
    with _native_stderr_aside() as aside:  # Ray's C++ client logs each refused attempt on fd 2
        try:
            client(address=address).cluster_id
        except Exception as exc:
            if _authentication_failure(exc):
                raise StagebenchError(authentication_message(address, where)) from exc
            log.debug("engine ray: GCS pre-check of %s: %s: %s (left to ray.init)", address, type(exc).__name__, exc)
    if aside[0].strip():
        log.debug("engine ray: GCS pre-check of %s said: %s", address, aside[0].strip())


#: seconds the first task on a cluster (a new worker process) may take to answer
WORKER_PROBE_TIMEOUT_S = 60.0


class _Answer:
    def answer(self) -> int:
        return 1


def check_workers_answer(address: str, where: str) -> None:
    """A driver that sends a token to a cluster without authentication is let in (the GCS does
    not check), but the cluster's workers, which send none, cannot call back into the driver:
    every actor dies before it starts (the cause, ``InvalidAuthToken``, is only in the
    raylet's log). One actor, before any stage, names that mismatch in one line (about a second:
    one worker process started)."""
    ray = need("ray", "engine: ray")
    try:
        # an actor, as a stage's workers are (a task runs whatever the mismatch; an actor never starts)
        actor = ray.remote(num_cpus=0)(_Answer).remote()
        ray.get(actor.answer.remote(), timeout=WORKER_PROBE_TIMEOUT_S)
        ray.kill(actor)
    except Exception as exc:
        # an actor that does nothing dies before it answers: the cluster's side cannot call this process
        # back ("cancelled before it started running", or "died unexpectedly", as the race goes)
        died = any(isinstance(e, need("ray", "engine: ray").exceptions.RayActorError) for e in _chain(exc))
        if died or any(k in f"{type(exc).__name__} {exc}".lower() for k in _AUTH) or _authentication_failure(exc):
            raise StagebenchError(f"{where}: this process sends a token (RAY_AUTH_MODE=token), but the Ray cluster at "
                                  f"{address} does not use token authentication, so its workers cannot answer this "
                                  "process (every actor dies before it starts); unset RAY_AUTH_MODE here, or "
                                  "start the cluster with RAY_AUTH_MODE=token (docs/scale.md)") from exc  # fmt: skip
        first = str(exc).strip().splitlines()
        raise StagebenchError(f"{where}: the Ray cluster at {address} accepted this process, but its first task "
                              f"failed ({type(exc).__name__}: {first[0][:200] if first else ''})") from exc  # fmt: skip


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


@contextmanager
def _native_stderr_aside() -> Iterator[list[str]]:
    """Point file descriptor 2 at a temporary file for the duration (what native code writes
    there, not Python's ``sys.stderr``), and hand back what was written, once restored."""
    sys_stderr_fd = 2
    saved = os.dup(sys_stderr_fd)
    said: list[str] = []
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), sys_stderr_fd)
        try:
            yield said
        finally:
            os.dup2(saved, sys_stderr_fd)
            os.close(saved)
            f.seek(0)
            said.append(f.read().decode("utf-8", "replace"))


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
        if _authentication_failure(exc):
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


__all__ = ["ClusterLost", "Engine", "EngineParams", "LocalEngine", "RayEngine", "RayFailed", "authentication_message", "check_authentication",
           "connect", "make_engine", "probe", "new_ray_log", "put_ray_output_aside", "ray_output_log", "ray_session"]
