"""Device and precision resolution: feature detection, auto choices, refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stagebench.runtime.devices import cpu_features, cpu_has_bf16, gpu_possible, gpu_worker_placement, place, resolve_device
from stagebench.errors import ConfigError, StagebenchError
from stagebench.params import build
from stagebench.stages.dense import DenseParams


#: the CPU classes ``precision: auto`` was decided for (docs/models.md#precision-auto-per-cpu-class), as
#: ``STAGEBENCH_CPU_FEATURES`` writes them (vendor included), and the class each is named as
CPU_CLASSES = {
    "avx2 fma vendor=GenuineIntel": "Intel AVX2",
    "avx2 avx512f avx512_vnni vendor=GenuineIntel": "Intel AVX-512",
    "avx2 avx512f avx512_bf16 avx512_vnni vendor=GenuineIntel": "Intel AVX512-BF16",
    "avx2 avx512f avx512_bf16 amx_bf16 amx_tile vendor=GenuineIntel": "Intel AMX",
    "avx2 avx512f avx512_bf16 avx512_vnni vendor=AuthenticAMD": "AMD AVX512-BF16",
    "avx2 vendor=AuthenticAMD": "AMD AVX2",
    "": "CPU without AVX2",
}


@pytest.mark.parametrize("features", CPU_CLASSES)
def test_auto_is_fp32_on_every_cpu_class_and_says_which_class(monkeypatch, features):
    """bf16 autocast is batch-dependent at bf16 rounding (issue 66); in fixed batch shapes it is invariant but
    measured no faster (issue 96): ``auto`` never picks it on a CPU, whatever the class, for any model role, and
    says why; bf16 asked for is still given."""
    monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", features)
    for role in ("bi_encoder", "cross_encoder", "generator"):
        p = place("cpu", "auto", "torch", "t", role=role)
        assert p.key() == {"device": "cpu", "precision": "fp32"}, (features, role, p)
    why = place("cpu", "auto", "torch", "t").why
    assert why.startswith(f"auto: {CPU_CLASSES[features]}: ") and "bf16 in fixed batch shapes is too, but measured" in why
    # a model's bf16 runs in fixed batch shapes (invariant), and the log says why auto still keeps fp32
    assert "bf16 in fixed batch shapes is too, but measured no faster" in place("cpu", "auto", "torch", "t", role="bi_encoder").why
    assert place("cpu", "bf16", "torch", "t").precision == "bf16"
    assert cpu_has_bf16() == ("bf16" in features)


def test_feature_override(monkeypatch):
    monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", "avx512f, avx512_bf16, amx_bf16")
    assert cpu_features() == {"avx512f", "avx512_bf16", "amx_bf16"} and cpu_has_bf16()
    monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", "")
    assert cpu_features() == frozenset() and place("auto", "auto", "torch", "t").key() == {"device": "cpu", "precision": "fp32"}


def test_onnx_precisions():
    # a dynamically quantized graph (the carriers): on a CPU, per-token INT8 by default (batch-invariant);
    # its own per-batch INT8 only when asked for, said to be batch-dependent; on GPUs, its weights dequantized
    auto = place("cpu", "auto", "onnx-dynamic-int8", "t")
    assert auto.precision == "int8-token" and "batch-invariant" in auto.why
    on_gpu = gpu_worker_placement("auto", "onnx-dynamic-int8", "t")
    assert on_gpu.precision == "fp32" and "dequantized" in on_gpu.why
    assert place("cpu", "int8", "onnx-dynamic-int8", "t").why.endswith("(batch-dependent)")
    assert place("cpu", "int8-token", "onnx-dynamic-int8", "t").precision == "int8-token"
    assert place("cpu", "fp32", "onnx-dynamic-int8", "t").precision == "fp32"
    # an fp32 graph runs as exported, or quantized per token; it has no dynamic INT8 of its own
    assert place("cpu", "auto", "onnx", "t").precision == "fp32"
    assert place("cpu", "int8-token", "onnx", "t").precision == "int8-token"
    with pytest.raises(StagebenchError, match="this graph has none; int8-token quantizes it"):
        place("cpu", "int8", "onnx", "stage ce")
    with pytest.raises(StagebenchError, match="an ONNX model runs at fp32, int8 .* or int8-token; precision bf16 needs a torch"):
        place("cpu", "bf16", "onnx", "stage ce")
    # a dynamic INT8 graph at bf16: its weights dequantized into torch, in fixed batch shapes
    assert "dequantized into torch, bf16 autocast in fixed batch shapes" in place("cpu", "bf16", "onnx-dynamic-int8", "t").why
    with pytest.raises(StagebenchError, match="fp16 is for GPUs"):
        place("cpu", "fp16", "onnx-dynamic-int8", "stage ce")
    with pytest.raises(StagebenchError, match="int8-token is for the encoders"):
        place("cpu", "int8-token", "torch", "stage llm", role="generator")


def test_refusals_name_the_problem():
    with pytest.raises(StagebenchError, match="fp16 is for GPUs"):
        place("cpu", "fp16", "torch", "stage dense")
    with pytest.raises(StagebenchError, match="must be one of"):
        place("cpu", "fp8", "torch", "stage dense")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_that_is_not_there_is_an_error_and_auto_is_the_cpu():
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(StagebenchError, match="no CUDA device is available here"):
        resolve_device("cuda:1")


def test_auto_asks_torch_only_where_a_gpu_could_be(tmp_path):
    """A Linux machine without a GPU driver's device nodes places a model on the CPU without importing torch
    (about 1.5 s of every command); where a node exists, or on another system, torch is asked."""
    assert not gpu_possible("linux", tmp_path)
    for node in ("nvidia0", "nvidiactl", "dxg", "kfd"):
        (tmp_path / node).touch()
        assert gpu_possible("linux", tmp_path), node
        (tmp_path / node).unlink()
    assert gpu_possible("darwin", tmp_path) and gpu_possible("win32", tmp_path)
    if gpu_possible():
        pytest.skip("this machine has a GPU driver's device nodes: auto asks torch here")
    code = ("import sys; from stagebench.runtime.devices import place; "
            "p = place('auto', 'auto', 'onnx-dynamic-int8', 'stage ce'); q = place('cpu', 'auto', 'torch', 'stage dense'); "
            "print(p.device, q.device, 'torch' in sys.modules)")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["cpu", "cpu", "False"], r.stderr


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_cuda_is_found_and_indexed():
    assert resolve_device("auto") == "cuda:0" and resolve_device("cuda") == "cuda:0"
    assert place("cuda", "auto", "torch", "t").precision == "fp32"


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0 "])
def test_device_spec_is_checked_at_load(value):
    with pytest.raises(ConfigError, match="must be auto | cpu | cuda | cuda:N | mps"):
        build(DenseParams, {"device": value}, "stages[1] (dense).params")
    assert build(DenseParams, {"device": "cuda:3"}, "p").device == "cuda:3"


@pytest.mark.slow
def test_auto_is_exactly_fp32_and_bf16_is_keyed_apart(monkeypatch, tiny_synthetic):
    """``auto`` is the fp32 path bit for bit, with or without native bf16; bf16 asked for is keyed apart (what
    its vectors are is tests/models/test_batch_invariance.py's: within bf16's rounding of fp32, unit length)."""
    from stagebench.data.esci import EsciOptions, load_esci
    from stagebench.stages import StageContext
    from stagebench.stages.dense import DenseStage

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ds = load_esci(EsciOptions(path=str(tiny_synthetic), max_queries=20, corpus_scope="judged"))  # a few hundred products
    monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", "")
    auto = DenseStage("d", build(DenseParams, {"top_k": 50}, "p"))
    fp32 = DenseStage("d", build(DenseParams, {"top_k": 50, "precision": "fp32"}, "p"))
    assert auto.placement().precision == "fp32" and auto.identity() == fp32.identity()
    assert auto(StageContext(ds), []) == fp32(StageContext(ds), [])
    monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", "avx512f amx_bf16")
    assert DenseStage("d", build(DenseParams, {"top_k": 50}, "p")).identity() == fp32.identity()  # auto: fp32 on AMX too
    bf16 = DenseStage("d", build(DenseParams, {"top_k": 50, "precision": "bf16"}, "p"))
    assert bf16.placement().precision == "bf16" and bf16.identity() != fp32.identity()


def test_a_precision_an_onnx_carrier_cannot_run_fails_in_preflight():
    """The bundled cross-encoder at bf16 runs its INT8 weights dequantized in torch, in fixed batch shapes
    (keyed apart: the variant's and the shapes' code); the bundled bi-encoder carrier (bge-small) has no
    torch form, and says so before anything runs."""
    from stagebench.stages.dense import DenseParams, DenseStage
    from stagebench.stages.rerank import CrossEncoderParams, CrossEncoderStage

    st = CrossEncoderStage("ce", build(CrossEncoderParams, {"precision": "bf16", "device": "cpu"}, "p"))
    st.preflight()
    ran = st.what_runs()
    assert (ran["variant"], ran["runtime"], ran["precision"]) == ("dequantized-torch", "torch", "bf16")
    assert {"variant_code", "batching"} <= set(st.identity())
    bi = DenseStage("d", build(DenseParams, {"model": "BAAI/bge-small-en-v1.5", "precision": "bf16", "device": "cpu"}, "p"))
    with pytest.raises(StagebenchError, match="precision bf16 runs an INT8 ONNX graph's weights dequantized in torch, "
                                              "which is built for a BERT cross-encoder's graph"):  # fmt: skip
        bi.preflight()
    ok = CrossEncoderStage("ce", build(CrossEncoderParams, {}, "p"))
    ok.preflight()
    assert ok.identity()["precision"] == "int8-token" and ok.identity()["device"] == "cpu"
    assert "batching" not in ok.identity()


def test_streams_are_one_a_core_for_onnxruntime_on_a_cpu_and_refused_above_one_for_torch(monkeypatch):
    """``streams: auto`` is one batch a core for an ONNX model on a CPU (each on one thread), one on a
    GPU and for torch; the manifest's placement says so; a torch path asked for two is refused before
    anything runs."""
    from stagebench.runtime.devices import stream_shape
    from stagebench.stages.dense import DenseParams, DenseStage

    monkeypatch.setenv("STAGEBENCH_THREADS", "6")
    assert stream_shape("auto", "cpu", "onnxruntime") == (6, 1)
    assert stream_shape("auto", "cuda", "onnxruntime") == (1, 6)
    assert stream_shape("auto", "cpu", "torch") == (1, 6)
    assert stream_shape(4, "cpu", "onnxruntime") == (4, 1) and stream_shape(2, "cpu", "onnxruntime") == (2, 3)
    for cores, shape in (("8", (8, 1)), ("12", (6, 2)), ("16", (8, 2)), ("33", (6, 5))):  # a dense unit's 8 batches at most
        monkeypatch.setenv("STAGEBENCH_THREADS", cores)
        assert stream_shape("auto", "cpu", "onnxruntime") == shape
    monkeypatch.setenv("STAGEBENCH_THREADS", "6")
    onnx = DenseStage("d", build(DenseParams, {"device": "cpu"}, "p"))
    onnx.preflight()
    assert onnx.what_runs()["streams"] == "6 x 1 thread" and onnx.what_runs()["runtime"] == "onnxruntime"
    torch_path = DenseStage("d", build(DenseParams, {"device": "cpu", "precision": "bf16", "streams": 2}, "p"))
    with pytest.raises(StagebenchError, match=r"stage d: params.streams: 2: .* runs on torch at bf16"):
        torch_path.preflight()
    one = DenseStage("d", build(DenseParams, {"device": "cpu", "precision": "bf16", "streams": 1}, "p"))
    one.preflight()
    assert one.what_runs()["streams"] == "1 x 6 threads"
    with pytest.raises(ConfigError, match="streams"):
        build(DenseParams, {"streams": 0}, "p")


def test_llm_device_and_precision_belong_to_the_in_process_backend(tmp_path):
    from stagebench.config import parse_config

    raw = {"name": "t", "dataset": {"loader": "beir", "path": str(tmp_path)},
           "stages": [{"name": "b", "type": "bm25"},
                      {"name": "l", "type": "llm_rerank", "inputs": ["b"],
                       "params": {"backend": "openai", "base_url": "http://127.0.0.1:1/v1", "device": "cuda"}}]}  # fmt: skip
    with pytest.raises(ConfigError, match="params.device: applies to backend transformers"):
        parse_config(raw)


def test_the_model_a_placement_runs_depends_on_the_role_and_the_device():
    """A torch bi-encoder or cross-encoder at fp32 runs its ONNX export on a CPU (the same fp32 arithmetic,
    measured faster there) and itself on a GPU; a generator's fp32 stays in torch; an INT8 ONNX
    cross-encoder's fp32 runs in torch on a GPU (no onnxruntime CUDA build needed)."""
    from stagebench.models.variants import variant_recipe
    from stagebench.runtime.devices import Placement

    cpu, gpu = Placement("cpu", "fp32", "t"), Placement("cuda:0", "fp32", "t")
    assert variant_recipe("torch", cpu, "bi_encoder") == "export"
    assert variant_recipe("torch", gpu, "bi_encoder") is None
    assert variant_recipe("torch", cpu, "cross_encoder") == "export"
    assert variant_recipe("torch", gpu, "cross_encoder") is None
    assert variant_recipe("torch", cpu, "generator") is None
    assert variant_recipe("torch", Placement("cpu", "bf16", "t"), "bi_encoder") is None
    assert variant_recipe("torch", Placement("cpu", "int8-token", "t"), "bi_encoder") == "export+per-channel+per-token"
    # a dynamic INT8 ONNX cross-encoder at fp32: dequantized in onnxruntime on a CPU, in torch on a GPU where its
    # graph converts (torch_ok), and in onnxruntime for a bi-encoder or a graph that does not
    int8 = "onnx-dynamic-int8"
    assert variant_recipe(int8, cpu, "cross_encoder", torch_ok=True) == "dequantized"
    assert variant_recipe(int8, gpu, "cross_encoder", torch_ok=True) == "dequantized-torch"
    assert variant_recipe(int8, gpu, "cross_encoder", torch_ok=False) == "dequantized"
    assert variant_recipe(int8, gpu, "bi_encoder", torch_ok=True) == "dequantized"
    with pytest.raises(StagebenchError, match="unknown model role"):
        place("cpu", "auto", "torch", "t", role="ranker")


