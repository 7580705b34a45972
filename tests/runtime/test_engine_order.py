"""Both engines return one result per unit, in the units' order, whatever order the units finish
in: a task whose early units take longest (so they finish last) on threads here and on a real
local Ray cluster's actors; and a task that waits on a server keeps as many requests in flight at
that server as it asks (an LLM stage's ``concurrency``), in one process and across Ray's workers."""

from __future__ import annotations

import time

import pytest

import json
import urllib.request

from stagebench.llm.http import OpenAIBackend
from stagebench.llm.request import ChatRequest
from stagebench.errors import StagebenchError
from stagebench.runtime.cluster.session import ray_session
from stagebench.runtime.cluster.workers import RayEngine, ray_shape
from stagebench.runtime.engine import EngineParams, LocalEngine, apply_units
from tests.llm.plain_server import PlainServer

UNITS = list(range(8))


class SlowFirst:
    """Unit ``u`` takes longer the earlier it comes; its result names it."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.finished: list[int] = []

    def __call__(self, u: int) -> str:
        time.sleep((len(UNITS) - u) * self.step)
        self.finished.append(u)
        return f"unit {u}"


def test_threaded_results_follow_their_units_whatever_order_they_finish_in():
    task = SlowFirst(0.1)
    out = LocalEngine().map(task, UNITS, desc="t", threads=len(UNITS))
    assert out == [f"unit {u}" for u in UNITS]
    assert task.finished != UNITS  # they did finish out of order


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time on this machine
def test_results_follow_their_units_whatever_order_they_finish_in():
    pytest.importorskip("ray", reason="engine: ray needs the ray extra (make test installs it)")
    params = EngineParams(type="ray", num_workers=2, batch_size=1, local_cpus=2)
    with ray_session(params), PlainServer("slow", delay=0.5) as server:
        out = RayEngine(params).map(SlowFirst(0.4), UNITS, desc="t")
        asked = RayEngine(params).map(Ask(server.url), UNITS, desc="t", threads=4)
        assert asked == [f"ok {u}" for u in UNITS] and len(server.posts) == 8
        # concurrency 4 on 2 workers: 2 requests in flight on each, 4 at the server (each worker one at a time: 2)
        assert server.most_in_flight == 4
        # as many units as the concurrency (issue 94: 4 queries): every one asked at once, none queued behind another
        with PlainServer("slow", delay=2.0) as slow:
            t0 = time.monotonic()
            assert RayEngine(params).map(Ask(slow.url), UNITS[:4], desc="t", threads=4) == [f"ok {u}" for u in UNITS[:4]]
            took = time.monotonic() - t0
        assert slow.most_in_flight == 4 and len(slow.posts) == 4, (slow.most_in_flight, took)
        # a busy server (one request at a time) asked by both workers' copies of one backend: each holds 2 in
        # flight and hears the other's answers through the cluster's notes; busy is not hung (issue 94)
        with PlainServer("serial", delay=0.3) as busy:
            engine = RayEngine(params)
            backend = OpenAIBackend(busy.url, "plain-model", timeout=1.2, retries=3, backoff=0.1, concurrency=4)
            notes = engine.shared_notes()
            backend.shared_by(engine.processes(4, len(UNITS)), notes)
            assert backend.sharers == 2
            said = engine.map(Complete(backend), UNITS, desc="t", threads=4)
            assert notes.latest() is not None  # the workers noted their answers where each other reads them
            notes.forget()
        assert said == ["ok"] * len(UNITS) and len(busy.posts) >= len(UNITS)
        # a unit that fails for good while others wait beside it on the same worker: they are told to stop, and
        # their stopping is not the map's error - the failed unit's own words are (issue 94: Ray's wrapping was)
        with pytest.raises(StagebenchError, match=r"^unit 0 failed for good$"):
            RayEngine(params).map(FailsWhileOthersWait(), UNITS[:4], desc="t", threads=4)
    assert out == [f"unit {u}" for u in UNITS]


class FailsWhileOthersWait:
    """Unit 0 fails for good after a moment; the others wait until told to stop (``cancel``), then raise."""

    def __init__(self) -> None:
        import threading

        self.stop = threading.Event()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def cancel(self) -> None:
        self.stop.set()

    def __call__(self, u: int) -> str:
        if u == 0:
            time.sleep(0.5)
            raise StagebenchError("unit 0 failed for good")
        if not self.stop.wait(60):
            return f"unit {u}"
        raise RuntimeError(f"unit {u} stopped")


class Complete:
    """Unit ``u``: one chat completion through the backend (as an LLM stage's query asks it)."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def __call__(self, u: int) -> str:
        return self.backend.complete(ChatRequest((("user", str(u)),), 4, 0.0, 0)).text


class Ask:
    """Unit ``u``: one completion request to a real server (as an LLM stage's query asks)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, u: int) -> str:
        body = json.dumps({"model": "plain-model", "messages": [{"role": "user", "content": str(u)}]}).encode()
        req = urllib.request.Request(f"{self.url}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return f"{json.loads(r.read())['choices'][0]['message']['content']} {u}"


def test_a_task_waiting_on_a_server_keeps_its_requests_in_flight_there():
    with PlainServer("slow", delay=0.3) as server:
        assert LocalEngine().map(Ask(server.url), UNITS, desc="t", threads=3) == [f"ok {u}" for u in UNITS]
        assert server.most_in_flight == 3
        assert apply_units(Ask(server.url), UNITS[:2], lambda: False) == ["ok 0", "ok 1"]
        assert apply_units(Ask(server.url), UNITS, lambda: True) == [] and len(server.posts) == 10  # stopped: none
    # across Ray's workers: at most ``concurrency`` in flight over the cluster, one-unit tasks, several at once
    # on each worker (its threads), a few units spread over every worker
    assert ray_shape(2, 4, 4, 8) == (2, 2, 1) and ray_shape(2, 4, 1, 4) == (2, 2, 1)
    assert ray_shape(8, 4, 1, 8) == (4, 1, 1) and ray_shape(3, 4, 1, 8) == (3, 1, 1)  # 3 in flight, never 6
    assert ray_shape(2, 4, 1, 1) == (1, 4, 1)  # one unit: one worker
    assert ray_shape(2, 1, 4, 8) == (2, 1, 4) and ray_shape(4, 1, 4, 3) == (1, 1, 4)  # no server: one unit at a time


class FailsFirst:
    """Unit 0 fails for good at once; every other unit records when it started, then takes a while."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, u: int) -> str:
        from stagebench.errors import StagebenchError

        with open(self.log, "a") as f:
            f.write(f"{u} {'fail' if u == 0 else 'start'} {time.time()}\n")
        if u == 0:
            time.sleep(0.3)
            with open(self.log, "a") as f:
                f.write(f"0 failed {time.time()}\n")
            raise StagebenchError("unit 0 failed for good")
        time.sleep(0.6)
        return f"unit {u}"


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_no_unit_starts_on_ray_after_one_failed_for_good(tmp_path):
    """Issue 71 (``failed_calls: stop`` on Ray): Ray Data hands a freed worker the next batch; a
    unit that failed for good marks the run stopped, and no worker starts a unit after it."""
    pytest.importorskip("ray", reason="engine: ray needs the ray extra (make test installs it)")
    from stagebench.errors import StagebenchError

    log = tmp_path / "units.log"
    params = EngineParams(type="ray", num_workers=2, batch_size=1, local_cpus=2)
    with ray_session(params):
        with pytest.raises(StagebenchError, match="unit 0 failed for good"):
            RayEngine(params).map(FailsFirst(str(log)), list(range(10)), desc="t")
        time.sleep(2.0)  # whatever the other worker would still start
    rows = [line.split() for line in log.read_text().splitlines()]
    failed = next(float(t) for u, what, t in rows if what == "failed")
    after = [u for u, what, t in rows if what == "start" and float(t) > failed + 0.05]
    assert after == [], rows  # without the mark: the units after it kept starting
