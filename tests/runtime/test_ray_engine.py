"""engine: ray on a real local Ray cluster (started by the run, 2 CPUs): the same stage table and
runs as engine: local, one shared cache, a worker killed mid-stage, the driver killed mid-stage,
and an address where no cluster answers. Real models (the bundled MiniLM bi-encoder and INT8
cross-encoder, SmolLM2), a real plug-in (examples.title_boost), no mock."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stagebench.runs import ranked, read_trec_run
from stagebench.runtime.cluster.supervisor import RAY_LOG_ENV
from tests.conftest import REPO, seed_models, stagebench_cli

pytest.importorskip("ray", reason="engine: ray needs the ray extra (make test installs it)")
pytestmark = pytest.mark.xdist_group("ray")  # one Ray cluster at a time on this machine

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
STAGES = """\
  - {name: bm25, type: bm25, params: {top_k: 100}}
  - {name: dense, type: dense, params: {top_k: 100, batch_size: 16}}
  - {name: rrf, type: rrf, inputs: [bm25, dense]}
  - {name: ce, type: cross_encoder, inputs: [rrf], params: {top_n: 20, pairs_per_call: 40}}
  - {name: boost, type: plugin, target: "examples.title_boost:TitleBoostReranker", inputs: [rrf], params: {top_n: 30}}
"""
RAY = "engine: {type: ray, num_workers: 2, batch_size: 2}\n"


@pytest.fixture(scope="module")
def tiny(tiny_synthetic) -> Path:
    return tiny_synthetic


def config(tmp: Path, data: Path, name: str, cache: str, engine: str = "", stages: str = STAGES,
           variants: Path | None = None) -> Path:  # fmt: skip
    """The run's config; ``variants`` (the ``model_variants`` fixture): its model files seeded into the cache."""
    if variants is not None:
        seed_models(variants, tmp / cache)
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(f"name: {name}\noutput: {tmp / name}\ncache_dir: {tmp / cache}\n{engine}"
                   f"dataset: {{loader: esci, path: {data}, split: test}}\nstages:\n{stages}"
                   "evaluation: {metrics: [nDCG@10, RR@10, R@100, P@10], latency_queries: 0}\n")  # fmt: skip
    return cfg


def run(cfg: Path, *extra: str) -> subprocess.CompletedProcess:
    r = stagebench_cli("run", cfg, *extra, cwd=REPO, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def table(folder: Path) -> dict:
    rows = json.loads((folder / "stage_table.json").read_text())
    return {r["stage"]: {k: round(v, 6) for k, v in r.items() if isinstance(v, float)} for r in rows}


def same_runs(a: Path, b: Path) -> list[str]:
    """Stage runs of two results folders: same documents, same order - except where two scores
    differ by less than 1e-6 (returned, for the test to report)."""
    near = []
    for f in sorted((a / "runs").glob("*.trec")):
        ra, rb = read_trec_run(f), read_trec_run(b / "runs" / f.name)
        assert ra.keys() == rb.keys(), f.name
        for q in ra:
            assert ra[q].keys() == rb[q].keys(), (f.name, q)
            if [d for d, _ in ranked(ra[q])] != [d for d, _ in ranked(rb[q])]:
                worst = max(abs(ra[q][d] - rb[q][d]) for d in ra[q])
                assert worst < 1e-6, (f.name, q, worst)
                near.append(f"{f.stem}/{q}: order differs, scores within {worst:.1e}")
    return near


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, tiny, model_variants) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("local")
    run(config(tmp, tiny, "local", "cache", variants=model_variants))
    return tmp, tmp / "local"


