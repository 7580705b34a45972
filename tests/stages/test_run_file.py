"""type: run_file - a frozen candidate pool read from a TREC run, reranked like any first stage."""

from __future__ import annotations

import json

import pytest

from stagebench.config import load_config
from stagebench.errors import ConfigError
from stagebench.pipeline import run_config
from stagebench.runs import ranked_ids, read_trec_run
from tests.conftest import esci_config


def config(tmp_path, dataset, stages: str, name: str = "rf"):
    return esci_config(tmp_path, dataset, stages, name, evaluation="{metrics: [nDCG@10, R@100], latency_queries: 0}")


@pytest.mark.slow
def test_a_run_file_is_reranked_by_the_cross_encoder_like_the_stage_it_came_from(tmp_path, small_synthetic):
    ce = "{top_n: 10, model: cross-encoder/ms-marco-MiniLM-L-12-v2}"
    direct = run_config(load_config(config(tmp_path, small_synthetic, f"""
  - {{name: first, type: bm25, params: {{top_k: 50}}}}
  - {{name: ce, type: cross_encoder, inputs: [first], params: {ce}}}""", "direct")))
    frozen = tmp_path / "direct" / "runs" / "first.trec"
    from_file = run_config(load_config(config(tmp_path, small_synthetic, f"""
  - {{name: first, type: run_file, params: {{path: {frozen}}}}}
  - {{name: ce, type: cross_encoder, inputs: [first], params: {ce}}}""", "fromfile")))
    assert from_file.runs["first"] == read_trec_run(frozen) == direct.runs["first"]
    assert from_file.runs["ce"] == direct.runs["ce"]
    rows = json.loads((tmp_path / "fromfile" / "stage_table.json").read_text())
    assert rows[1]["ceiling"]["depth"] == 10 and rows[1]["ceiling"]["pool_recall"] > 0  # the ceiling analysis applies


@pytest.mark.slow
def test_run_file_is_keyed_by_content_and_cut_by_top_k(tmp_path, small_synthetic):
    run = tmp_path / "prod.trec"
    direct = run_config(load_config(config(tmp_path, small_synthetic, "  - {name: b, type: bm25, params: {top_k: 30}}",
                                           "b")))  # fmt: skip
    run.write_text((tmp_path / "b" / "runs" / "b.trec").read_text() + "q-elsewhere Q0 d1 1 1.0 x\n")
    cfg = config(tmp_path, small_synthetic, f"  - {{name: f, type: run_file, params: {{path: {run}, top_k: 5}}}}")
    first = run_config(load_config(cfg))
    assert "q-elsewhere" not in first.runs["f"]  # a query the dataset does not evaluate is dropped
    assert all(len(docs) == min(5, len(direct.runs["b"][q])) for q, docs in first.runs["f"].items())
    assert sum(len(docs) == 5 for docs in first.runs["f"].values()) > 30  # (one query has only 4 BM25 hits)
    # the top 5 by trec_eval's order (score desc, then docid desc: ties at the cut go by docid)
    assert all(ranked_ids(first.runs["f"][q]) == ranked_ids(direct.runs["b"][q])[:5] for q in first.runs["f"])
    key1 = json.loads((tmp_path / "rf" / "manifest.json").read_text())["stages"][0]["key"]
    run_config(load_config(cfg))
    assert json.loads((tmp_path / "rf" / "manifest.json").read_text())["stages"][0]["status"] == "cached"
    run.write_text(run.read_text().rstrip("\n").rsplit("\n", 1)[0] + "\n")  # drop the last line: new content
    run_config(load_config(cfg))
    key2 = json.loads((tmp_path / "rf" / "manifest.json").read_text())["stages"][0]["key"]
    assert key1 != key2


def test_a_missing_run_file_fails_at_load(tmp_path, small_synthetic):
    cfg = config(tmp_path, small_synthetic, "  - {name: f, type: run_file, params: {path: nowhere.trec}}")
    with pytest.raises(ConfigError, match=r"stages\[0\] \(f\).params.path: run file 'nowhere.trec' not found"):
        load_config(cfg)
