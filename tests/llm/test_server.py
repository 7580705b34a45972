"""llm_rerank against a real OpenAI-compatible server on 127.0.0.1 (llm-katan), through the CLI.

The server is started and stopped by each test. Its echo backend answers without a model and
injects failures (500s at random, 429 after N requests, latency); its transformers backend
serves the bundled SmolLM2 model, whose answers must equal the in-process backend's."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import smollm2_folder, stagebench_cli

pytestmark = pytest.mark.slow

KATAN = Path(sys.executable).parent / "llm-katan"
KEY = "test-key-123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def katan(tmp_path: Path, *flags: str, port: int | None = None, model: str = "echo-model", backend: str = "echo",
          name: str = "echo-model", procs: list | None = None):  # fmt: skip
    """An llm-katan server on 127.0.0.1; yields its base URL, stops it afterwards (``procs``: gets
    the server's process, for a test that kills it)."""
    port = port or free_port()
    log = open(tmp_path / f"katan-{port}-{time.monotonic_ns()}.log", "w")
    proc = subprocess.Popen([str(KATAN), "-m", model, "-n", name, "--backend", backend, "--host", "127.0.0.1",
                             "--port", str(port), "--stats-file", str(tmp_path / "katan-stats.json"),
                             "--log-level", "warning", *flags], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    if procs is not None:
        procs.append(proc)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llm-katan exited with {proc.returncode}: {Path(log.name).read_text()[-2000:]}")
            try:
                req = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {KEY}"})
                with urllib.request.urlopen(req, timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def config(tmp_path: Path, dataset: Path, llm: str, name: str = "t", queries: int = 4) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"""name: {name}
output: {tmp_path / name}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {dataset}, split: test, max_queries: {queries}}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 30}}}}
  - {{name: llm, type: llm_rerank, inputs: [bm25], params: {llm}}}
evaluation: {{metrics: [nDCG@10, RR@10]}}
""")
    return cfg


def echo_params(url: str, **extra) -> str:
    p = {"backend": "openai", "model": "echo-model", "base_url": url, "api_key_env": "KATAN_KEY", "top_n": 10,
         "window": 5, "stride": 3, "backoff": 0.01, **extra}  # fmt: skip
    return json.dumps(p)


def env(key: str | None = KEY) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "KATAN_KEY"}
    if key is not None:
        e["KATAN_KEY"] = key
    return {**e, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def llm_stats(out: Path) -> dict:
    m = json.loads((out / "manifest.json").read_text())
    return next(s for s in m["stages"] if s["name"] == "llm")["stats"]


def input_order(out: Path, stage: str) -> dict[str, list[str]]:
    got: dict[str, list[str]] = {}
    for line in (out / "runs" / f"{stage}.trec").read_text().splitlines():
        q, _, d, *_ = line.split()
        got.setdefault(q, []).append(d)
    return got


WINDOWS = 4 * 3  # 4 queries; top 10 in windows of 5, stride 3: [5,10) [2,7) [0,5)


def test_a_normal_run_through_the_server_and_a_rerun_that_asks_nothing(tmp_path, small_synthetic):
    with katan(tmp_path) as url:
        cfg = config(tmp_path, small_synthetic, echo_params(url))
        r = stagebench_cli("run", cfg, env=env())
        assert r.returncode == 0, r.stderr[-3000:]
        out = tmp_path / "t"
        s = llm_stats(out)
        # the echo server repeats the prompt: ids 1..n in order, then the prompt's example "[2] > [1] > [3]",
        # whose repeats are dropped: every window is read as its input order, repaired (duplicates)
        assert s["windows"] == WINDOWS and s["repaired"] == WINDOWS and s["repairs"]["duplicate"] == WINDOWS
        assert s["ok"] == s["fallback"] == s["failed"] == 0 and s["prompt_tokens"] > 0
        assert input_order(out, "llm") == input_order(out, "bm25")
        table = (out / "stage_table.txt").read_text()
        assert "LLM reranking" in table and "100.0%" in table
        m = json.loads((out / "manifest.json").read_text())
        ident = next(s for s in m["resolved"]["stages"] if s["name"] == "llm")["key_parts"]["identity"]["llm"]
        assert ident == {"backend": "openai", "base_url": url, "model": "echo-model",
                         "served": {"id": "echo-model", "owned_by": "llm-katan"}}  # fmt: skip
        assert KEY not in (out / "manifest.json").read_text()  # the key's NAME is recorded, never the key
        r2 = stagebench_cli("run", cfg, env=env())
        assert r2.returncode == 0 and "stage llm: cached run" in r2.stderr


def test_injected_500s_are_retried_and_counted(tmp_path, small_synthetic):
    with katan(tmp_path, "--error-rate", "0.5") as url:
        r = stagebench_cli("run", config(tmp_path, small_synthetic, echo_params(url, retries=40)), env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    s = llm_stats(tmp_path / "t")
    assert s["failed"] == 0 and s["retries"] > 0 and s["windows"] == WINDOWS


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("stagebench: error:")]


def test_429s_after_retries_stop_the_run_or_are_accepted_and_the_next_run_asks_only_for_those(tmp_path, small_synthetic):
    port = free_port()
    with katan(tmp_path, "--rate-limit-after", "4", port=port) as url:
        # failed_calls: stop (the default): one line, exit 2, no results; the answers that came are cached
        r = stagebench_cli("run", config(tmp_path, small_synthetic, echo_params(url, retries=2, concurrency=1)), env=env())
        assert r.returncode == 2, r.stderr[-3000:]
        assert len(error_lines(r.stderr)) == 1 and "the request failed after every retry (HTTP 429" in r.stderr
        assert "retry 1 of 2" in r.stderr and "retry 2 of 2" in r.stderr  # retries show at the default log level
        assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.partial-*"))
        cfg = config(tmp_path, small_synthetic, echo_params(url, retries=2, failed_calls="accept"))
        r = stagebench_cli("run", cfg, env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    s = llm_stats(tmp_path / "t")
    assert s["failed"] == WINDOWS - 4 and s["retries"] == 2 * (WINDOWS - 4) and s["windows_from_cache"] == 4
    assert "HTTP 429" in r.stderr and "not cached" in r.stderr
    table = (tmp_path / "t" / "stage_table.txt").read_text()
    assert f"(!) llm: {WINDOWS - 4} of {WINDOWS} LLM calls failed after every retry and were accepted" in table
    assert "llm (!)" in table and "retries" not in table  # retries depend on the server's load: manifest and report
    assert ">LLM retries<" in (tmp_path / "t" / "report.html").read_text()
    with katan(tmp_path, port=port):  # the server is healthy again, at the same address
        r = stagebench_cli("run", cfg, env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    s = llm_stats(tmp_path / "t")
    assert s["failed"] == 0 and s["windows_from_cache"] == 4 and "4 from the cache, 8 asked" in r.stderr


def test_a_server_slower_than_the_timeout(tmp_path, small_synthetic):
    with katan(tmp_path, "--latency-ms", "3000") as url:
        r = stagebench_cli("run", config(tmp_path, small_synthetic, echo_params(url, timeout=0.3, retries=1,
                                                                                failed_calls="accept")), env=env())  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    s = llm_stats(tmp_path / "t")
    # it never answers within the timeout: once two requests in a row time out and nothing has come for a
    # whole timeout, the server counts as hung (issue 71): every call fails at once, not each after its retry
    assert s["failed"] == WINDOWS and s["retries"] < WINDOWS
    assert "timed out" in r.stderr and "it is hung, or far too slow for this timeout" in r.stderr


def test_the_server_killed_mid_run_stops_the_run_or_is_marked_when_accepted(tmp_path, small_synthetic):
    """The server dies after a few windows: by default one line naming the query and the window,
    exit 2, no results folder; with failed_calls: accept, exit 0 and the row marked."""
    for policy in ("stop", "accept"):
        procs: list = []
        with katan(tmp_path, "--latency-ms", "300", procs=procs) as url:
            cfg = config(tmp_path, small_synthetic, echo_params(url, concurrency=1, retries=1, failed_calls=policy),
                         name=policy)  # fmt: skip
            run = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], env=env(), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            answers = tmp_path / "cache" / "llm"
            deadline = time.monotonic() + 120
            before = len(list(answers.glob("[!.]*"))) if answers.is_dir() else 0
            while not (answers.is_dir() and len(list(answers.glob("[!.]*"))) >= before + 3):
                assert run.poll() is None and time.monotonic() < deadline, "the run ended before the server died"
                time.sleep(0.05)
            procs[0].kill()
            out, err = run.communicate(timeout=120)
        if policy == "stop":
            assert run.returncode == 2, err[-3000:]
            lines = error_lines(err)
            assert len(lines) == 1 and lines[0].startswith("stagebench: error: stage llm: query '"), err[-3000:]
            assert "the request failed after every retry (" in lines[0] and "no results were written" in lines[0]
            assert not (tmp_path / "stop").exists() and not list(tmp_path.glob(".stop.partial-*"))
        else:
            assert run.returncode == 0, err[-3000:]
            s = llm_stats(tmp_path / "accept")
            assert s["failed"] > 0
            table = (tmp_path / "accept" / "stage_table.txt").read_text()
            assert "llm (!)" in table and f"(!) llm: {s['failed']} of {WINDOWS} LLM calls failed" in table


def test_a_busy_server_is_not_sent_more_than_it_can_answer(tmp_path, small_synthetic):
    """A one-at-a-time server taking 1.5 s an answer, 4 queries asked at once, 4 s to answer: the
    queued requests time out; the requests in flight are lowered, so retries queue behind the
    answers being computed instead of piling on (before: 11 retries, 16 generations for 5
    windows). Seconds per query are the calls' wall time, not their latencies summed."""
    with katan(tmp_path, "--latency-ms", "1500") as url:
        llm = echo_params(url, top_n=5, window=5, stride=5, concurrency=4, timeout=4.0, retries=5, backoff=0.5)
        r = stagebench_cli("run", config(tmp_path, small_synthetic, llm, queries=5), env=env())
        time.sleep(6)  # the answers the client gave up on finish on the server
        req = urllib.request.Request(url.rsplit("/v1", 1)[0] + "/stats", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            served = json.loads(resp.read())["total"]
    assert r.returncode == 0, r.stderr[-3000:]
    s = llm_stats(tmp_path / "t")
    assert s["windows"] == 5 and s["failed"] == 0
    assert "requests in flight lowered to 2 of 4" in r.stderr and "retry 1 of 5 in 0.5 s" in r.stderr
    assert 1 <= s["retries"] <= 4, s
    assert served == 2 + 5 + s["retries"]  # the model listing (and its readiness probe), then every request sent
    assert abs(s["seconds_per_query"] - s["wall_seconds"] / 5) < 0.001


def test_a_bad_api_key_is_one_clear_error_and_no_results(tmp_path, small_synthetic):
    with katan(tmp_path, "--validate-keys", "--api-keys", f"openai={KEY}") as url:
        cfg = config(tmp_path, small_synthetic, echo_params(url))
        r = stagebench_cli("run", cfg, env=env("wrong-key"))
        missing = stagebench_cli("run", cfg, env=env(None))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the request (HTTP 401" in lines[0] and "$KATAN_KEY" in lines[0], r.stderr
    assert missing.returncode == 2 and "KATAN_KEY (api_key_env) is not set" in missing.stderr
    assert not (tmp_path / "t").exists()


def test_a_server_that_is_down_fails_before_anything_runs(tmp_path, small_synthetic):
    url = f"http://127.0.0.1:{free_port()}/v1"
    r = stagebench_cli("run", config(tmp_path, small_synthetic, echo_params(url)), env=env())
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "does not answer" in r.stderr and url in r.stderr
    assert not (tmp_path / "t").exists() and not (tmp_path / "cache" / "runs").exists()  # not even BM25 ran


def test_a_server_without_the_model(tmp_path, small_synthetic):
    with katan(tmp_path) as url:
        p = json.loads(echo_params(url))
        p["model"] = "gpt-7"
        r = stagebench_cli("run", config(tmp_path, small_synthetic, json.dumps(p)), env=env())
    assert r.returncode == 2 and "does not serve model 'gpt-7' (it serves: echo-model)" in r.stderr


def test_malformed_answers_are_repaired_and_counted(tmp_path, small_synthetic):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("{query}\n{passages}\n<think>[4] > [3]</think>Answer like [9] > [2] > [2] > [0]")
    with katan(tmp_path) as url:
        r = stagebench_cli("run", config(tmp_path, small_synthetic, echo_params(url, prompt=str(prompt))), env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    s = llm_stats(tmp_path / "t")
    assert s["repaired"] == WINDOWS and s["repairs"] == {"duplicate": WINDOWS, "out_of_range": WINDOWS, "missing": 0}


def test_kill_9_during_the_llm_stage_resumes_at_the_next_window(tmp_path, small_synthetic):
    with katan(tmp_path, "--latency-ms", "400") as url:
        llm = echo_params(url, concurrency=1)
        (tmp_path / "x").mkdir()
        ref = config(tmp_path, small_synthetic, llm)  # uninterrupted: results in tmp/t, cache in tmp/cache
        assert stagebench_cli("run", ref, env=env()).returncode == 0
        cfg = config(tmp_path / "x", small_synthetic, llm)  # killed and resumed: tmp/x/t, tmp/x/cache
        proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], env=env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        answers = tmp_path / "x" / "cache" / "llm"
        deadline = time.monotonic() + 120
        while not (answers.is_dir() and len([p for p in answers.iterdir() if not p.name.startswith(".")]) >= 5):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = len([p for p in answers.iterdir() if not p.name.startswith(".")])
        assert 5 <= done < WINDOWS and not (tmp_path / "x" / "t").exists()
        r = stagebench_cli("run", cfg, env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{done} from the cache, {WINDOWS - done} asked" in r.stderr
    a, b = tmp_path / "t", tmp_path / "x" / "t"
    for f in ("stage_table.txt", "stage_table.json", "stage_table.csv", "stage_table.md", "runs/llm.trec",
              "per_query.csv"):  # fmt: skip
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_a_real_model_served_by_the_server_answers_as_the_same_model_in_process(tmp_path, small_synthetic, model_entries):
    """SmolLM2-135M-Instruct behind llm-katan's transformers backend, greedy: the server run and
    the in-process run are the same run, with the same tokens counted. The model is the bundled GGUF
    file de-quantized into a plain transformers folder, as a server loads it."""
    model = smollm2_folder(model_entries, tmp_path / "smollm2")
    params = {"top_n": 6, "window": 4, "stride": 2}
    with katan(tmp_path, "--no-quantize", "--max-tokens", "512", model=str(model), backend="transformers",
               name="smollm2") as url:  # fmt: skip
        server = {**params, "backend": "openai", "model": "smollm2", "base_url": url, "api_key_env": "KATAN_KEY"}
        r = stagebench_cli("run", config(tmp_path, small_synthetic, json.dumps(server), name="srv", queries=2), env=env())
        assert r.returncode == 0, r.stderr[-3000:]
    local = {**params, "model": str(model)}
    r = stagebench_cli("run", config(tmp_path, small_synthetic, json.dumps(local), name="loc", queries=2), env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    srv, loc = llm_stats(tmp_path / "srv"), llm_stats(tmp_path / "loc")
    assert srv["windows"] == loc["windows"] == 4
    for k in ("ok", "repaired", "fallback", "failed", "repairs", "prompt_tokens", "completion_tokens"):
        assert srv[k] == loc[k], k
    assert input_order(tmp_path / "srv", "llm") == input_order(tmp_path / "loc", "llm")
