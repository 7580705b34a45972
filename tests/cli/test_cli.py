"""End-to-end: the CLI on real files, exit codes, one-line errors, no half-written results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagebench.cli import main
from stagebench.runs import write_trec_qrels, write_trec_run
from tests.conftest import stagebench_cli

pytestmark = pytest.mark.slow  # the real command line in subprocesses


def cli(*args, cwd=None):
    return stagebench_cli(*args, cwd=cwd)


def bm25_config(tmp_path: Path, dataset: str, extra: str = "") -> Path:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""
name: t
output: {tmp_path / 'out'}
cache_dir: {tmp_path / 'cache'}
dataset: {dataset}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 100}}}}
{extra}
evaluation: {{metrics: [nDCG@10, RR@10, R@100]}}
""")
    return cfg


def test_run_writes_runs_tables_and_manifest(tmp_path, small_synthetic):
    cfg = bm25_config(tmp_path, f"{{loader: esci, path: {small_synthetic}, split: test}}")
    r = cli("run", cfg)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    assert "bm25" in r.stdout and "nDCG@10" in r.stdout
    assert "corpus scope: catalog" in r.stderr
    table = json.loads((out / "stage_table.json").read_text())
    assert [row["stage"] for row in table] == ["bm25"]
    assert set(table[0]) >= {"stage", "nDCG@10", "RR@10", "R@100"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["dataset"]["documents"] == 1500
    assert "pytrec-eval-terrier" in manifest["packages"]
    # the saved run re-scores to the same numbers through `stagebench eval`
    write_trec_qrels(_qrels(small_synthetic), tmp_path / "qrels.txt")
    r = cli("eval", tmp_path / "qrels.txt", out / "runs" / "bm25.trec", "-m", "nDCG@10", "RR@10", "-m", "R@100", "--json")
    assert r.returncode == 0, r.stderr
    means = json.loads(r.stdout)
    for k in ("nDCG@10", "RR@10", "R@100"):
        assert means[k] == pytest.approx(table[0][k], abs=1e-6)


def _qrels(path):
    from stagebench.data.esci import EsciOptions, load_esci

    return load_esci(EsciOptions(path=str(path), split="test")).qrels


def test_cranfield_bm25_stage_table(tmp_path, cranfield):
    cfg = bm25_config(tmp_path, f"{{loader: beir, path: {cranfield}}}")
    assert main(["run", str(cfg)]) == 0
    row = json.loads((tmp_path / "out" / "stage_table.json").read_text())[0]
    assert row["queries"] == 225
    assert 0.2 < row["nDCG@10"] < 0.6  # BM25 on Cranfield lands around 0.3-0.4


def test_eval_against_hand_made_files(tmp_path):
    write_trec_qrels({"1": {"a": 3, "b": 2, "c": 1, "d": 3}}, tmp_path / "q")
    write_trec_run({"1": {"a": 3.0, "b": 2.0, "c": 1.0}}, tmp_path / "r")
    r = cli("eval", tmp_path / "q", tmp_path / "r", "-m", "nDCG@3", "--json")
    assert json.loads(r.stdout) == {"nDCG@3": pytest.approx(0.808, abs=5e-4)}
    r = cli("eval", tmp_path / "q", tmp_path / "r", "-m", "nDCG@3", "--gain", "exp", "--json")
    assert json.loads(r.stdout)["nDCG@3"] == pytest.approx(0.727, abs=1e-3)


@pytest.mark.parametrize(
    "dataset,extra,expect",
    [
        ("{loader: esci, path: /nonexistent/esci}", "", "/nonexistent/esci: ESCI folder not found"),
        ("{loader: esci, path: SYN, split: test, colour: red}", "", "dataset.colour: unknown key"),
        ("{loader: esci, path: SYN}", "  - {name: x, type: bm25, inputs: [nope]}",
         "inputs[0]: unknown stage 'nope'"),
    ],
)  # fmt: skip
def test_bad_input_one_line_nonzero_exit_no_results(tmp_path, small_synthetic, dataset, extra, expect):
    cfg = bm25_config(tmp_path, dataset.replace("SYN", str(small_synthetic)), extra)
    r = cli("run", cfg)
    assert r.returncode == 2
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and expect in err[0] and err[0].startswith("stagebench: error: ")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial-*"))


def test_failure_during_a_stage_leaves_no_results_folder(tmp_path, small_synthetic):
    cfg = bm25_config(tmp_path, f"{{loader: esci, path: {small_synthetic}, split: test, text_template: '{{title}} {{nosuchfield}}'}}")
    r = cli("run", cfg)
    assert r.returncode == 2 and "nosuchfield" in r.stderr
    assert not (tmp_path / "out").exists()


def test_eval_bad_run_file(tmp_path):
    write_trec_qrels({"1": {"a": 1}}, tmp_path / "q")
    (tmp_path / "r").write_text("1 Q0 a 1 notanumber tag\n")
    r = cli("eval", tmp_path / "q", tmp_path / "r", "-m", "RR@10")
    assert r.returncode == 2 and "r:1: score 'notanumber' is not a number" in r.stderr
