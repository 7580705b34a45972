"""The Ray engine: Ray Data ``map_batches`` over an actor pool, each actor holding the stage's task
(so its model) once and applying it to the units of each batch - ``in_flight`` at a time for a task
that waits on a server (an LLM stage's ``concurrency``, held across the cluster: :func:`ray_shape`).
Results come back in the units' order; a unit's stagebench error travels back as data, word for word,
and stops every worker from starting another unit. :func:`make_engine` picks the engine a stage's
``engine:`` names."""

from __future__ import annotations

import logging
import math
import os
import pickle
import time
import uuid
from typing import Any

from stagebench.errors import StagebenchError
from stagebench.optional import need
from stagebench.runtime.cluster.failures import (cluster_answers, ClusterLost, failure_kind, ray_failure, RayFailed,
                                                 root_cause)  # fmt: skip
from stagebench.runtime.engine import apply_units, Engine, EngineParams, LocalEngine
from stagebench.runtime.progress import progress

log = logging.getLogger("stagebench")


class _Raised(Exception):
    """A unit's stagebench error that came back from a Ray worker (:class:`_WorkerError`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def ray_shape(workers: int, in_flight: int, batch_size: int, units: int) -> tuple[int, int, int]:
    """How a map spreads over the Ray workers: (workers, units in flight on each, units per task).
    A task that waits on a server (``in_flight`` > 1: an LLM stage's ``concurrency``) keeps at most
    ``in_flight`` units in flight across the cluster, as it does in one process: at most that many
    workers, each running ``in_flight // workers`` tasks of one unit at once (threads of the actor), and
    handed the next unit as soon as one of them ends - so a worker never waits behind another's queue,
    and a few units are spread over every worker. Any other task: one task of ``batch_size`` units at a
    time on each worker."""
    if in_flight <= 1:
        return max(1, min(workers, math.ceil(units / batch_size))), 1, batch_size
    n = max(1, min(workers, in_flight, units))
    return n, in_flight // n, 1


def _worker_class(task_blob: bytes, threads: str, stop_key: str) -> type:
    """The Ray Data actor class: unpickles the task once per actor (the task loads its model on
    first use), then applies it to the units of each batch, one after another (:func:`apply_units`;
    a server's units come one a call, several calls at once on the actor's threads: :func:`ray_shape`). The task travels inside the class (by value), not as a constructor
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
                    lambda b: self.task(pickle.loads(b)), list(batch["unit"]),
                    lambda: kv._internal_kv_exists(stop_key))]  # fmt: skip
            except StagebenchError as exc:  # its words travel as data: Ray's wrapping cannot lose them
                kv._internal_kv_put(stop_key, b"1")
                cancel = getattr(self.task, "cancel", None)
                if callable(cancel):  # the units in flight on this actor's other threads are told to stop
                    cancel()
                return {"i": batch["i"][:1], "out": np.array([pickle.dumps(_WorkerError(str(exc)), protocol=5)], dtype=object)}
            except Exception:
                if kv._internal_kv_exists(stop_key):  # stopped because a unit failed for good: that unit's error is the map's
                    return {"i": batch["i"][:0], "out": np.array([], dtype=object)}
                raise
            return {"i": batch["i"][: len(outs)], "out": np.array(outs, dtype=object)}

    return StagebenchWorker


class _WorkerError:
    """A stagebench error a unit raised on a Ray worker, sent back as the unit's result: every Ray
    version wraps a task's exception differently (``RayTaskError``, a ``UserCodeException`` with no
    cause), so the one line is carried as data and raised again here, word for word."""

    def __init__(self, message: str) -> None:
        self.message = message


class ClusterNotes:
    """:class:`~stagebench.runtime.engine.AnswerNotes` in the cluster's key-value store: every worker of a map
    reads and writes one key (the latest answer's wall-clock time and seconds), a write an answer."""

    def __init__(self, key: str) -> None:
        self.key = key

    def answered(self, seconds: float) -> None:
        kv = need("ray", "the ray engine").experimental.internal_kv
        kv._internal_kv_put(self.key, f"{time.time()!r} {seconds!r}".encode())

    def latest(self) -> tuple[float, float] | None:
        kv = need("ray", "the ray engine").experimental.internal_kv
        got = kv._internal_kv_get(self.key)
        if not got:
            return None
        at, seconds = got.decode().split()
        return float(at), float(seconds)

    def forget(self) -> None:
        need("ray", "the ray engine").experimental.internal_kv._internal_kv_del(self.key)


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

    def processes(self, threads: int, units: int) -> int:
        return ray_shape(self.workers(), threads, self.params.batch_size, units)[0]

    def shared_notes(self) -> ClusterNotes:
        return ClusterNotes(f"stagebench-answers-{uuid.uuid4().hex}")

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
        # a server's units: in_flight one-unit tasks at once on each actor, none queued at a busy actor (Ray
        # Data would otherwise queue blocks at the first actor ready while another still starts)
        pool = (ray.data.ActorPoolStrategy(size=n_workers, max_tasks_in_flight_per_actor=in_flight,
                                           max_concurrent_calls_per_actor=in_flight, enable_true_multi_threading=True)
                if in_flight > 1 else ray.data.ActorPoolStrategy(size=n_workers))  # fmt: skip
        out = ds.map_batches(_worker_class(pickle.dumps(task, protocol=5), model_threads, stop_key),
                             batch_size=batch_size, compute=pool, num_cpus=p.num_cpus_per_worker,
                             num_gpus=p.num_gpus_per_worker or None, batch_format="numpy")  # fmt: skip
        results: list[Any] = [None] * len(units)
        got = np.zeros(len(units), dtype=bool)
        flight = (f", {in_flight} in flight on each ({n_workers * in_flight} across the cluster once every worker has "
                  "started; until then the ones started hold theirs)" if in_flight > 1 else "")  # fmt: skip
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
                root = root_cause(exc)
                if isinstance(root, StagebenchError):
                    raise StagebenchError(str(root)) from exc
                address, source = p.resolved_address()
                where = f"the Ray cluster at {address} (from {source})" if address else "the run's local Ray cluster"
                kind = failure_kind(exc, cluster_answers())
                raise (ClusterLost if kind == "lost" else RayFailed)(ray_failure(desc, exc, where, kind)) from exc
        ray.experimental.internal_kv._internal_kv_del(stop_key)
        if not got.all():
            raise StagebenchError(f"{desc}: Ray returned {int(got.sum())} of {len(units)} results")
        log.info("%s: done on Ray in %.1fs", desc, time.perf_counter() - t0)
        return results


def make_engine(params: EngineParams | None) -> Engine:
    return RayEngine(params) if params is not None and params.type == "ray" else LocalEngine(params)


__all__ = ["ClusterNotes", "RayEngine", "make_engine", "ray_shape"]
