"""The LLM response cache and cost figures, from their definitions.

* Every field of a request changes its answer's cache key (derived from the request's fields, so a
  field added tomorrow is covered).
* For every method and every param the stage keys (derived from the params' declarations): a run
  through a warm answer cache (filled under the default params) equals the run computed with no
  cache. The scripted backend below answers as a sampler would - its answer depends on every
  decoding setting of the request - so an answer cached under an incomplete key shows as a
  different run. The params declared as not changing the output (``unkeyed_params``) are checked
  to leave the run as it is.
* Seconds and tokens per query divide by the queries, not the calls.

The backend is scripted (it unit-tests the stage's cache and counting, not a model); the real model
and server paths are tests/llm/test_families.py and tests/llm/test_server.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
from pathlib import Path

import pytest

from stagebench.cache import Cache
from stagebench.data import Dataset
from stagebench.params import build
from stagebench.record import LLMStats
from stagebench.llm.chat import cached_answer
from stagebench.llm.request import ChatRequest, Completion, RequestFailed
from stagebench.results.cost import quality_cost
from stagebench.results.folder import RunFolder
from stagebench.stages import StageContext
from stagebench.stages.llm_rerank import LLMRerankParams, LLMRerankStage
from tests.conftest import REPO
from tests.scripted_chat import ScriptedChat

N_DOCS = 9
SECONDS = 0.1234  # each answer's model time (four decimals: the stats keep three)
METHODS = ("listwise", "pointwise", "pairwise", "setwise")
#: keyed through the stage's identity() (the backend's identity, the prompt file's digest): tests/test_cache_keys.py
IDENTITY = {"model", "backend", "source", "gguf_file", "base_url", "device", "precision", "prompt"}
#: another valid value for every keyed param; the test fails when a param is added without one here
OTHER = {"temperature": 0.7, "seed": 5, "max_new_tokens": 40, "top_n": 7, "window": 5, "stride": 3, "passes": 2,
         "max_doc_words": 2, "system_prompt": "Rank well.", "depths": [4, 9], "method": None, "labels": "esci",
         "top_k": 4, "set_size": 3, "batch_size": 2}  # fmt: skip
BASE = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "scripted", "top_n": 8, "window": 4,
        "stride": 2, "top_k": 3, "set_size": 4}  # fmt: skip


def _mix(req: ChatRequest) -> int:
    """A number drawn from every field of the request (not from its cache-key form)."""
    parts = [repr(getattr(req, f.name)) for f in dataclasses.fields(ChatRequest)]
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:8], "big")


class Sampler(ScriptedChat):
    """Answers like a sampling model: which order or label it gives depends on the whole request."""

    def __init__(self):
        super().__init__(name="sampler")

    def reply(self, req: ChatRequest) -> Completion:
        h, user = _mix(req), req.messages[-1][1]
        if req.labels:
            weights = [((h >> (8 * i)) & 0xFF) + 1 for i in range(len(req.labels))]
            total = sum(weights)
            lp = tuple(math.log(w / total) for w in weights)
            return Completion(req.labels[max(range(len(lp)), key=lambda i: lp[i])], len(user.split()), 1, SECONDS,
                              label_logprobs=lp)  # fmt: skip
        shown = [int(i) for i in re.findall(r"^\[(\d+)\]", user, re.M)]
        order = sorted(shown, key=lambda i: hashlib.sha256(f"{h}:{i}".encode()).digest())
        return Completion(" > ".join(f"[{i}]" for i in order), len(user.split()), len(order), SECONDS)


def dataset() -> Dataset:
    corpus = {f"d{i}": {"text": f"product {i} colour {i % 3} size {i % 4}"} for i in range(N_DOCS)}
    queries = {"q1": "product colour", "q2": "size"}
    return Dataset("t", corpus, queries, {q: {"d8": 3} for q in queries}, "{text}")


def input_run():
    return {q: {f"d{i}": float(N_DOCS - i) for i in range(N_DOCS)} for q in ("q1", "q2")}


def asked(family: str, queries=("q1", "q2"), backend=None, cache: Cache | None = None, **changes) -> tuple:
    """The stage's output and every (request, answer) it asked for (not those served from ``cache``)."""
    params = {**BASE, "method": family, **changes}
    st = LLMRerankStage("llm", build(LLMRerankParams, params, "params"))
    st._backend = backend or Sampler()
    out = st.apply(StageContext(dataset(), cache), [{q: r for q, r in input_run().items() if q in queries}])
    return out, st._backend.asked


