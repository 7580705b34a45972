"""The llm_rerank stage with a scripted backend (its windows, parsing, counting and cache).

The backend here is a fake that answers from the prompt it is shown: it unit-tests the
stage's own logic. The real model and the real server are in tests/llm/test_server.py."""

from __future__ import annotations

import re

import pytest

from stagebench.cache import Cache
from stagebench.data import Dataset
from stagebench.errors import ConfigError, StagebenchError
from stagebench.llm.listwise import sliding_windows
from stagebench.llm.request import ChatRequest, Completion, RequestFailed
from stagebench.params import build
from stagebench.runs import ranked_ids
from stagebench.stages import StageContext
from stagebench.stages.llm_rerank import LLMRerankParams, LLMRerankStage
from tests.scripted_chat import ScriptedChat

N_DOCS = 30


class Scripted(ScriptedChat):
    """Ranks the shown products by the number in their text ("quality 17"), best first, and
    answers in the form ``answer`` gives."""

    def __init__(self, answer=None, fail_on=None, name="scripted"):
        super().__init__(fail_on=fail_on, name=name)
        self.answer = answer or (lambda ids: " > ".join(f"[{i}]" for i in ids))

    def reply(self, req: ChatRequest) -> Completion:
        user = req.messages[-1][1]
        shown = re.findall(r"^\[(\d+)\] .*?quality (\d+)", user, re.M)
        best = sorted(shown, key=lambda t: -int(t[1]))
        return Completion(self.answer([int(i) for i, _ in best]), prompt_tokens=len(user.split()),
                          completion_tokens=len(best), seconds=0.01)  # fmt: skip


def dataset() -> Dataset:
    # doc d{i} has quality i: the ideal order is d29, d28, ...; the input run has it backwards
    corpus = {f"d{i:02d}": {"text": f"product {i} quality {i}"} for i in range(N_DOCS)}
    queries = {"q1": "best product", "q2": "another"}
    return Dataset("t", corpus, queries, {q: {"d29": 3} for q in queries}, "{text}")


def input_run():
    return {q: {f"d{i:02d}": float(N_DOCS - i) for i in range(N_DOCS)} for q in ("q1", "q2")}


def stage(backend, **params):
    p = build(LLMRerankParams, params, "params")
    st = LLMRerankStage("llm", p)
    st._backend = backend
    return st


def test_one_pass_carries_the_best_candidate_from_the_bottom_to_the_top():
    be = Scripted()
    st = stage(be, top_n=20, window=4, stride=2)
    res = st.apply(StageContext(dataset()), [input_run()])
    out = res.run
    order = ranked_ids(out["q1"])
    # the best of the top 20 (d19, last of the head) bubbles up through every window to rank 1
    assert order[0] == "d19"
    assert sorted(order[:20]) == [f"d{i:02d}" for i in range(20)]
    assert order[20:] == [f"d{i:02d}" for i in range(20, N_DOCS)]  # the tail keeps its order, below
    assert min(out["q1"][d] for d in order[:20]) > max(out["q1"][d] for d in order[20:])
    n_windows = len(sliding_windows(20, 4, 2))
    assert be.calls == 2 * n_windows
    assert res.stats.windows == 2 * n_windows and res.stats.ok == 2 * n_windows
    assert res.incomplete is None


def test_one_window_over_the_head_sorts_it_and_passes_repeat_the_sweep():
    st = stage(Scripted(), top_n=10, window=20, stride=10)
    out = st(StageContext(dataset()), [input_run()])
    assert ranked_ids(out["q1"])[:10] == [f"d{i:02d}" for i in range(9, -1, -1)]
    one = stage(Scripted(), top_n=12, window=3, stride=2)(StageContext(dataset()), [input_run()])
    three = stage(Scripted(), top_n=12, window=3, stride=2, passes=3)(StageContext(dataset()), [input_run()])
    # one sweep with a small window only carries the best up; three sweeps sort more of the head
    assert ranked_ids(one["q1"])[0] == "d11" and ranked_ids(one["q1"])[1] != "d10"
    assert ranked_ids(three["q1"])[:3] == ["d11", "d10", "d09"]


def test_window_of_one_asks_nothing_and_keeps_the_order():
    be = Scripted()
    out = stage(be, top_n=5, window=1, stride=1)(StageContext(dataset()), [input_run()])
    assert be.calls == 0 and ranked_ids(out["q1"]) == ranked_ids(input_run()["q1"])


