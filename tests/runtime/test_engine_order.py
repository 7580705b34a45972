"""Both engines return one result per unit, in the units' order, whatever order the units finish
in: a task whose early units take longest (so they finish last) on threads here and on a real
local Ray cluster's actors."""

from __future__ import annotations

import time

import pytest

from stagebench.runtime.engine import EngineParams, LocalEngine, RayEngine, ray_session

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
    with ray_session(params):
        out = RayEngine(params).map(SlowFirst(0.4), UNITS, desc="t")
    assert out == [f"unit {u}" for u in UNITS]