def test_a_bi_encoder_that_does_not_export_runs_in_torch_at_fp32(tmp_path, caplog):
    """A sentence-transformers model with a module the export does not cover (here a Dense layer
    named in modules.json) is not refused at fp32 on a CPU: it runs in torch, and the log says so."""
    import json
    import logging
    import shutil

    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import for_placement, onnx_kind
    from stagebench.runtime.devices import Placement

    src = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    folder = tmp_path / "with-dense"
    shutil.copytree(src.path, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules + [{"idx": 9, "name": "9", "path": "9_Dense",
                                                                "type": "sentence_transformers.models.Dense"}]))  # fmt: skip
    model = resolve_model(str(folder))
    caplog.set_level(logging.INFO, logger="stagebench")
    ran = for_placement(model, Placement("cpu", "fp32", "t"), onnx_kind(model), None, "stage dense", "bi_encoder")
    assert ran is model and "runs in torch at fp32" in caplog.text


def test_a_model_stage_says_what_runs_its_model_and_for_which_cpu_class(monkeypatch):
    """Issue 83: the log and the manifest name the path behind a model stage's choice - the CPU class
    ``precision: auto`` decided for, the precision and why, the model variant and the runtime."""
    from stagebench.record import StageRecord
    from stagebench.stages import STAGE_TYPES

    monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", "avx2 avx512f avx512_bf16 amx_bf16 amx_tile vendor=GenuineIntel")
    dense = STAGE_TYPES["dense"]("d", STAGE_TYPES["dense"].Params(device="cpu")).what_runs()
    assert (dense["cpu_class"], dense["precision"], dense["variant"], dense["runtime"]) == ("Intel AMX", "fp32", "export", "onnxruntime")
    assert dense["why"].startswith("auto: Intel AMX: ")
    ce = STAGE_TYPES["cross_encoder"]("c", STAGE_TYPES["cross_encoder"].Params(device="cpu")).what_runs()
    assert (ce["precision"], ce["variant"], ce["runtime"]) == ("int8-token", "per-token", "onnxruntime")
    assert STAGE_TYPES["bm25"]("b", STAGE_TYPES["bm25"].Params()).what_runs() is None
    rec = StageRecord("c", "cross_encoder", ["a"], "k", True, 50, "computed", 1.0, 1.0, None, None, "d", placement=ce)
    assert StageRecord.from_json(rec.to_json(), "m").placement == ce
