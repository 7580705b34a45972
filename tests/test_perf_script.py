"""`make perf`'s script runs on the public API: a small run of its BM25 and cross-encoder sections
(the full run is `make perf`, minutes to hours; its figures are in results/perf.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_run_perf_measures_on_the_public_api(tmp_path, small_synthetic):
    out = tmp_path / "perf"
    cmd = [sys.executable, str(REPO / "benchmarks" / "run_perf.py"), "--output", str(out), "--data", str(small_synthetic),
           "--scale-root", str(tmp_path / "scale"), "--repeats", "1", "--ce-queries", "2", "--bm25-big", "2500",
           "--sections", "bm25,cross_encoder"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
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
