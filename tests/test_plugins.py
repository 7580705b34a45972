"""Plug-in configs: the example plug-in runs; bad targets and bad params fail on load."""

from __future__ import annotations

import json

import pytest

from stagebench.config import load_config
from stagebench.errors import ConfigError
from tests.conftest import REPO, child_path, stagebench_cli


def cfg(tmp_path, dataset, stage, extra_top=""):
    p = tmp_path / "c.yaml"
    p.write_text(f"""
name: t
output: {tmp_path / 'out'}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {dataset}, split: test}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 100}}}}
{stage}
""")
    return p


@pytest.mark.slow
def test_example_plugin_runs_from_a_config(tmp_path, small_synthetic):
    stage = """  - name: tb
    type: plugin
    target: "examples.title_boost:TitleBoostReranker"
    inputs: [bm25]
    params: {top_n: 20, title_weight: 3.0}"""
    r = stagebench_cli("run", cfg(tmp_path, small_synthetic, stage), cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "out" / "stage_table.json").read_text())
    assert [x["stage"] for x in rows] == ["bm25", "tb"]
    assert rows[1]["R@100"] == rows[0]["R@100"]  # a reranker keeps every candidate
    assert rows[1]["nDCG@10"] != rows[0]["nDCG@10"]


@pytest.mark.parametrize(
    "target,params,msg",
    [("no_such_pkg.mod:X", "{}", r"stages\[1\] \(p\).target: cannot import 'no_such_pkg.mod' \(ModuleNotFoundError"),
     ("examples.title_boost:Nope", "{}", r"has no attribute 'Nope'"),
     ("examples.title_boost", "{}", r"must look like 'package.module:ClassName'"),
     ("examples.title_boost:TitleBoostReranker", "{titel_weight: 2}", r"params.titel_weight: unknown key for TitleBoostReranker"),
     ("examples.title_boost:TitleBoostReranker", "{top_n: -1}", r"params.top_n: must be >= 1")],
)  # fmt: skip
def test_bad_plugin_configs(tmp_path, monkeypatch, target, params, msg):
    monkeypatch.chdir(REPO)
    stage = f"  - {{name: p, type: plugin, target: '{target}', inputs: [bm25], params: {params}}}"
    with pytest.raises(ConfigError, match=msg):
        load_config(cfg(tmp_path, "x", stage))


@pytest.mark.slow
def test_bad_plugin_output_fails_the_run_cleanly(tmp_path, small_synthetic):
    (tmp_path / "badplug.py").write_text("class Short:\n    def score(self, q, docs):\n        return [1.0]\n")
    stage = "  - {name: p, type: plugin, target: 'badplug:Short', inputs: [bm25], params: {top_n: 5}}"
    r = stagebench_cli("run", cfg(tmp_path, small_synthetic, stage), cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2
    assert "stagebench: error: stage p: plug-in badplug:Short returned 1 scores for 5 documents" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_unknown_model_name_is_one_line_error(tmp_path, small_synthetic):
    stage = "  - {name: d, type: dense, params: {model: nobody/nothing}}"
    r = stagebench_cli("run", cfg(tmp_path, small_synthetic, stage), env={"HF_HUB_OFFLINE": "1", "PATH": ""})  # fmt: skip
    assert r.returncode == 2
    errs = [line for line in r.stderr.splitlines() if line.startswith("stagebench: error:")]
    assert len(errs) == 1 and "stages[1] (d).params.model: model 'nobody/nothing' not found; tried:" in errs[0]
    assert "stage bm25" not in r.stderr  # found when the config is loaded, before any stage runs


@pytest.mark.slow
def test_changing_only_reranker_params_reuses_corpus_embeddings(tmp_path, small_synthetic):
    def config(top_n: int):
        p = tmp_path / f"c{top_n}.yaml"
        p.write_text(f"""
name: t
output: {tmp_path / f'out{top_n}'}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {small_synthetic}, split: test, max_queries: 5, corpus_scope: judged}}
stages:
  - {{name: dense, type: dense, params: {{top_k: 50}}}}
  - {{name: tb, type: plugin, target: "examples.title_boost:TitleBoostReranker", inputs: [dense], params: {{top_n: {top_n}}}}}
""")
        return p

    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": child_path()}
    first = stagebench_cli("run", config(10), cwd=REPO, env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "stage dense: computed corpus embeddings" in first.stderr and "stored corpus embeddings" in first.stderr
    second = stagebench_cli("run", config(20), cwd=REPO, env=env)  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "stage dense: cached run (dense) (key" in second.stderr  # the whole dense run, not just its embeddings
    assert "stage tb: computing run (plugin <- dense)" in second.stderr
    assert "corpus embeddings" not in second.stderr
