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


class Board:
    """The answers noted by every copy of a backend, in this process (on Ray: the cluster's key-value store,
    stagebench.runtime.cluster.workers.ClusterNotes, held in tests/runtime/test_engine_order.py)."""

    def __init__(self) -> None:
        self.last: tuple[float, float] | None = None

    def answered(self, seconds: float) -> None:
        self.last = (time.time(), seconds)

    def latest(self) -> tuple[float, float] | None:
        return self.last

    def forget(self) -> None:
        self.last = None


def test_a_copy_of_the_backend_shared_by_ray_workers_hears_the_others_answers_and_counts_their_drops():
    """Issue 94's rule, at the issue's times (a server answering one request at a time in 1.5 s, a 4 s timeout):
    one of two workers' copies of the backend (shared_by(2), the answers noted on a board every copy sees)
    has three of its requests time out in a row. Its first requests queued behind the other worker's and it
    has had no answer of its own for 9 s, but the other noted one 1 s ago: the server is busy, not hung.
    With no answer anywhere for 12 s, its own answers having taken 1.5 s and 3 of its requests given up on
    before: at its second timeout in a row (4 dropped) the server may still owe every worker's 4 dropped
    requests (4 + 4 x 2 x 1.5 = 16 s), so not hung yet; a copy that counted its own drops only (4 + 4 x 1.5 =
    10 s) would call it hung; after 17 s it is hung. A silent server with
    no answer noted anywhere is hung after the timeout, as in one process."""
    from stagebench.llm.http import OpenAIBackend

    def copy(board: Board | None) -> OpenAIBackend:
        b = OpenAIBackend("http://127.0.0.1:9", MODEL, timeout=4.0, retries=3, concurrency=4)
        b.shared_by(2, board)
        return b

    def three_timeouts(b: OpenAIBackend, first_sent_ago: float) -> str:
        now = time.monotonic()
        if b._since is None:
            b._since = now - first_sent_ago  # the rule's clock: its first request (or its last answer)
        for _ in range(3):
            b._heard(True, now - 4.0)
        return b._hung

    board = Board()
    board.last = (time.time() - 1.0, 3.0)
    assert three_timeouts(copy(board), 9.0) == ""  # the other worker heard from it a second ago
    assert "it is hung" in three_timeouts(copy(None), 9.0)  # the same silence, the other's answer unseen
    for quiet, hung in ((12.0, False), (17.0, True)):
        board = Board()
        board.last = (time.time() - quiet, 1.5)
        b = copy(board)
        b._answer_times, b._since, b._dropped = [1.5], time.monotonic() - quiet, 3
        assert ("it is hung" in three_timeouts(b, quiet)) is hung, quiet
    assert "it is hung" in three_timeouts(copy(Board()), 9.0)  # nothing noted anywhere: silent since its first request
    assert b.sharers == 2 and b._limit.now == 2  # concurrency 4 over 2 workers: 2 in flight on each


def test_a_busy_server_shared_by_two_workers_copies_is_waited_for_not_taken_for_hung():
    """Issue 94: a busy server (one request at a time, 0.3 s each, a 1.2 s timeout) asked by two copies of the backend at
    once, as two Ray workers ask it (neither seeing the other's requests), concurrency 4 across them: each
    copy holds 2 in flight, hears the answers the other noted (a copy whose first requests queued behind the
    other's has no answer of its own yet) and counts the work the server still owes the other's dropped
    requests, so every request is answered. Copies that each thought they were alone took it for hung."""
    import concurrent.futures

    from stagebench.llm.http import OpenAIBackend
    from stagebench.llm.request import ChatRequest

    with PlainServer("serial", delay=0.3) as srv:
        board = Board()
        copies = [OpenAIBackend(srv.url, MODEL, timeout=1.2, retries=3, backoff=0.1, concurrency=4) for _ in range(2)]
        for c in copies:
            c.shared_by(2, board)  # what the LLM stage tells them on a 2-worker Ray engine
        req = ChatRequest((("user", "hello"),), 4, 0.0, 0)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(copies[i % 2].complete, req) for i in range(8)]
            done = [f.exception() or f.result() for f in futures]
        sent = len(srv.posts)
    assert all(not isinstance(d, BaseException) and d.text == "ok" for d in done), done
    assert sent > 8  # some timed out and were sent again: the busy case, not a quiet one