def test_malformed_answers_are_repaired_and_counted():
    # duplicates and an invented id, and one candidate left out
    be = Scripted(answer=lambda ids: " > ".join(f"[{i}]" for i in [ids[0], ids[0], 99, *ids[1:-1]]))
    st = stage(be, top_n=4, window=4, stride=2)
    res = st.apply(StageContext(dataset()), [input_run()])
    out = res.run
    # shown d00..d03; best d03, then d02, d01; d00 was left out and goes last
    assert ranked_ids(out["q1"])[:4] == ["d03", "d02", "d01", "d00"]
    assert res.stats.repaired == 2 and res.stats.ok == 0
    assert res.stats.repairs == {"duplicate": 2, "out_of_range": 2, "missing": 2}
    st = stage(Scripted(answer=lambda ids: "no idea"), top_n=4, window=4, stride=2)
    res = st.apply(StageContext(dataset()), [input_run()])
    assert ranked_ids(res.run["q1"]) == ranked_ids(input_run()["q1"]) and res.stats.fallback == 2


def test_failed_requests_keep_the_window_order_are_counted_and_make_the_run_uncacheable():
    fail = lambda req: RequestFailed("HTTP 429: slow down (after 4 attempts)", 4) if "another" in req.messages[-1][1] else None  # noqa: E731
    st = stage(Scripted(fail_on=fail), top_n=6, window=4, stride=2, failed_calls="accept")
    res = st.apply(StageContext(dataset()), [input_run()])
    out = res.run
    assert ranked_ids(out["q2"]) == ranked_ids(input_run()["q2"])
    assert ranked_ids(out["q1"])[0] == "d05"
    assert res.stats.failed == 2 and res.stats.retries == 6
    assert "2 window(s) failed" in res.incomplete


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_failed_request_stops_the_stage_by_default_naming_the_query_and_the_window(tmp_path, concurrency):
    """failed_calls: stop (the default): the first request that fails after every retry ends the
    stage with one error naming it; the answers that came back before are cached, so the next
    run asks only for the rest."""
    fail = lambda req: RequestFailed("HTTP 503 (after 4 attempts)", 4) if "another" in req.messages[-1][1] else None  # noqa: E731
    ctx = StageContext(dataset(), Cache(tmp_path / "cache"))
    broken = Scripted(fail_on=fail)
    with pytest.raises(StagebenchError) as got:
        stage(broken, top_n=6, window=4, stride=2, concurrency=concurrency).apply(ctx, [input_run()])
    assert str(got.value).startswith("stage llm: query 'q2', products 3-6: the request failed after every retry "
                                     "(HTTP 503 (after 4 attempts)); no results were written")  # fmt: skip
    assert "failed_calls: accept" in str(got.value)
    healthy = Scripted()
    res = stage(healthy, top_n=6, window=4, stride=2).apply(ctx, [input_run()])
    assert res.stats.failed == 0 and res.stats.windows_from_cache == res.stats.windows - healthy.calls > 0


def test_a_request_the_server_refuses_stops_the_stage():
    def refuse(req):
        return StagebenchError("stage llm: HTTP 400: context too long")

    with pytest.raises(StagebenchError, match="context too long"):
        stage(Scripted(fail_on=refuse), top_n=6, window=4, stride=2, concurrency=2)(StageContext(dataset()), [input_run()])


def test_concurrency_gives_the_same_run():
    a = stage(Scripted(), top_n=20, window=5, stride=3, concurrency=1)(StageContext(dataset()), [input_run()])
    b = stage(Scripted(), top_n=20, window=5, stride=3, concurrency=8)(StageContext(dataset()), [input_run()])
    assert a == b


def test_answers_are_cached_per_window(tmp_path):
    cache = Cache(tmp_path / "cache")
    ctx = StageContext(dataset(), cache)
    be = Scripted()
    first = stage(be, top_n=10, window=4, stride=2)(ctx, [input_run()])
    asked = be.calls
    again = stage(be, top_n=10, window=4, stride=2).apply(ctx, [input_run()])
    assert again.run == first and be.calls == asked  # a rerun asks nothing
    assert again.stats.windows_from_cache == again.stats.windows
    # a second pass: the first pass's windows come from the cache, only the second's are asked
    two = stage(be, top_n=10, window=4, stride=2, passes=2).apply(ctx, [input_run()])
    assert two.run != first
    assert be.calls - asked == two.stats.windows // 2 == two.stats.windows_from_cache


