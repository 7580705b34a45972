"""The engine setting (stagebench.runtime.engine): parsed and checked at load, top level / per stage /
--engine; the local engine; the placement of models on Ray workers with GPUs. The Ray runs
themselves are in tests/runtime/test_ray_engine.py."""

from __future__ import annotations

import os
import time

import pytest

from stagebench.config import parse_config
from stagebench.runtime.cluster.session import ray_session
from stagebench.runtime.cluster.workers import make_engine
from stagebench.runtime.devices import autocast, autocast_dtype, place, weights_dtype
from stagebench.runtime.engine import EngineParams, LocalEngine
from stagebench.errors import ConfigError, StagebenchError
from stagebench.stages.dense import DenseParams, DenseStage
from stagebench.stages.llm_rerank import LLMRerankParams, LLMRerankStage
from stagebench.stages.rerank import CrossEncoderParams, CrossEncoderStage
from tests.conftest import esci_config, stagebench_cli


def cfg(engine=None, dense_engine=None, bm25_engine=None) -> dict:
    stages = [{"name": "bm25", "type": "bm25"}, {"name": "dense", "type": "dense"},
              {"name": "ce", "type": "cross_encoder", "inputs": ["bm25"]}]  # fmt: skip
    if dense_engine is not None:
        stages[1]["engine"] = dense_engine
    if bm25_engine is not None:
        stages[0]["engine"] = bm25_engine
    raw = {"name": "t", "dataset": {"loader": "esci", "path": "x"}, "stages": stages}
    if engine is not None:
        raw["engine"] = engine
    return raw


def engines(config) -> dict[str, EngineParams]:
    return {sc.name: sc.engine for sc in config.stages}


def test_default_is_local_and_a_top_level_engine_applies_to_every_stage():
    assert {e.type for e in engines(parse_config(cfg())).values()} == {"local"}
    c = parse_config(cfg({"type": "ray", "num_workers": 3, "batch_size": 2}))
    assert all(e.type == "ray" and e.num_workers == 3 and e.batch_size == 2 for e in engines(c).values())
    assert c.ray_engine().num_workers == 3
    assert parse_config(cfg("ray")).engine.type == "ray"


def test_a_stage_overrides_the_top_level_and_inherits_its_settings_of_the_same_type():
    c = parse_config(cfg({"type": "ray", "num_workers": 3}, dense_engine={"num_gpus_per_worker": 0.5}))
    e = engines(c)
    assert e["dense"].num_workers == 3 and e["dense"].num_gpus_per_worker == 0.5 and e["dense"].gpus
    assert e["ce"].num_gpus_per_worker == 0 and not e["ce"].gpus
    e = engines(parse_config(cfg({"type": "ray", "num_workers": 3}, dense_engine="local")))
    assert e["dense"].type == "local" and e["ce"].type == "ray"
    e = engines(parse_config(cfg(None, dense_engine={"type": "ray", "num_workers": 2})))
    assert e["dense"].type == "ray" and e["dense"].num_workers == 2 and e["ce"].type == "local"


def test_the_command_line_engine_puts_every_stage_on_it():
    c = parse_config(cfg({"type": "ray", "num_workers": 3}, dense_engine="local"), engine="local")
    assert {e.type for e in engines(c).values()} == {"local"} and c.ray_engine() is None
    c = parse_config(cfg({"type": "ray", "num_workers": 3}), engine="ray")
    assert {e.num_workers for e in engines(c).values()} == {3}  # the config's ray settings are kept
    c = parse_config(cfg(), engine="ray")
    assert {(e.type, e.num_workers) for e in engines(c).values()} == {("ray", None)}


@pytest.mark.parametrize("raw, message", [
    (cfg({"type": "local", "num_workers": 2}), "engine.num_workers: applies to engine type ray"),
    (cfg({"type": "spark"}), "engine.type"),
    (cfg(5), "engine: expected local, ray or a mapping"),
    (cfg({"type": "ray", "num_workers": 0}), "engine.num_workers"),
    (cfg({"type": "ray", "num_gpus_per_worker": -1}), "engine.num_gpus_per_worker"),
    (cfg({"type": "ray", "address": "auto", "local_cpus": 2}), "engine.local_cpus: sizes a local cluster"),
    (cfg({"type": "ray", "colour": 1}), "engine.colour: unknown key"),
    (cfg("ray", bm25_engine="ray"), "stages[0] (bm25).engine: a bm25 stage runs in the driver process"),
    (cfg({"type": "ray", "address": "auto"}, dense_engine={"address": "10.0.0.1:6379"}),
     "stages[1] (dense).engine.address: one run uses one Ray cluster"),
])  # fmt: skip
def test_engine_settings_that_cannot_make_sense_fail_at_load(raw, message):
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert message in str(e.value)


