"""`make perf`'s script runs on the public API: a small run of its BM25 and cross-encoder sections
(the full run is `make perf`, minutes to hours; its figures are in results/perf.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, child_path


@pytest.mark.slow
def test_run_perf_measures_on_the_public_api(tmp_path, small_synthetic):
    out = tmp_path / "perf"
    cmd = [sys.executable, str(REPO / "benchmarks" / "run_perf.py"), "--output", str(out), "--data", str(small_synthetic),
           "--scale-root", str(tmp_path / "scale"), "--repeats", "1", "--ce-queries", "2", "--bm25-big", "2500",
           "--sections", "bm25,cross_encoder"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": child_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    f = json.loads((out / "perf.json").read_text())
    for name, b in f["bm25"].items():  # the bm25 stage's run is rank-bm25's, list for list
        assert b["parity"]["identical_top100"] == b["parity"]["queries"] > 0, name
        assert b["parity"]["max_abs_score_diff"] < 1e-9 and b["sparse"]["stage_s"] > 0
    assert set(f["bm25"]) == {"embedded", "generated_2k"}
    ce = f["cross_encoder"]
    assert ce["queries"] == 2 and ce["fast"]["pairs_per_s"] > 0 and ce["reference"]["pairs_per_s"] > 0
    assert ce["spearman_all_pairs"] > 0.95  # the INT8 carrier and its dequantized fp32 weights agree


def test_run_perf_latency_section_reports_each_stage_and_the_cascade(tmp_path, small_synthetic):
    cfg = tmp_path / "lat.yaml"
    cfg.write_text(f"name: lat\noutput: {tmp_path / 'unused'}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {small_synthetic}, split: test}}\nstages:\n"
                   "  - {name: bm25, type: bm25, params: {top_k: 100}}\n"
                   "  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english}}\n"
                   "  - {name: rrf, type: rrf, inputs: [bm25, stem]}\n"
                   "evaluation: {metrics: [nDCG@10], permutations: 200, bootstrap: 200}\n")  # fmt: skip
    out = tmp_path / "perf"
    cmd = [sys.executable, str(REPO / "benchmarks" / "run_perf.py"), "--output", str(out), "--data", str(small_synthetic),
           "--scale-root", str(tmp_path / "scale"), "--sections", "latency", "--latency-config", str(cfg),
           "--latency-queries", "7"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": child_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lat = json.loads((out / "perf.json").read_text())["latency"]
    assert lat["queries_served"] == 7 and list(lat["stages"]) == ["bm25", "stem", "rrf"]
    for name, s in lat["stages"].items():
        assert 0 < s["own_ms"]["p50"] <= s["own_ms"]["p95"] <= s["own_ms"]["p99"], name
    st = lat["stages"]
    # the cascade up to rrf is at least as slow as its slowest input, per percentile of the sums
    assert st["rrf"]["cascade_ms"]["p50"] >= max(st["bm25"]["own_ms"]["p50"], st["stem"]["own_ms"]["p50"])
    assert st["bm25"]["cascade_ms"] == st["bm25"]["own_ms"]


@pytest.mark.slow
def test_run_perf_precision_rule_section_weighs_each_path_against_fp32(tmp_path, tiny_synthetic):
    out = tmp_path / "perf"
    cmd = [sys.executable, str(REPO / "benchmarks" / "run_perf.py"), "--output", str(out), "--data", str(tiny_synthetic),
           "--scale-root", str(tmp_path / "scale"), "--sections", "precision-rule",
           "--rule-collections", "embedded (20K synthetic)", "--rule-depth", "8", "--rule-paths", "fp32,int8-token,bf16"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": child_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "STAGEBENCH_CACHE": str(tmp_path / "cache")}  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rule = json.loads((out / "perf.json").read_text())["precision_rule"]
    assert rule["paths"] == ["fp32", "int8-token", "bf16"] and list(rule["collections"]) == ["embedded (20K synthetic)"]
    col = rule["collections"]["embedded (20K synthetic)"]
    assert rule["depth"] == 8 and col["queries"] > 0 and col["queries"] < col["pairs"] <= 8 * col["queries"]
    for prec in ("int8-token", "bf16"):  # bf16: the INT8 weights dequantized into torch, in fixed batch shapes
        row = col[prec]
        assert row["ndcg10_change"] == pytest.approx(row["ndcg10"] - col["fp32"]["ndcg10"], abs=2e-4)
        assert 0 <= row["p"] <= 1 and 0 <= row["queries_changed"] <= col["queries"]
        assert abs(row["ndcg10_change"]) < 0.05  # the same model, quantized or rounded
    assert not (tmp_path / "cache" / "runs").exists()  # measured, never read from the stage cache


def test_the_limits_section_counts_an_encoders_operations_and_measures_each_peak():
    """Issue 83: an encoder's operations on T tokens, L x (8 T H^2 + 4 T H I + 4 T^2 H), by hand for
    L = 1, H = 2, I = 4 and texts of 3 and 1 tokens (96 + 96 + 72 = 264, and 32 + 32 + 8 = 72); and every
    arithmetic's GEMM peak measured (a tiny GEMM here: positive rates, not a speed)."""
    import numpy as np

    from benchmarks.perf_limits import encoder_ops, gemm_peaks

    assert encoder_ops(np.array([3, 1]), 1, 2, 4) == 264 + 72
    peaks = gemm_peaks(n=128, repeats=1)["gop_per_s"]
    assert set(peaks) == {"fp32_torch", "bf16_torch", "fp32_onnxruntime", "int8_onnxruntime"} and min(peaks.values()) > 0


def test_the_limits_section_says_where_the_cross_encoders_time_goes():
    """onnxruntime's profile of the stagebench cross-encoder on a few pairs, grouped by what each op does: the
    shares of the kernels' time sum to 1, the INT8 GEMMs are among them, and the model's own session is
    put back (a profile never left running)."""
    from benchmarks.perf_limits import op_time
    import stagebench

    ce = stagebench.api.cross_encoder("cross-encoder/ms-marco-MiniLM-L-12-v2", max_length=64)
    before = ce.sess.session
    got = op_time(ce, [("red shoes", "a pair of red running shoes"), ("usb cable", "a braided usb-c cable, 2 m")] * 4)
    assert ce.sess.session is before
    assert sum(got["shares"].values()) == pytest.approx(1.0, abs=0.01) and got["shares"]["INT8 GEMMs"] > 0.05
    assert got["kernel_seconds"] > 0
