"""The depth sweep on the real bundled cross-encoder (INT8 ONNX at its default, int8-token, scored in
length-sorted batches across queries): the run derived at each depth from one scoring pass is,
score for score, the run a separate stage with top_n = that depth gives; the depth table, its
plot, and the files."""

from __future__ import annotations

import json
import os

import pytest

from stagebench.runs import read_trec_run
from tests.conftest import esci_config, stagebench_cli

pytestmark = pytest.mark.slow

STAGES = """\
  - {name: bm25, type: bm25, params: {top_k: 100}}
  - {name: ce, type: cross_encoder, inputs: [bm25], params: {top_n: 20, depths: [10, 20, 50]}}
  - {name: ce10, type: cross_encoder, inputs: [bm25], params: {top_n: 10}}
  - {name: ce50, type: cross_encoder, inputs: [bm25], params: {top_n: 50}}
"""


def test_derived_runs_equal_separate_top_n_runs_and_the_depth_table(tmp_path, small_synthetic):
    cfg = esci_config(tmp_path, f"{small_synthetic}, max_queries: 12", STAGES, name="d", evaluation="{latency_queries: 0}")
    r = stagebench_cli("run", cfg, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    runs = tmp_path / "d" / "runs"
    assert read_trec_run(runs / "ce@10.trec") == read_trec_run(runs / "ce10.trec")
    assert read_trec_run(runs / "ce@50.trec") == read_trec_run(runs / "ce50.trec")
    assert read_trec_run(runs / "ce@20.trec") == read_trec_run(runs / "ce.trec")
    rows = {row["stage"]: row for row in json.loads((tmp_path / "d" / "stage_table.json").read_text())}
    sweep = rows["ce"]["depths"]
    assert [c["depth"] for c in sweep] == [10, 20, 50]
    assert [c["pool_recall"] for c in sweep] == sorted(c["pool_recall"] for c in sweep)  # deeper pools hold more
    assert all(c["oracle_ndcg10"] >= c["achieved_ndcg10"] - 1e-9 for c in sweep)
    assert sweep[0]["achieved_ndcg10"] == pytest.approx(rows["ce10"]["nDCG@10"], abs=1e-6)
    assert sweep[2]["achieved_ndcg10"] == pytest.approx(rows["ce50"]["nDCG@10"], abs=1e-6)
    assert sweep[2]["pairs"] == 5 * sweep[0]["pairs"] or sweep[2]["pairs"] > sweep[1]["pairs"] > sweep[0]["pairs"]
    text = (tmp_path / "d" / "stage_table.txt").read_text()
    assert "Depth sweep: ce (one scoring pass at the largest depth" in text
    assert (tmp_path / "d" / "plots" / "depth_ce.png").stat().st_size > 10_000
    assert "ce: rerank (depths 10, 20, 50)" in r.stderr and "from one pass" in r.stderr
    html = (tmp_path / "d" / "report.html").read_text()
    assert "Quality against cost" in html and 'alt="depth_ce.png"' in html