def test_the_local_engine_maps_in_order_in_this_process():
    seen = []

    def task(u):
        seen.append(u)
        return u * 10

    eng = make_engine(None)
    assert isinstance(eng, LocalEngine) and not eng.remote
    assert eng.map(task, [3, 1, 2], desc="t", sizes=[1, 2, 3]) == [30, 10, 20] and seen == [3, 1, 2]
    with ray_session(None):  # local: nothing to connect
        pass
    with ray_session(EngineParams()):
        pass


def test_a_malformed_address_is_one_line():
    from stagebench.runtime.cluster.session import probe

    with pytest.raises(StagebenchError, match="engine.address: 'somewhere' is not auto, host:port"):
        probe("somewhere", "engine.address")


def test_models_on_ray_workers_with_gpus_are_placed_on_their_gpu_whatever_the_driver_has():
    ray_gpu = EngineParams(type="ray", num_gpus_per_worker=1)
    dense = DenseStage("d", DenseParams(), ray_gpu)  # the bundled MiniLM: a torch model
    pl = dense.placement()
    assert (pl.device, pl.precision) == ("cuda:0", "fp32") and "num_gpus_per_worker" in pl.why
    assert dense.identity()["device"] == "cuda"  # keyed as the workers compute
    assert DenseStage("d", DenseParams(precision="bf16"), ray_gpu).placement().precision == "bf16"
    with pytest.raises(StagebenchError, match="int8 .* runs on the CPU only"):
        DenseStage("d", DenseParams(precision="int8"), ray_gpu).placement()
    ce = CrossEncoderStage("c", CrossEncoderParams(), ray_gpu)  # the bundled INT8 ONNX cross-encoder
    assert (ce.placement().device, ce.placement().precision) == ("cuda:0", "fp32")  # its weights dequantized on GPUs
    # an explicit cpu device stays on the CPU; so does every stage without GPU workers
    assert DenseStage("d", DenseParams(device="cpu"), ray_gpu).placement().device == "cpu"
    assert DenseStage("d", DenseParams(), EngineParams(type="ray")).placement().device == "cpu"


def test_auto_on_ray_gpu_workers_computes_in_fp32_for_every_model_stage_as_its_placement_says():
    """precision: auto on Ray workers holding GPUs: every model stage (dense, cross-encoder, an LLM reranker in
    process) is placed at fp32 and computes at fp32 - no autocast, fp32 weights - as the placement it is keyed
    and logged by says (fp16 is batch-dependent); bf16 and fp16 asked for run autocast at them, the LLM's
    weights in half precision on the GPU. No GPU here: what the workers would run is read from the one
    mechanism every torch model runs through (autocast_dtype, weights_dtype)."""
    import torch

    ray_gpu = EngineParams(type="ray", num_gpus_per_worker=1)
    llm = LLMRerankStage("l", LLMRerankParams(), ray_gpu)
    placed = {"dense": DenseStage("d", DenseParams(), ray_gpu).placement(),
              "cross_encoder": CrossEncoderStage("c", CrossEncoderParams(), ray_gpu).placement(),
              "llm": llm.backend().placement}
    for what, pl in placed.items():
        assert (pl.device, pl.precision) == ("cuda:0", "fp32"), what
        assert autocast_dtype(pl) is None and weights_dtype(pl) == torch.float32, what
    assert llm.identity()["llm"]["precision"] == "fp32"  # keyed as it computes
    for asked, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        pl = LLMRerankStage("l", LLMRerankParams(precision=asked), ray_gpu).backend().placement
        assert (pl.precision, autocast_dtype(pl), weights_dtype(pl)) == (asked, dtype, dtype)
        pl = DenseStage("d", DenseParams(precision=asked), ray_gpu).placement()
        assert (pl.precision, autocast_dtype(pl)) == (asked, dtype)
    cpu_bf16 = LLMRerankStage("l", LLMRerankParams(device="cpu", precision="bf16"), ray_gpu).backend().placement
    assert weights_dtype(cpu_bf16) == torch.float32 and autocast_dtype(cpu_bf16) == torch.bfloat16
    ctx = autocast(cpu_bf16)  # the context every torch model runs in: on this CPU, live at the placement's dtype
    assert ctx._enabled and ctx.fast_dtype == torch.bfloat16
    assert not autocast(place("cpu", "fp32", "torch", "t"))._enabled