def workers() -> list[int]:
    """Ray Data actors running stagebench tasks on this machine (their process title names the class)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"StagebenchWorker" in cmd and b"MapWorker" in cmd:
                out.append(int(d.name))
    return out


def ray_logs(pids: list[int]) -> set[Path]:
    """The Ray log each watched driver among ``pids`` was told to write (its environment's
    :data:`~stagebench.runtime.cluster.supervisor.RAY_LOG_ENV`): a driver killed with SIGKILL cannot remove it."""
    out = set()
    for pid in pids:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        out |= {Path(e.split(b"=", 1)[1].decode()) for e in env if e.startswith(RAY_LOG_ENV.encode() + b"=")}
    return out


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@pytest.mark.slow
def test_ray_resumes_after_its_driver_is_killed_survives_a_killed_worker_and_shares_the_cache(tmp_path, tiny, local_reference,
                                                                                               model_variants):  # fmt: skip
    """The five stages on a new local Ray cluster: the driver SIGKILLed while the cross-encoder's workers score
    (nothing written); the same command resumes from the cache with one of its Ray workers SIGKILLed mid-stage
    (Ray replaces it) and gives the local run's table and runs; then the cache both engines share."""
    ltmp, local = local_reference
    cfg = config(tmp_path, tiny, "ray", "cache", RAY, variants=model_variants)
    log = (tmp_path / "first.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], cwd=REPO, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    deadline = time.monotonic() + 300
    while "ce: rerank:" not in (tmp_path / "first.err").read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "first.err").read_text()[-3000:]
        time.sleep(0.2)
    time.sleep(1.0)  # the cross-encoder's workers are scoring
    cluster = descendants(proc.pid)
    logs = ray_logs(cluster)
    proc.kill()
    proc.wait()
    for pid in cluster:  # a SIGKILLed driver cannot stop its local cluster; `ray stop` would (docs/scale.md)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not (tmp_path / "ray").exists()
    assert logs, "the watched driver was told of no Ray log"
    for f in logs:  # kept by design where a line names it; here nobody is left to name it
        f.unlink(missing_ok=True)

    proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    killed: list[int] = []

    def kill_one() -> None:  # the first worker that has worked for 2 s (model loaded, scoring)
        first_seen: dict[int, float] = {}
        while proc.poll() is None and not killed:
            for pid in workers():
                first_seen.setdefault(pid, time.monotonic())
                if time.monotonic() - first_seen[pid] > 2.0:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.1)

    t = threading.Thread(target=kill_one)
    t.start()
    out, err = proc.communicate(timeout=600)
    t.join()
    assert proc.returncode == 0, err[-3000:]
    assert killed, "no Ray worker was seen to kill"
    assert "stages computed: ce, boost; from cache: bm25, dense, rrf" in err
    assert "engine ray: connected to a new local cluster" in err
    assert "on 2 Ray worker(s)" in err
    assert table(tmp_path / "ray") == table(local)
    near = same_runs(local, tmp_path / "ray")
    print("runs identical" if not near else "\n".join(near))
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert {s["name"]: s["engine"]["type"] for s in manifest["resolved"]["stages"]}["ce"] == "ray"

    # the cache is shared: a local run over the Ray run's cache reuses its embeddings (another top_k:
    # a new run, the same vectors); the key has no engine in it, so the other direction is the same key
    again = "".join(line for line in STAGES.replace("params: {top_k: 100, batch_size: 16}", "params: {top_k: 90, batch_size: 16}")
                    .splitlines(keepends=True) if "name: ce," not in line and "name: boost," not in line)  # fmt: skip
    r = run(config(tmp_path, tiny, "local-on-ray-cache", "cache", "", again))
    assert "stage dense: cached corpus embeddings" in r.stderr
    assert "from cache: bm25, rrf" not in r.stderr  # rrf's input changed: recomputed, as it must be
    r = run(config(ltmp, tiny, "local-on-local-cache", "cache", "", again))
    assert table(ltmp / "local-on-local-cache") == table(tmp_path / "local-on-ray-cache")


@pytest.mark.slow
def test_llm_windows_on_ray_give_the_local_run(tmp_path, tiny, model_entries):
    stages = """\
  - {name: bm25, type: bm25, params: {top_k: 50}}
  - {name: llm, type: llm_rerank, inputs: [bm25], params: {top_n: 6, window: 4, stride: 2, max_doc_words: 16}}
"""
    data = f"{tiny}, max_queries: 2"  # one query per Ray worker
    seed_models(model_entries, tmp_path / "cache-a")  # the local run's checkpoint, built once per session
    seed_models(model_entries, tmp_path / "cache-b")  # the Ray run's driver verifies it, its workers read it
    # (tests/llm/test_families.py: a worker reads the driver's checkpoint)
    local = run(config(tmp_path, data, "llm-local", "cache-a", "", stages))
    ray = run(config(tmp_path, data, "llm-ray", "cache-b", "engine: {type: ray, num_workers: 2, batch_size: 1}\n", stages))
    assert "llm: llm listwise calls: 4 calls in 2 units on 2 Ray worker(s)" in ray.stderr, ray.stderr[-2000:]
    assert "stage llm: cached de-quantized fp32 checkpoint of HuggingFaceTB/SmolLM2-135M-Instruct" in ray.stderr
    assert table(tmp_path / "llm-ray") == table(tmp_path / "llm-local")
    assert same_runs(tmp_path / "llm-local", tmp_path / "llm-ray") == []
    m = {s["name"]: s for s in json.loads((tmp_path / "llm-ray" / "manifest.json").read_text())["stages"]}
    assert m["llm"]["stats"]["windows"] == 4
    assert "listwise, 4 calls over 2 queries" in local.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_an_address_where_no_cluster_answers_is_one_line_before_any_stage(tmp_path, tiny, address):
    addr = address.format(port=free_port())
    cfg = config(tmp_path, tiny, "x", "cache", f"engine: {{type: ray, address: '{addr}'}}\n")
    r = stagebench_cli("run", cfg, cwd=REPO, env=ENV)
    assert r.returncode == 2, r.stderr
    err = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(err) == 1 and f"engine.address: no Ray cluster answers at {addr}" in err[0], r.stderr
    assert str(cfg) in err[0]
    assert "dataset" not in r.stderr and not (tmp_path / "x").exists() and not (tmp_path / "cache").exists()