def rerank(family: str, cache: Cache | None, **changes):
    """The stage's output and how many questions it asked."""
    out, calls = asked(family, cache=cache, **changes)
    return out, len(calls)


def keyed_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(LLMRerankParams)
            if f.name not in LLMRerankStage.unkeyed_params and f.name not in IDENTITY]  # fmt: skip


def test_every_request_field_changes_the_answer_key(tmp_path):
    cache = Cache(tmp_path / "cache")
    backend = Sampler()
    base = ChatRequest((("system", "s"), ("user", "u")), 32, 0.0, 0, ())
    other = {"messages": (("system", "s"), ("user", "u2")), "max_new_tokens": 33, "temperature": 0.5, "seed": 1,
             "labels": ("Yes", "No")}  # fmt: skip
    assert set(other) == {f.name for f in dataclasses.fields(ChatRequest)}
    ask = lambda r, identity={"m": 1}: cached_answer(cache, backend, identity, r, "m", "t", "call")  # noqa: E731
    assert ask(base)[1] is False and ask(base)[1] is True  # stored, then served
    for name, value in other.items():
        changed = dataclasses.replace(base, **{name: value})
        assert ask(changed)[1] is False, f"a request differing only in {name} was served the cached answer"
    assert ask(base, {"m": 2})[1] is False  # another model
    assert backend.calls == 1 + len(other) + 1


def test_every_keyed_param_is_given_another_value_here():
    assert set(keyed_fields()) == set(OTHER)


@pytest.mark.parametrize("method", METHODS)
def test_a_warm_answer_cache_gives_what_a_fresh_run_gives(method, tmp_path):
    cache = Cache(tmp_path / "cache")
    base, asked = rerank(method, cache)
    assert asked > 0 and rerank(method, cache)[1] == 0  # a rerun asks nothing
    for name in keyed_fields():
        value = OTHER[name] if name != "method" else next(m for m in METHODS if m != method)
        fresh, _ = rerank(method, None, **{name: value})
        warm, _ = rerank(method, cache, **{name: value})
        assert warm.run == fresh.run and warm.depth_runs == fresh.depth_runs, \
            f"{method}: {name} changed, yet answers cached under the old value were served"  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
def test_params_declared_unkeyed_do_not_change_the_run(method):
    base, _ = rerank(method, None)
    other = {"concurrency": 1, "timeout": 3.0, "retries": 0, "backoff": 0.0, "price_per_1k_tokens": 2.0,
             "api_key_env": "SOME_KEY", "failed_calls": "accept"}  # fmt: skip
    assert set(other) == set(LLMRerankStage.unkeyed_params)
    for name, value in other.items():
        out, _ = rerank(method, None, **{name: value})
        assert out.run == base.run, f"{method}: {name} is declared not to change the output but does"


class Slow(Sampler):
    """A sampler that takes ``PAUSE`` seconds per answer, one at a time (a one-at-a-time server)."""

    PAUSE = 0.02

    def complete(self, req: ChatRequest) -> Completion:
        with self.lock:
            time.sleep(self.PAUSE)
        return super().complete(req)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("queries", [("q1",), ("q1", "q2")])
def test_seconds_per_query_divide_the_wall_time_by_the_queries(method, queries):
    t0 = time.perf_counter()
    out, calls = asked(method, queries, backend=Slow())
    took = time.perf_counter() - t0
    st, n = out.stats, len(calls)
    assert isinstance(st, LLMStats) and st.queries == len(queries) and st.windows == n > len(queries)
    assert st.model_seconds == round(SECONDS * n, 3)  # the answers' own seconds, summed
    # the calls' wall time: at least the one-at-a-time answers, at most the whole apply
    assert Slow.PAUSE * n <= st.wall_seconds <= took + 0.001
    assert st.seconds_per_query == pytest.approx(st.wall_seconds / len(queries), abs=0.0006)  # both kept to 3 decimals
    assert st.reproducibility and st.reproducibility.startswith("greedy" if method == "listwise" else "label probabilities")
    assert st.prompt_tokens == sum(c.prompt_tokens for _, c in calls) > 0
    assert st.completion_tokens == sum(c.completion_tokens for _, c in calls) > 0
    assert st.tokens == st.prompt_tokens + st.completion_tokens and st.method == method


