"""Where a stage's work runs: in this process (``local``) or on a Ray cluster (``ray``).

A stage cuts its work into **units** whose composition never depends on the engine: eight model
batches of texts, each run as itself (dense), one ``score_pairs`` call (rerankers), one query's
windows (LLM). It hands the units and a picklable **task** (a callable that loads its model lazily, once) to
:meth:`Engine.map`, which returns one result per unit, in order. The local engine calls the
task in this process (on ``threads`` threads for a task that waits on a server); the Ray
engine (:mod:`stagebench.runtime.cluster`, the wing that holds everything Ray: the workers,
the session, authentication, failures, the watched child) applies the same task to the same
units on an actor pool. Because units and tasks are the same, both engines compute the same
bits (on the same hardware and libraries), and the cache keys do not name the engine: what one
computed, the other reuses. This module imports nothing of Ray.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from stagebench.params import NonNegativeFloat, PositiveFloat, PositiveInt, param
from stagebench.runtime.progress import progress, ticking

log = logging.getLogger("stagebench")

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
    batch_size: PositiveInt = param(4, "ray: units per task: groups of 8 model batches (dense), score_pairs calls (rerankers), "
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


class AnswerNotes(Protocol):
    """What the processes asking one server note of its answers, each seeing every other's: the latest
    answer any of them heard (for the hung-server rule, :mod:`stagebench.llm.http`)."""

    def answered(self, seconds: float) -> None:
        """An answer came, ``seconds`` after its request was sent."""

    def latest(self) -> tuple[float, float] | None:
        """The latest answer noted: (its ``time.time()``, its seconds), or None."""

    def forget(self) -> None:
        """The map is over: the notes are removed."""


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

    def shared_notes(self) -> AnswerNotes | None:
        """A board every process of a :meth:`map` reads and writes (None: one process, nothing to share)."""
        return None

    def processes(self, threads: int, units: int) -> int:
        """How many processes :meth:`map` runs ``units`` units of a task in, ``threads`` in flight across them,
        each with its own copy of the task: a server those units ask is shared by that many clients that do
        not see each other's requests (1 here; the Ray workers that take part on Ray)."""
        return 1


class LocalEngine(Engine):
    def __init__(self, params: EngineParams | None = None) -> None:
        self.params = params or EngineParams()

    def map(self, task, units, *, desc, unit="unit", sizes=None, threads=1, progress_bar=True):
        sizes = list(sizes) if sizes is not None else [1] * len(units)
        with progress(sum(sizes), desc, unit, enabled=progress_bar) as bar:
            if threads <= 1 or len(units) <= 1:
                out = []
                for u, s in zip(units, sizes):
                    with ticking(bar, s) as done:  # a model's batches move the bar inside the unit
                        out.append(task(u))
                        done()
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


class _NotStarted(Exception):
    """A unit the map did not start because an earlier one failed."""


def apply_units(task: Callable[[Any], Any], units: Sequence[Any], stopped: Callable[[], bool]) -> list[Any]:
    """``[task(u) for u in units]`` one after another, no unit started once ``stopped()``: then the units
    done before it (a Ray worker's batch; the map has failed elsewhere and its error is what the driver
    reports). A unit's error is raised."""
    out = []
    for u in units:
        if stopped():
            break
        out.append(task(u))
    return out


__all__ = ["RAY_ONLY", "RECONNECT_ENV", "AnswerNotes", "Engine", "EngineParams", "LocalEngine", "apply_units"]