def test_failed_answers_are_not_cached(tmp_path):
    ctx = StageContext(dataset(), Cache(tmp_path / "cache"))
    broken = Scripted(fail_on=lambda req: RequestFailed("timed out", 2))
    stage(broken, top_n=6, window=4, stride=2, failed_calls="accept")(ctx, [input_run()])
    healthy = Scripted()
    res = stage(healthy, top_n=6, window=4, stride=2).apply(ctx, [input_run()])
    assert healthy.calls == res.stats.windows and res.stats.failed == 0


@pytest.mark.parametrize(("params", "problem"), [
    ({"stride": 11, "window": 10}, "stride: 11 is larger than window"),
    ({"backend": "openai"}, "base_url: backend openai needs"),
    ({"backend": "openai", "base_url": "http://x:1/v1", "api_key_env": "sk-abc123-secret"}, "api_key_env: must be the name"),
    ({"base_url": "http://x:1/v1"}, "base_url: applies to backend openai"),
    ({"prompt": "/nonexistent/prompt.txt"}, "prompt: /nonexistent/prompt.txt: prompt file not found"),
    ({"temperature": -1}, "temperature"),
    ({"backend": "vllm"}, "backend"),
])  # fmt: skip
def test_params_that_cannot_make_sense_fail_at_load(params, problem, tmp_path):
    from stagebench.config import parse_config

    raw = {"name": "t", "dataset": {"loader": "beir", "path": str(tmp_path)},
           "stages": [{"name": "b", "type": "bm25"}, {"name": "l", "type": "llm_rerank", "inputs": ["b"], "params": params}]}  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config(raw)


def test_a_prompt_file_without_the_passages_fails_at_load(tmp_path):
    from stagebench.config import parse_config

    (tmp_path / "p.txt").write_text("Rank for {query}")
    raw = {"name": "t", "dataset": {"loader": "beir", "path": str(tmp_path)},
           "stages": [{"name": "b", "type": "bm25"},
                      {"name": "l", "type": "llm_rerank", "inputs": ["b"], "params": {"prompt": str(tmp_path / "p.txt")}}]}  # fmt: skip
    with pytest.raises(ConfigError, match=r"params.prompt: .*must use \{passages\}"):
        parse_config(raw)


def test_cost_follows_the_price_without_recomputing_and_renders():
    from stagebench.report.tables import llm_cells
    from stagebench.results.scoring import llm_cells as llm_counts

    st = stage(Scripted(), top_n=6, window=4, stride=2, price_per_1k_tokens=0.5)
    stats = st.apply(StageContext(dataset()), [input_run()]).stats
    done = st.finish_stats(stats)
    assert done.pricing.cost == round(stats.tokens / 1000 * 0.5, 6) and done.pricing.price_per_1k_tokens == 0.5
    assert done.to_json()["cost"] == done.pricing.cost  # as the manifest records it
    free = stage(Scripted(), top_n=6, window=4, stride=2).finish_stats(stats)
    assert free.pricing.cost is None
    cells = llm_cells("llm", llm_counts(done))
    assert cells[1:4] == ["listwise", "4", "100.0%"] and cells[-1] == f"{done.pricing.cost:.4f}"


def test_depths_are_runs_of_their_own_and_a_rerun_asks_the_model_nothing(tmp_path):
    from stagebench.cache import Cache

    ctx = StageContext(dataset(), Cache(tmp_path / "cache"))
    be = Scripted()
    st = stage(be, top_n=8, window=4, stride=2, depths=[4, 8, 12])
    res = st.apply(ctx, [input_run()])
    assert sorted(res.depth_runs) == [4, 12]  # the stage's own top_n is its run
    for n in (4, 12):
        alone = stage(Scripted(), top_n=n, window=4, stride=2)(StageContext(dataset()), [input_run()])
        assert res.depth_runs[n] == alone
    assert res.run == stage(Scripted(), top_n=8, window=4, stride=2)(StageContext(dataset()), [input_run()])
    assert res.stats.pairs == {4: 8, 8: 16, 12: 24} and set(res.stats.seconds) == {4, 8, 12}
    assert res.stats.to_json()["pairs"] == {"4": 8, "8": 16, "12": 24}
    assert be.calls == 18  # 1 + 5 + 3 windows per query at depths 4, 12 and 8: each depth its own run
    again = Scripted()
    st2 = stage(again, top_n=8, window=4, stride=2, depths=[4, 8, 12])
    assert st2(ctx, [input_run()]) == res.run and again.calls == 0  # every window from the response cache
