"""A unit of a map that takes a while moves its progress bar batch by batch (issue 95): a cross-encoder call
of many pairs and a dense unit of many batches, through the engine every model stage maps its units on,
with the real bundled models. Only the bar is replaced, by one that records its updates."""

from __future__ import annotations

import pytest

import stagebench
from stagebench.runtime import engine as engine_module
from stagebench.runtime.engine import LocalEngine

CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BI = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = [" ".join(["insulated steel bottle", "kids rain boots", "usb c cable"][i % 3] for _ in range(1 + i)) for i in range(8)]


class Recorder:
    def __init__(self, total, desc, unit, enabled=True):
        self.total, self.steps = total, []

    def update(self, n):
        self.steps.append(n)

    def __enter__(self):
        bars.append(self)
        return self

    def __exit__(self, *exc):
        return False


bars: list[Recorder] = []


@pytest.mark.parametrize("role", ["cross_encoder", "bi_encoder"])
def test_a_units_model_batches_move_the_bar_before_the_unit_ends(role, model_variants, monkeypatch):
    monkeypatch.setenv("STAGEBENCH_CACHE", str(model_variants))
    monkeypatch.setattr(engine_module, "progress", Recorder)
    bars.clear()
    if role == "cross_encoder":
        model = stagebench.api.cross_encoder(CE, device="cpu", max_length=64, streams=1)
        task = lambda pairs: model.predict(pairs, 2)  # noqa: E731
        units = [[("steel bottle", t) for t in TEXTS[:6]], [("rain boots", t) for t in TEXTS[6:]]]
    else:
        model = stagebench.api.bi_encoder(BI, device="cpu", max_length=64, streams=1)
        task = model.encode_batches
        units = [[TEXTS[0:2], TEXTS[2:4], TEXTS[4:6]], [TEXTS[6:8]]]
    sizes = [6, 2]
    LocalEngine().map(task, units, desc="probe", unit="pair", sizes=sizes)
    (bar,) = bars
    assert bar.total == 8
    assert bar.steps == [2, 2, 2, 2], bar.steps  # batch by batch, not [6, 2] when each unit ends
