"""The stage cache: keys, reuse, partial recomputation, corruption, SIGKILL resume, determinism."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stagebench.cache import Cache, cache_root, make_key
from stagebench.config import load_config
from stagebench.errors import StagebenchError
from stagebench.pipeline import run_config
from stagebench.runs import read_trec_run, run_digest
from tests.conftest import REPO, child_path, seed_models, stagebench_cli

# A plug-in that SIGKILLs its own process on the 3rd call when $KILL_IN_RERANK is set:
# a real crash in the middle of a stage, not a simulated one.
KILLER = '''
import os, signal
class Slow:
    calls = 0
    def score(self, query, docs):
        Slow.calls += 1
        if os.environ.get("KILL_IN_RERANK") and Slow.calls == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return [float(len(d)) for d in docs]
'''


def write_config(tmp_path: Path, dataset: Path, name: str = "c", cache: str = "cache", top_n: int = 20,
                 max_queries: int | None = None, extra: str = "") -> Path:  # fmt: skip
    mq = f", max_queries: {max_queries}" if max_queries else ""
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"""
name: {name}
output: {tmp_path / ('out-' + name)}
cache_dir: {tmp_path / cache}
dataset: {{loader: esci, path: {dataset}, split: test{mq}}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 100}}}}
  - {{name: bm25_stem, type: bm25, params: {{top_k: 100, stemmer: english}}}}
  - {{name: rrf, type: rrf, inputs: [bm25, bm25_stem]}}
  - {{name: tb, type: plugin, target: "examples.title_boost:TitleBoostReranker", inputs: [rrf], params: {{top_n: {top_n}}}}}
{extra}
evaluation: {{metrics: [nDCG@10, RR@10, R@100], permutations: 500, bootstrap: 200, latency_queries: 0}}
""")
    return p


def statuses(caplog) -> dict[str, str]:
    out = {}
    for rec in caplog.records:
        m = re.match(r"stage (\S+): (cached|computed) run\b", rec.getMessage())
        if m:
            out[m.group(1)] = m.group(2)
    caplog.clear()
    return out


def files_sha(folder: Path) -> dict[str, str]:
    names = [*(f"runs/{p.name}" for p in sorted((folder / "runs").iterdir())),
             "stage_table.txt", "stage_table.md", "stage_table.csv", "stage_table.json", "per_query.csv",
             "significance.json"]  # fmt: skip
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO, logger="stagebench")
    return caplog


def test_key_is_canonical_and_content_sensitive():
    assert make_key({"a": 1, "b": [1, 2]}) == make_key({"b": [1, 2], "a": 1})
    assert make_key({"a": 1}) != make_key({"a": 2})


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("STAGEBENCH_CACHE", raising=False)
    assert cache_root() == Path(".stagebench-cache")
    assert cache_root(None, "cfg") == Path("cfg")
    monkeypatch.setenv("STAGEBENCH_CACHE", str(tmp_path / "env"))
    assert cache_root(None, "cfg") == tmp_path / "env"
    assert cache_root("cli", "cfg") == Path("cli")


@pytest.mark.slow
def test_second_run_is_all_cached_and_top_n_change_recomputes_only_the_reranker(tmp_path, small_synthetic, logs):
    first = run_config(load_config(write_config(tmp_path, small_synthetic)))
    assert statuses(logs) == {"bm25": "computed", "bm25_stem": "computed", "rrf": "computed", "tb": "computed"}
    before = files_sha(first.output)
    again = run_config(load_config(write_config(tmp_path, small_synthetic)))
    assert statuses(logs) == {"bm25": "cached", "bm25_stem": "cached", "rrf": "cached", "tb": "cached"}
    assert files_sha(again.output) == before  # a cached run reproduces every table byte for byte
    run_config(load_config(write_config(tmp_path, small_synthetic, top_n=10)))
    assert statuses(logs) == {"bm25": "cached", "bm25_stem": "cached", "rrf": "cached", "tb": "computed"}
    manifest = json.loads((tmp_path / "out-c" / "manifest.json").read_text())
    assert [s["status"] for s in manifest["stages"]] == ["cached", "cached", "cached", "computed"]


@pytest.mark.slow
def test_query_filter_change_recomputes_runs_but_reuses_corpus_embeddings_and_model_change_keeps_bm25(
        tmp_path, tiny_synthetic, logs, model_variants):  # fmt: skip
    dense = "  - {name: dense, type: dense, params: {top_k: 100, model: MODEL}}\n  - {name: hyb, type: rrf, inputs: [bm25, dense]}"
    mini, bge = "sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5"
    seed_models(model_variants, tmp_path / "cache")  # MiniLM's export, built once per session
    run_config(load_config(write_config(tmp_path, tiny_synthetic, max_queries=8, extra=dense.replace("MODEL", mini))))
    assert set(statuses(logs).values()) == {"computed"}
    run_config(load_config(write_config(tmp_path, tiny_synthetic, max_queries=12, extra=dense.replace("MODEL", mini))))
    msgs = [r.getMessage() for r in logs.records]
    assert all(v == "computed" for v in statuses(logs).values())  # the query set changed: every run is new
    assert any(m.startswith("stage dense: cached corpus embeddings") for m in msgs)  # ... but not the corpus vectors
    assert not any("computed corpus embeddings" in m for m in msgs)
    run_config(load_config(write_config(tmp_path, tiny_synthetic, max_queries=12, extra=dense.replace("MODEL", bge))))
    assert statuses(logs) == {"bm25": "cached", "bm25_stem": "cached", "rrf": "cached", "tb": "cached",
                              "dense": "computed", "hyb": "computed"}  # fmt: skip


def test_flipped_bytes_in_a_cached_run_are_detected_once_and_recomputed(tmp_path, small_synthetic, logs):
    cfg = write_config(tmp_path, small_synthetic)
    first = run_config(load_config(cfg))
    want = files_sha(first.output)
    manifest = json.loads((first.output / "manifest.json").read_text())
    key = manifest["cache"]["keys"]["rrf"]
    victim = tmp_path / "cache" / "runs" / key / "run.trec"
    data = bytearray(victim.read_bytes())
    data[100:104] = b"9999" if data[100:104] != b"9999" else b"1111"
    victim.write_bytes(bytes(data))
    statuses(logs)
    again = run_config(load_config(cfg))
    warnings = [r.getMessage() for r in logs.records if r.levelno == logging.WARNING and "corrupt" in r.getMessage()]
    assert len(warnings) == 1 and key in warnings[0] and "checksum" in warnings[0]
    assert statuses(logs) == {"bm25": "cached", "bm25_stem": "cached", "rrf": "computed", "tb": "cached"}
    assert files_sha(again.output) == want


@pytest.mark.slow
def test_sigkill_mid_stage_resumes_from_cache_with_the_same_table(tmp_path, small_synthetic):
    (tmp_path / "killplug.py").write_text(KILLER)
    extra = '  - {name: slow, type: plugin, target: "killplug:Slow", inputs: [tb], params: {top_n: 5, per_query: true}}'
    cfg = write_config(tmp_path, small_synthetic, extra=extra)
    env = {"PYTHONPATH": child_path(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    killed = stagebench_cli("run", cfg, cwd=tmp_path,
                            env={**env, "KILL_IN_RERANK": "1"})  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "out-c").exists()  # no results folder that looks complete
    assert list(tmp_path.glob(".out-c.partial-*"))  # only the hidden partial one
    resumed = stagebench_cli("run", cfg, cwd=tmp_path, env=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    for s in ("bm25", "bm25_stem", "rrf", "tb"):
        assert f"stage {s}: cached" in resumed.stderr
    assert "stage slow: computing run (plugin <- tb)" in resumed.stderr
    assert "left by an interrupted run" in resumed.stderr and not list(tmp_path.glob(".out-c.partial-*"))
    # an uninterrupted run with an empty cache gives the same table, byte for byte
    clean = write_config(tmp_path, small_synthetic, name="clean", cache="cache2", extra=extra)
    r = stagebench_cli("run", clean, cwd=tmp_path,
                       env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for f in ("stage_table.json", "per_query.csv", "runs/slow.trec", "runs/tb.trec"):
        assert (tmp_path / "out-c" / f).read_bytes() == (tmp_path / "out-clean" / f).read_bytes().replace(
            b"clean.", b"c."), f  # run files carry the config name as their tag


@pytest.mark.slow
def test_two_clean_runs_with_neural_stages_are_byte_identical(tmp_path, small_synthetic):
    extra = ("  - {name: dense, type: dense, params: {top_k: 50}}\n"
             "  - {name: ce, type: cross_encoder, inputs: [dense], params: {top_n: 10}}")  # fmt: skip
    outs = []
    for i in (1, 2):
        cfg = write_config(tmp_path, small_synthetic, name="d", cache=f"cache{i}", max_queries=6, extra=extra)
        text = cfg.read_text().replace("out-d", f"out-d{i}").replace("split: test", "split: test, corpus_scope: judged")
        cfg.write_text(text)
        outs.append(run_config(load_config(cfg)).output)
    assert files_sha(outs[0]) == files_sha(outs[1])


def test_manifest_records_keys_machine_memory_and_versions(tmp_path, small_synthetic):
    out = run_config(load_config(write_config(tmp_path, small_synthetic))).output
    m = json.loads((out / "manifest.json").read_text())
    assert m["machine"]["cores"] >= 1 and m["machine"]["ram_gb"] > 0 and m["machine"]["cpu"]
    assert set(m["cache"]["keys"]) == {"bm25", "bm25_stem", "rrf", "tb"}
    for s in m["stages"]:
        assert s["status"] == "computed" and s["peak_rss_mb"] > 10 and s["seconds"] >= 0 and s["key"]
    assert m["resolved"]["stages"][0]["params"]["k1"] == 1.5  # defaults filled in
    assert m["resolved"]["stages"][3]["key_parts"]["identity"]["plugin_source"]
    assert m["dataset"]["queries_fingerprint"] and m["dataset"]["qrels_fingerprint"]
    assert m["packages"]["numpy"] and m["wall_seconds"] > 0
    # the rrf key is built from the content digests of its input runs
    parts = m["resolved"]["stages"][2]["key_parts"]
    assert parts["inputs"] == [m["stages"][0]["run_digest"], m["stages"][1]["run_digest"]] and parts["corpus"] is None
    assert m["stages"][0]["run_digest"] == run_digest(read_trec_run(out / "runs" / "bm25.trec"))


@pytest.mark.slow
def test_cache_ls_and_prune(tmp_path, small_synthetic):
    run_config(load_config(write_config(tmp_path, small_synthetic)))
    root = tmp_path / "cache"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (root / "runs" / f".tmp-deadbeef-{gone.pid}-2").mkdir()  # what a killed writer leaves (a live one's is kept)
    entries = Cache(root).list()
    victim = next(e for e in entries if e["kind"] == "runs" and not e["partial"])
    Path(victim["path"], "run.trec").write_text("truncated")
    env = {"PYTHONPATH": child_path(), "PATH": "/usr/bin:/bin"}
    ls = stagebench_cli("cache", "--cache-dir", root, "ls", env=env)  # fmt: skip
    assert ls.returncode == 0, ls.stderr
    assert "PARTIAL" in ls.stdout and "CORRUPT" in ls.stdout and "tb (plugin)" in ls.stdout
    pr = stagebench_cli("cache", "--cache-dir", root, "prune", env=env)  # fmt: skip
    assert "partial write of a killed run" in pr.stdout and "corrupt: run.trec has 9 bytes" in pr.stdout
    assert "removed 2 entries" in pr.stdout
    left = Cache(root).list()
    assert len(left) == len(entries) - 2 and all(Cache(root).verify(e["kind"], e["key"]) is None for e in left)
    stagebench_cli("cache", "--cache-dir", root, "prune", "--all", env=env,
                   check=True)  # fmt: skip
    assert Cache(root).list() == []


@pytest.mark.slow
def test_upstream_change_that_leaves_the_run_identical_reuses_downstream(tmp_path, small_synthetic, logs):
    """Keys chain on input *content*. bm25 top_k 5000 -> 6000 on a 1,500-document catalog
    changes bm25's key but not its run (every matching document is already in it): bm25 is
    recomputed, rrf and tb are not. k1 moves scores, and recomputes everything downstream."""
    cfg = write_config(tmp_path, small_synthetic)
    cfg.write_text(cfg.read_text().replace("params: {top_k: 100}}", "params: {top_k: 5000}}"))
    run_config(load_config(cfg))
    statuses(logs)
    same = (tmp_path / "out-c" / "runs" / "bm25.trec").read_bytes()
    cfg.write_text(cfg.read_text().replace("top_k: 5000", "top_k: 6000"))
    run_config(load_config(cfg))
    assert statuses(logs) == {"bm25": "computed", "bm25_stem": "cached", "rrf": "cached", "tb": "cached"}
    assert (tmp_path / "out-c" / "runs" / "bm25.trec").read_bytes() == same
    cfg.write_text(cfg.read_text().replace("top_k: 6000", "top_k: 6000, k1: 0.9"))
    run_config(load_config(cfg))
    assert statuses(logs) == {"bm25": "computed", "bm25_stem": "cached", "rrf": "computed", "tb": "computed"}
    assert (tmp_path / "out-c" / "runs" / "bm25.trec").read_bytes() != same


@pytest.mark.slow
def test_rerun_into_a_results_folder_keeps_its_expected_yaml(tmp_path, small_synthetic):
    cfg = write_config(tmp_path, small_synthetic)
    out = run_config(load_config(cfg)).output
    (out / "expected.yaml").write_text("stages: {bm25: {nDCG@10: 0.5}}\n")
    before = (out / "manifest.json").read_text()
    run_config(load_config(cfg))
    assert (out / "expected.yaml").read_text() == "stages: {bm25: {nDCG@10: 0.5}}\n"
    assert (out / "manifest.json").read_text() != before  # everything else is the new run's
    # a file no run wrote, or one a run wrote and somebody edited, makes the folder not ours: the run
    # refuses and the file survives
    (out / "stage_table.txt").write_text("my edited table")
    with pytest.raises(StagebenchError, match=r"stage_table.txt was changed after stagebench wrote it"):
        run_config(load_config(cfg))
    assert (out / "stage_table.txt").read_text() == "my edited table"
    (out / "stage_table.txt").unlink()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(StagebenchError, match=r"notes.txt was not written by stagebench \(not listed in manifest.json\)"):
        run_config(load_config(cfg))
    assert (out / "notes.txt").read_text() == "mine" and (out / "manifest.json").is_file()


@pytest.mark.slow
def test_stage_cache_false_always_recomputes(tmp_path, small_synthetic, logs):
    cfg = write_config(tmp_path, small_synthetic)
    cfg.write_text(cfg.read_text().replace("type: rrf,", "type: rrf, cache: false,"))
    run_config(load_config(cfg))
    statuses(logs)
    run_config(load_config(cfg))
    assert statuses(logs) == {"bm25": "cached", "bm25_stem": "cached", "rrf": "computed", "tb": "cached"}


def test_write_is_atomic_a_failing_writer_leaves_nothing(tmp_path):
    cache = Cache(tmp_path)

    def boom(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        cache.put("runs", "k1", boom, {})
    assert not any((tmp_path / "runs").iterdir())
    assert cache.get("runs", "k1") is None
    shutil.rmtree(tmp_path / "runs")
    os.makedirs(tmp_path / "runs" / "k2")  # an entry folder without entry.json: treated as corrupt
    assert cache.get("runs", "k2") is None and not (tmp_path / "runs" / "k2").exists()


def test_a_relative_cache_dir_is_the_runs_wherever_the_cache_is_used(tmp_path, monkeypatch):
    """Issue 71: a cache handed to a worker process whose working directory differs (a `ray start`
    cluster started elsewhere) writes into the run's cache, not under the worker's directory."""
    import pickle

    from stagebench.cache import Cache

    monkeypatch.chdir(tmp_path)
    cache = Cache(".stagebench-cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    worker = pickle.loads(pickle.dumps(cache))  # as a worker receives it
    assert worker.root == tmp_path / ".stagebench-cache"