class _Listener:
    """A real TCP server on 127.0.0.1 that reads a connection's first bytes, answers ``reply`` and
    closes it (``b""``: closes it without a word)."""

    def __init__(self, reply):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply, self.got = reply, b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                self.got = conn.recv(64)
                conn.sendall(self.reply)

    def close(self):
        self.sock.close()


#: an HTTP/2 server's first frame: an empty SETTINGS frame (length 0, type 4, flags 0, stream 0)
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@pytest.mark.parametrize("prefix", ["", "ray://"])
def test_the_probe_lets_a_grpc_server_through_and_names_what_else_answers(prefix, monkeypatch):
    from stagebench.runtime.cluster.session import _H2_PREFACE, probe

    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    grpc = _Listener(SETTINGS)
    try:
        probe(f"{prefix}127.0.0.1:{grpc.port}", "engine.address")  # a gRPC server's handshake: let through
        assert grpc.got.startswith(_H2_PREFACE[:24])
    finally:
        grpc.close()
    http1 = _Listener(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        with pytest.raises(StagebenchError, match=r"^engine.address: .* answers, but not as a Ray cluster does \(no gRPC "
                                                  r"handshake: b'HTTP/1.1 '\); check the address and port"):  # fmt: skip
            probe(f"{prefix}127.0.0.1:{http1.port}", "engine.address")
    finally:
        http1.close()
    closing = _Listener(b"")
    try:
        with pytest.raises(StagebenchError, match="no gRPC handshake: it closed the connection"):
            probe(f"127.0.0.1:{closing.port}", "$RAY_ADDRESS")
    finally:
        closing.close()
    # with TLS only the connection is tried: what answers is not read
    monkeypatch.setenv("RAY_USE_TLS", "1")
    http1 = _Listener(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        probe(f"127.0.0.1:{http1.port}", "engine.address")
    finally:
        http1.close()


def test_the_probe_names_an_address_where_nothing_listens_and_malformed_ones():
    import socket

    from stagebench.runtime.cluster.session import probe

    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(StagebenchError, match=rf"^\$RAY_ADDRESS: no Ray cluster answers at 127.0.0.1:{port} \("):
        probe(f"127.0.0.1:{port}", "$RAY_ADDRESS")
    for bad in ("somewhere", "host:", ":6379", "host:port", "ray://host"):
        with pytest.raises(StagebenchError, match=rf"^engine.address: '{bad}' is not auto, host:port or ray://host:port$"):
            probe(bad, "engine.address")


def test_make_engine_picks_the_engine_the_params_name():
    from stagebench.runtime.cluster.workers import RayEngine

    ray = EngineParams(type="ray", num_workers=3)
    assert isinstance(make_engine(ray), RayEngine) and make_engine(ray).params is ray
    local = EngineParams(batch_size=4)
    assert isinstance(make_engine(local), LocalEngine) and make_engine(local).params is local
    assert isinstance(make_engine(None), LocalEngine) and make_engine(None).params == EngineParams()


def test_ray_auth_mode_token_without_a_token_is_named_before_anything_connects(tmp_path, tiny_synthetic):
    """Issue 80: with RAY_AUTH_MODE=token and no token in $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token, the run stops with one line naming where a token goes - before a watched child or a
    cluster starts (ray.init failed inside Ray's core, and the line blamed a lost cluster)."""
    cfg = esci_config(tmp_path, tiny_synthetic, "  - {name: bm25, type: bm25}\n", name="tok")
    cfg.write_text(cfg.read_text() + "engine: ray\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"RAY_AUTH_MODE": "token",
                                                                               "HOME": str(tmp_path)}  # fmt: skip
    t0 = time.monotonic()
    r = stagebench_cli("run", cfg, env=env)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [
        f"stagebench: error: {cfg}: engine: RAY_AUTH_MODE=token, but no token is set here: put the cluster's token in "
        "$RAY_AUTH_TOKEN or $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (`ray get-auth-token` on the head shows it), or "
        "unset RAY_AUTH_MODE for a cluster without authentication (docs/scale.md)"], r.stderr[-3000:]
    assert took < 15 and not (tmp_path / "tok").exists()
