"""Servers that fail the way servers in the field do: one that never answers (``failed_calls: stop``
stops at once: no query, window or retry starts after a call failed for good, and the run ends within
one request timeout), and one that answers ``content: null`` (a failed call, never cached) - for the
reranker and for the judge. Real HTTP servers on 127.0.0.1 (tests/llm/plain_server.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import stagebench_cli
from tests.llm.plain_server import MODEL, PlainServer

pytestmark = pytest.mark.slow  # real commands against real servers

ENV = {**{k: v for k, v in os.environ.items()}, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def config(tmp_path: Path, dataset: Path, name: str, llm: dict | None = None, judge: dict | None = None) -> Path:
    stages = "  - {name: bm25, type: bm25, params: {top_k: 30}}\n"
    if llm is not None:
        stages += f"  - {{name: llm, type: llm_rerank, inputs: [bm25], params: {json.dumps(llm)}}}\n"
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"name: {name}\noutput: {tmp_path / name}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {dataset}, split: test, max_queries: 6}}\nstages:\n{stages}"
                   "evaluation: {metrics: [nDCG@10], latency_queries: 0, permutations: 100, bootstrap: 100}\n"
                   + (f"judge: {json.dumps(judge)}\n" if judge else ""))  # fmt: skip
    return cfg


def llm(url: str, **extra) -> dict:
    return {"backend": "openai", "model": MODEL, "base_url": url, "top_n": 10, "window": 5, "stride": 3, **extra}


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("stagebench: error:")]


def answers(tmp_path: Path) -> list[Path]:
    d = tmp_path / "cache" / "llm"
    return [p for p in d.iterdir() if not p.name.startswith(".")] if d.is_dir() else []


def test_a_call_that_failed_for_good_stops_the_run_at_once(tmp_path, small_synthetic):
    """Two queries in flight, each call timing out: two timeouts in a row with no answer between make
    the server hung (issue 71), so neither is retried, no further query starts, and the one line says
    why."""
    timeout = 3.0
    with PlainServer("hang") as srv:
        cfg = config(tmp_path, small_synthetic, "t", llm(srv.url, timeout=timeout, retries=1, backoff=0.5,
                                                           concurrency=2, failed_calls="stop"))  # fmt: skip
        r = stagebench_cli("run", cfg, env=ENV)
        ended = time.monotonic()
        posts = list(srv.posts)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = errors(r.stderr)
    assert len(lines) == 1 and "the server answered none of 2 requests in a row within the timeout" in lines[0], lines
    assert len(posts) == 2, posts  # q1 and q2; no retry, no third query
    failed_at = posts[-1] + timeout  # the second timeout: the server counts as hung
    assert ended - failed_at < timeout, f"the run ended {ended - failed_at:.1f} s after the failure"
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.partial-*"))


def test_content_null_is_a_failed_call_that_is_never_cached(tmp_path, small_synthetic):
    with PlainServer("null") as srv:
        params = llm(srv.url, retries=1, backoff=0.01, concurrency=1)
        r = stagebench_cli("run", config(tmp_path, small_synthetic, "stop", params), env=ENV)
        assert r.returncode == 2, r.stderr[-3000:]
        assert len(errors(r.stderr)) == 1 and "the server answered without text (choices[0].message.content is null" \
            in errors(r.stderr)[0]  # fmt: skip
        assert len(srv.posts) == 2 and answers(tmp_path) == []  # one call, two attempts; nothing cached
        accept = config(tmp_path, small_synthetic, "accept", {**params, "failed_calls": "accept"})
        r = stagebench_cli("run", accept, env=ENV)
        assert r.returncode == 0, r.stderr[-3000:]
        stats = json.loads((tmp_path / "accept" / "manifest.json").read_text())["stages"][1]["stats"]
        sent = len(srv.posts)
        assert stats["failed"] == stats["windows"] > 0 and sent == 2 + 2 * stats["windows"] and answers(tmp_path) == []
        r = stagebench_cli("run", accept, env=ENV)  # asked again: nothing was cached
        assert r.returncode == 0 and len(srv.posts) == sent + 2 * stats["windows"]


def test_the_judge_stops_on_a_failed_pair_or_when_accepted_counts_its_holes(tmp_path, small_synthetic):
    with PlainServer("null") as srv:
        section = {"backend": "openai", "model": MODEL, "base_url": srv.url, "depth": 3, "sample": 0, "retries": 0,
                   "concurrency": 2}  # fmt: skip
        r = stagebench_cli("run", config(tmp_path, small_synthetic, "stop", judge=section), env=ENV)
        assert r.returncode == 2, r.stderr[-3000:]
        lines = errors(r.stderr)
        assert len(lines) == 1 and lines[0].startswith("stagebench: error: judge: a pair's request failed after every "
                                                       "retry (the server answered without text"), lines  # fmt: skip
        assert "failed_calls: accept keeps such pairs as holes" in lines[0]
        assert not (tmp_path / "stop").exists() and len(srv.posts) <= 2  # two in flight, none started after
        r = stagebench_cli("run", config(tmp_path, small_synthetic, "accept", judge={**section, "failed_calls": "accept"}),
                           env=ENV)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
    judge = json.loads((tmp_path / "accept" / "manifest.json").read_text())["judge"]
    assert judge["outcomes"]["failed"] == judge["holes"] > 0
    assert f"failed {judge['holes']} (failed and unusable pairs stay holes)" in \
        (tmp_path / "accept" / "judge" / "agreement.txt").read_text()  # fmt: skip
    warned = [line for line in r.stderr.splitlines() if "failed after every retry" in line]
    assert len(warned) == 1 and f"{judge['holes']} of {judge['holes']} pairs failed" in warned[0]  # one line, not one a pair


def test_a_hung_server_ends_every_request_in_bounded_time_with_one_request_in_flight():
    """Issue 71: one request in flight, 3 retries each, 4 requests: without the rule every request
    queued behind the lowered limit waits out its every retry (16 timeouts); with it the second
    timeout in a row ends them all."""
    import concurrent.futures

    from stagebench.llm.http import OpenAIBackend
    from stagebench.llm.request import ChatRequest, RequestFailed

    timeout = 1.0
    with PlainServer("hang") as srv:
        backend = OpenAIBackend(srv.url, MODEL, timeout=timeout, retries=3, backoff=0.2, concurrency=1)
        req = ChatRequest((("user", "hello"),), 4, 0.0, 0)
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(backend.complete, req) for _ in range(4)]
            errors_ = [f.exception() for f in futures]
        took = time.monotonic() - t0
        posts = len(srv.posts)
    assert all(isinstance(e, RequestFailed) and "hung" in str(e) for e in errors_), errors_
    assert posts == 2 and took < 2 * timeout + 1.5, (posts, took)


def test_a_busy_server_answering_one_request_at_a_time_is_waited_for_not_taken_for_hung():
    """Issue 80's case at 0.4 of its times: a server that answers one request at a time in 0.6 s, 4 requests
    in flight, a 1.6 s timeout, 3 retries, 8 requests: the third and fourth time out while the server still
    works on them, and what follows waits behind that dropped work; that is not the server's silence, so
    every request is answered (the rule took it for hung and gave up)."""
    import concurrent.futures

    from stagebench.llm.http import OpenAIBackend
    from stagebench.llm.request import ChatRequest

    with PlainServer("serial", delay=0.6) as srv:
        backend = OpenAIBackend(srv.url, MODEL, timeout=1.6, retries=3, backoff=0.2, concurrency=4)
        req = ChatRequest((("user", "hello"),), 4, 0.0, 0)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(backend.complete, req) for _ in range(8)]
            done = [f.exception() or f.result() for f in futures]
        sent = len(srv.posts)
    assert all(not isinstance(d, BaseException) and d.text == "ok" for d in done), done
    assert sent > 8  # some timed out and were sent again: the case the rule must not take for a hung server