@pytest.mark.parametrize("method", METHODS)
def test_requests_carry_the_system_message_the_user_message_and_the_answer_budget(method):
    _, calls = asked(method, system_prompt="Be brief.")
    for req, _ in calls:
        assert [role for role, _ in req.messages] == ["system", "user"] and req.messages[0][1] == "Be brief."
        if method == "listwise":  # the default budget: 8 tokens per candidate shown + 16
            assert req.max_new_tokens == 8 * len(re.findall(r"^\[\d+\]", req.messages[1][1], re.M)) + 16
        assert (req.temperature, req.seed) == (0.0, 0)
        assert req.labels == {"listwise": (), "pointwise": ("Yes", "No"), "pairwise": ("A", "B"),
                              "setwise": ("A", "B", "C", "D")[: max(len(req.labels), 2)]}[method]  # fmt: skip
    _, calls = asked(method, system_prompt="", max_new_tokens=40, temperature=0.5, seed=3)
    assert all([r for r, _ in r_.messages] == ["user"] for r_, _ in calls)
    assert all((r.max_new_tokens, r.temperature, r.seed) == (40, 0.5, 3) for r, _ in calls)


def test_llm_tokens_per_query_on_the_quality_cost_plane_divide_by_the_queries():
    """The committed four-family comparison: tokens per query = the manifest's prompt + completion
    tokens over the table's scored queries, whatever the number of calls."""
    folder = RunFolder.open(REPO / "results" / "llm_families")
    raw = json.loads((REPO / "results" / "llm_families" / "manifest.json").read_text())
    n_q = json.loads((REPO / "results" / "llm_families" / "stage_table.json").read_text())[0]["queries"]
    points = {p.stage: p for p in quality_cost(folder.table(), folder.stages)}
    llm = [s for s in raw["stages"] if (s.get("stats") or {}).get("kind") == "llm"]
    assert len(llm) == 4
    assert sum(s["stats"]["windows"] != n_q for s in llm) == 3  # so dividing by the calls would show
    for s in llm:
        st = s["stats"]
        assert points[s["name"]].work_per_query == pytest.approx((st["prompt_tokens"] + st["completion_tokens"]) / n_q)


def test_the_cost_column_prices_the_tokens():
    st = LLMStats(queries=2, windows=3, outcomes={}, repairs={}, prompt_tokens=1500, completion_tokens=500, retries=0,
                  model_seconds=1.0, seconds_per_query=0.5, windows_from_cache=0)  # fmt: skip
    assert st.priced(0.01).pricing.cost == pytest.approx(2000 / 1000 * 0.01)
    assert set(LLMRerankStage.unkeyed_params) == {"api_key_env", "concurrency", "timeout", "retries", "backoff",
                                                  "price_per_1k_tokens", "failed_calls"}  # fmt: skip
    assert Path(REPO / "results" / "llm_families" / "manifest.json").is_file()


def test_a_failed_window_is_logged_with_its_positions_and_the_error(caplog):  # failed_calls: accept
    class Failing(Sampler):
        def complete(self, req):
            if "product 0 " in req.messages[-1][1]:  # d0, the input's first: the last window (a sweep goes up)
                raise RequestFailed("HTTP 503 (after 2 attempts)", 2)
            return super().complete(req)

    with caplog.at_level("WARNING", logger="stagebench"):
        out, _ = asked("listwise", ("q1",), backend=Failing(), failed_calls="accept")
    lines = [r.getMessage() for r in caplog.records if "request failed" in r.getMessage()]
    # windows of 4, stride 2, over the top 8: products 5-8, 3-6, 1-4 (1-based, inclusive)
    assert lines == ["stage llm: query 'q1' products 1-4: request failed: HTTP 503 (after 2 attempts); the window keeps "
                     "its input order"]  # fmt: skip
    assert out.stats.failed == 1 and out.stats.retries == 1 and out.incomplete


@pytest.mark.parametrize("method", METHODS)
def test_each_cached_answer_names_its_model_and_stage_for_the_cache_listing(method, tmp_path):
    """`stagebench cache ls` shows an answer's model; the entry's meta holds it and the stage."""
    cache = Cache(tmp_path / "cache")
    rerank(method, cache)
    rows = [r for r in cache.list() if r["kind"] == "llm"]
    assert rows and all(r["meta"].get("model") == "scripted" and r["meta"].get("stage") == "stage llm" for r in rows)
