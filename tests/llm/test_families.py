"""The pointwise, pairwise and setwise LLM reranking families (issue 29).

* the sorting schemes against comparators written here (consistent ones, and random ones for
  the property that no candidate is lost or invented and the call count stays in its bound);
* the stage with a scripted backend that answers label requests from the prompt it is shown
  (it unit-tests the stage's reading, counting and cache; the real model is further down);
* logit scoring with the real bundled SmolLM2 in process: a pair's label probabilities do
  not depend on its batch mates, and equal those of a second path (generate's scores);
* the server path against a real llm-katan on 127.0.0.1 (text answers, no logprobs);
* a run killed with SIGKILL resumes, for every family, and its results equal an
  uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebench.cache import Cache
from stagebench.errors import ConfigError
from stagebench.params import build
from stagebench.llm.http import label_logprobs
from stagebench.llm.request import ChatRequest, Completion, RequestFailed
from stagebench.llm.labels import (MIN_MASS, POINTWISE_ESCI, POINTWISE_YES_NO, check_template, default_template,
                                      label_in_text, letters, read_labels, render_pairwise, render_pointwise,
                                      render_setwise)
from stagebench.llm.schemes import prp_sliding, prp_sliding_comparisons, setwise_heap, setwise_heap_calls
from stagebench.runs import ranked_ids
from stagebench.stages import StageContext
from stagebench.stages.llm_rerank import LLMRerankParams, LLMRerankStage
from tests.conftest import seed_models, stagebench_cli
from tests.scripted_chat import ScriptedChat
from tests.stages.test_llm_rerank import N_DOCS, Scripted, dataset, input_run


def OtherScripted():  # noqa: N802 - a second listwise model, to the cache
    return Scripted(name="another scripted model")

# ---------------------------------------------------------------------------- schemes


def counting(fn):
    calls = []

    def wrapped(*a):
        calls.append(a)
        return fn(*a)

    return wrapped, calls


@pytest.mark.parametrize("n,k", [(2, 1), (5, 5), (10, 3), (20, 10), (7, 20)])
def test_prp_sliding_finds_the_top_k_in_order_with_the_counted_comparisons(n, k):
    quality = random.Random(n * 31 + k).sample(range(100), n)
    prefer, calls = counting(lambda a, b: (quality[a] > quality[b]) - (quality[a] < quality[b]))
    order = prp_sliding(n, k, prefer)
    best = sorted(range(n), key=lambda i: -quality[i])
    assert order[: min(k, n)] == best[: min(k, n)]
    assert len(calls) == prp_sliding_comparisons(n, k) == sum(n - 1 - p for p in range(min(k, n - 1)))


@pytest.mark.parametrize("n,k,c", [(2, 1, 2), (10, 10, 4), (20, 10, 4), (20, 5, 3), (13, 13, 2), (30, 10, 6), (9, 3, 26)])
def test_setwise_heap_finds_the_top_k_in_order_within_its_bound(n, k, c):
    quality = random.Random(n * 7 + k * 3 + c).sample(range(100), n)
    best_of, calls = counting(lambda group: max(range(len(group)), key=lambda i: quality[group[i]]))
    order = setwise_heap(n, k, c, best_of)
    best = sorted(range(n), key=lambda i: -quality[i])
    assert order[:k] == best[:k]
    assert sorted(order) == list(range(n)) and order[k:] == sorted(order[k:])  # the rest in input order
    assert all(2 <= len(g[0]) <= c for g in calls)
    assert len(calls) <= setwise_heap_calls(n, k, c)


def test_setwise_bound_is_reached_and_is_far_below_a_bubble_sort():
    n, k, c = 20, 10, 4
    best_of, calls = counting(lambda g: 1)  # always the first child: every sift takes the longest path
    setwise_heap(n, k, c, best_of)
    assert len(calls) == setwise_heap_calls(n, k, c)
    bubble = sum(math.ceil((n - 1 - i) / (c - 1)) for i in range(k))  # setwise bubble sort, for scale
    assert setwise_heap_calls(n, k, c) < bubble


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(2, 8), st.integers(0, 2**32 - 1))
def test_random_answers_lose_or_invent_no_candidate(n, k, c, seed):
    rng = random.Random(seed)
    best_of, set_calls = counting(lambda g: rng.choice([None, *range(len(g))]))
    order = setwise_heap(n, k, c, best_of)
    assert sorted(order) == list(range(n)) and len(set_calls) <= setwise_heap_calls(n, k, c)
    prefer, pair_calls = counting(lambda a, b: rng.choice([-1, 0, 1]))
    order = prp_sliding(n, k, prefer)
    assert sorted(order) == list(range(n)) and len(pair_calls) == prp_sliding_comparisons(n, k)


# ---------------------------------------------------------------------------- reading labels


def test_label_reading_from_probabilities_and_from_text():
    r = read_labels(("Yes", "No"), (math.log(0.6), math.log(0.2)), "Yes")
    assert r.status == "ok" and r.mass == pytest.approx(0.8) and r.probs == pytest.approx((0.75, 0.25))
    low = read_labels(("Yes", "No"), (math.log(0.1), -math.inf), "The")
    assert low.status == "low_mass" and low.probs == (1.0, 0.0) and low.mass == pytest.approx(0.1)
    assert read_labels(("A", "B"), None, "Product B is better").probs == (0.0, 1.0)
    assert read_labels(("A", "B"), None, "a better one is [B]").best() == 1  # the article "a" is not label A
    none = read_labels(("A", "B", "C"), None, "I cannot tell")
    assert none.status == "fallback" and none.best() is None
    assert label_in_text(("Yes", "No"), "<think>No idea</think> yes, it is") == 0
    assert letters(3) == ("A", "B", "C")


def test_label_reading_at_its_edges():
    # no label among the alternatives at all: no preference, said as such
    none = read_labels(("Yes", "No"), (-math.inf, -math.inf), "The")
    assert none.probs == (0.5, 0.5) and none.status == "fallback" and none.mass == 0.0 and none.best() is None
    # exactly half the mass is enough; just below is low
    assert read_labels(("A", "B"), (math.log(MIN_MASS * 0.6), math.log(MIN_MASS * 0.4)), "A").status == "ok"
    assert read_labels(("A", "B"), (math.log(0.299), math.log(0.2)), "A").status == "low_mass"
    one = read_labels(("A", "B"), (math.log(0.25), -math.inf), "A")
    assert one.probs == (1.0, 0.0) and one.mass == 0.25
    assert letters(1) == ("A",) and letters(26)[-1] == "Z" and len(letters(26)) == 26
    for n in (0, 27):
        with pytest.raises(ValueError, match=f"^a set of {n} candidates cannot be lettered A-Z$"):
            letters(n)


def test_the_prompts_render_the_query_and_products_as_documented():
    t = "Q:{query}|{passage}"
    got = render_pointwise(t, "  red   shoes ", "one two three four", 3)  # the query's whitespace collapsed, 3 words kept
    assert got.startswith("Q:red shoes|one two three") and "four" not in got
    assert render_pairwise("{query}|{passage_a}|{passage_b}", "a  b", "x", "y", 5) == "a b|x|y"
    out = render_setwise("{query}|{labels}\n{passages}", " a\tb ", ["first", "second", "third"], 5)
    assert out == "a b|A, B, C\n[A] first\n[B] second\n[C] third"
    assert default_template("pointwise") == POINTWISE_YES_NO and default_template("pointwise", "esci") == POINTWISE_ESCI
    assert POINTWISE_YES_NO != POINTWISE_ESCI and "Yes" in POINTWISE_YES_NO
    assert "passages" in check_template("setwise", "{query}")
    assert check_template("pairwise", "{query} {passage_a}") and check_template("pointwise", "{query} {passage}") is None


def test_a_servers_logprobs_are_read_per_label_and_malformed_ones_refused():
    # the OpenAI chat-completions logprobs layout (a parser unit test: a scripted answer is fine here)
    lp = {"content": [{"token": "Yes", "logprob": -0.5, "top_logprobs": [
        {"token": "Yes", "logprob": -0.5}, {"token": " yes", "logprob": -2.0}, {"token": "The", "logprob": -1.5}]}]}
    yes, no = label_logprobs(lp, ("Yes", "No"), "srv")
    assert yes == pytest.approx(math.log(math.exp(-0.5) + math.exp(-2.0))) and no == -math.inf
    assert label_logprobs(None, ("Yes", "No"), "srv") is None and label_logprobs({"content": None}, ("A",), "srv") is None
    with pytest.raises(Exception, match="log-probability"):
        label_logprobs({"content": [{"token": "Yes", "logprob": 0.5}]}, ("Yes", "No"), "srv")


def test_a_label_answer_round_trips_through_json_with_minus_infinity():
    c = Completion("A", 10, 1, 0.1, 0, (-0.1, -math.inf))
    assert Completion.from_json(json.loads(json.dumps(c.as_json()))) == c
    assert "labels" not in ChatRequest((("user", "x"),), 8, 0.0, 0).as_json()  # listwise keys unchanged


# ---------------------------------------------------------------------------- the stage, scripted


class LabelScripted(ScriptedChat):
    """Answers label requests from the "quality N" of the products in the prompt: pointwise
    P(Yes) = N / 30; pairwise and setwise: the best product's label gets 0.7, the others share
    the rest. ``text_only``: no probabilities, the label as text (a server without logprobs);
    ``fail_on(user text)``: the exception a request fails with."""

    def __init__(self, text_only=False, fail_on=None, position_bias=False, name="label-scripted"):
        on_user = (lambda req: fail_on(req.messages[-1][1])) if fail_on else None
        super().__init__(fail_on=on_user, name=name, text_only=text_only)
        self.position_bias = position_bias
        self.text_only = text_only

    def reply(self, req: ChatRequest) -> Completion:
        user = req.messages[-1][1]
        labs = req.labels
        q = [int(x) for x in re.findall(r"quality (\d+)", user)]
        if labs == ("Yes", "No"):
            p = (q[0] + 0.5) / (N_DOCS + 1)
            probs = [p * 0.9, (1 - p) * 0.9]
        elif labs == ("E", "S", "C", "I"):  # graded the other way round: low numbers are Exact, high ones
            p = (q[0] + 0.5) / (N_DOCS + 1)  # Complement or Irrelevant (so the order is not the docid tie order)
            probs = [0.9 * (1 - p), 0.0, 0.9 * p / 2, 0.9 * p / 2]
        elif self.position_bias and labs == ("A", "B"):  # says A to every pair, a little less when B is better
            probs = [0.8, 0.2] if q[0] > q[1] else [0.6, 0.4]
        else:
            best = max(range(len(q)), key=lambda i: q[i])
            probs = [0.7 if i == best else 0.2 / (len(labs) - 1) for i in range(len(labs))]
        text = labs[max(range(len(labs)), key=lambda i: probs[i])]
        lps = None if self.text_only else tuple(math.log(p) if p > 0 else -math.inf for p in probs)
        return Completion(text, len(user.split()), 1, 0.01, 0, lps)


def family(backend, **params):
    p = build(LLMRerankParams, params, "params")
    s = LLMRerankStage("llm", p)
    s._backend = backend
    return s


FAMILIES = [("pointwise", {}), ("pairwise", {"top_k": 10}), ("setwise", {"top_k": 10, "set_size": 4})]


@pytest.mark.parametrize("method,extra", FAMILIES)
@pytest.mark.parametrize("text_only", [False, True])
def test_each_family_sorts_the_head_and_counts_its_calls(method, extra, text_only):
    be = LabelScripted(text_only)
    res = family(be, method=method, top_n=20, **extra).apply(StageContext(dataset()), [input_run()])
    order = ranked_ids(res.run["q1"])
    assert order[:10] == [f"d{i:02d}" for i in range(19, 9, -1)]  # the best of the head, in order
    assert sorted(order[:20]) == [f"d{i:02d}" for i in range(20)] and order[20:] == [f"d{i:02d}" for i in range(20, N_DOCS)]
    s = res.stats
    per_query = {"pointwise": 20, "pairwise": 2 * prp_sliding_comparisons(20, 10), "setwise": setwise_heap_calls(20, 10, 4)}[method]
    assert s.method == method and s.windows == be.calls
    if method == "pointwise":
        assert s.windows == 2 * per_query
    else:  # repeated questions are asked once; setwise: within its bound
        assert 0 < s.windows <= 2 * per_query
    assert s.failed == 0 and res.incomplete is None
    if text_only:
        assert s.label_mass is None and s.ok == s.windows
    else:
        assert s.label_mass == pytest.approx(0.9, abs=0.001) and s.ok == s.windows


def test_pairwise_asks_both_orders_so_a_position_bias_cancels():
    be = LabelScripted(position_bias=True)
    shuffled = [f"d{i:02d}" for i in (3, 7, 0, 9, 5, 1, 8, 2, 6, 4)]
    run = {q: {d: float(10 - r) for r, d in enumerate(shuffled)} for q in ("q1", "q2")}
    res = family(be, method="pairwise", top_n=10, top_k=10).apply(StageContext(dataset()), [run])
    # one order alone would say the first product wins every comparison
    assert ranked_ids(res.run["q1"])[:10] == [f"d{i:02d}" for i in range(9, -1, -1)]
    assert res.stats.windows % 2 == 0


def test_pointwise_esci_labels_score_the_expected_grade():
    be = LabelScripted()
    res = family(be, method="pointwise", labels="esci", top_n=20).apply(StageContext(dataset()), [input_run()])
    # expected grade 3 (1 - p) + p / 2 falls with the number: d00 first (ties would give d19 first)
    assert ranked_ids(res.run["q1"])[:20] == [f"d{i:02d}" for i in range(20)]
    assert res.stats.label_mass == pytest.approx(0.9) and be.calls == 40
    # the prompt names the four grades and the request asks for exactly those labels
    st_ = family(be, method="pointwise", labels="esci")
    assert "E if it is exactly" in st_.template() and "{passage}" in st_.template()


class EsciScripted(LabelScripted):
    """Gives each of the four ESCI labels its own probability, different for every product (so every
    grade's weight in the expected grade moves the order)."""

    WEIGHTS = staticmethod(lambda n: ((n * 7) % 5 + 1, (n * 3) % 7 + 1, (n * 5) % 4 + 1, (n * 2) % 3 + 1))

    def reply(self, req: ChatRequest) -> Completion:
        assert req.labels == ("E", "S", "C", "I")
        n = int(re.findall(r"quality (\d+)", req.messages[-1][1])[0])
        w = self.WEIGHTS(n)
        probs = [0.9 * x / sum(w) for x in w]
        return Completion("E", 1, 1, 0.01, 0, tuple(math.log(p) for p in probs))


def test_pointwise_esci_orders_by_the_expected_grade_e3_s2_c1_i0():
    """The pointwise ESCI score is 3 P(E) + 2 P(S) + 1 P(C) + 0 P(I) over the labels' renormalised
    probabilities (the ESCI grades): the head's order recomputed here from that definition; the same
    probabilities read with any two grades swapped would order it otherwise."""
    res = family(EsciScripted(), method="pointwise", labels="esci", top_n=20).apply(StageContext(dataset()), [input_run()])
    head = [f"d{i:02d}" for i in range(20)]  # the input's top 20

    def order(grades):
        score = {d: sum(g * x for g, x in zip(grades, EsciScripted.WEIGHTS(int(d[1:])))) / sum(EsciScripted.WEIGHTS(int(d[1:])))
                 for d in head}  # fmt: skip
        return sorted(head, key=lambda d: (score[d], d), reverse=True)

    assert ranked_ids(res.run["q1"])[:20] == order((3, 2, 1, 0))
    for swapped in ((2, 3, 1, 0), (3, 1, 2, 0), (3, 2, 0, 1), (0, 2, 1, 3)):
        assert order(swapped) != order((3, 2, 1, 0)), swapped


@pytest.mark.parametrize("method,extra", FAMILIES)
def test_a_rerun_asks_nothing_and_a_bigger_top_n_asks_only_the_new_questions(tmp_path, method, extra):
    ctx = StageContext(dataset(), Cache(tmp_path / "cache"))
    be = LabelScripted()
    first = family(be, method=method, top_n=10, **extra).apply(ctx, [input_run()])
    asked = be.calls
    again = family(be, method=method, top_n=10, **extra).apply(ctx, [input_run()])
    assert again.run == first.run and be.calls == asked and again.stats.windows_from_cache == again.stats.windows
    family(be, method=method, top_n=12, **extra).apply(ctx, [input_run()])
    if method == "pointwise":  # a product's question does not depend on the others: 2 new per query
        assert be.calls - asked == 4


@pytest.mark.parametrize("method,extra", FAMILIES)
def test_failed_calls_are_counted_keep_their_places_and_make_the_run_uncacheable(method, extra):
    fail = lambda user: RequestFailed("HTTP 503 (after 4 attempts)", 4) if "quality 9" in user else None  # noqa: E731
    res = family(LabelScripted(fail_on=fail), method=method, top_n=10, failed_calls="accept",
                 **extra).apply(StageContext(dataset()), [input_run()])  # fmt: skip
    assert res.stats.failed > 0 and res.stats.retries == 3 * res.stats.failed and res.incomplete
    order = ranked_ids(res.run["q1"])
    assert sorted(order[:10]) == [f"d{i:02d}" for i in range(10)]
    if method == "pointwise":  # a failed pair: the query keeps its input order
        assert order[:10] == ranked_ids(input_run()["q1"])[:10]


def test_params_that_cannot_make_sense_fail_at_load(tmp_path):
    for params, key in [({"method": "setwise", "set_size": 1}, "set_size"), ({"method": "setwise", "set_size": 27}, "set_size"),
                        ({"method": "sideways"}, "method"), ({"method": "pointwise", "labels": "stars"}, "labels")]:  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            p = build(LLMRerankParams, params, "params")
            errs = LLMRerankStage.check_params(p, ["x"])
            if errs:
                raise ConfigError("; ".join(f"{k}: {v}" for k, v in errs))
    bad = tmp_path / "p.txt"
    bad.write_text("{query} {passages}")  # a listwise template given to the pairwise family
    errs = LLMRerankStage.check_params(build(LLMRerankParams, {"method": "pairwise", "prompt": str(bad)}, "p"), ["x"])
    assert errs and errs[0][0] == "prompt" and "passage_a" in errs[0][1]


@pytest.mark.parametrize("method,extra,where", [("pointwise", {}, "product 10"), ("pairwise", {"top_k": 10}, "products 10 and 9"),
                                                 ("setwise", {"top_k": 10, "set_size": 4}, "products 3, 8, 9, 10")])  # fmt: skip
def test_a_failed_call_is_logged_naming_the_query_its_products_and_the_error(method, extra, where, caplog):
    """The warning points at the call that failed: the query, the products by input position, the
    server's error, and what was kept instead."""
    fail = lambda user: RequestFailed("HTTP 503 (after 4 attempts)", 4) if "quality 9" in user else None  # noqa: E731
    with caplog.at_level("WARNING", logger="stagebench"):
        family(LabelScripted(fail_on=fail), method=method, top_n=10, failed_calls="accept",
               **extra).apply(StageContext(dataset()), [input_run()])  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if "request failed" in r.getMessage()]
    # d09 (quality 9) is the input's tenth product; pairwise: the first comparison of the first pass
    # (bottom up); setwise: the heap's last inner node (3) with its children
    assert any(ln.startswith(f"stage llm: query 'q1' {where}: request failed: HTTP 503 (after 4 attempts); ") for ln in lines), lines
    kept = {"pointwise": "the query keeps its input order", "pairwise": "no preference", "setwise": "no preference"}[method]
    assert all(ln.endswith(kept) for ln in lines)


def test_a_pairwise_comparison_needs_both_orders_and_agreement():
    """A model that says A whatever the order has no preference (the input order stays); a
    comparison whose other order failed has none either."""
    class AlwaysA(LabelScripted):
        def reply(self, req):
            return Completion("A", 10, 1, 0.01, 0, (math.log(0.5), math.log(0.5)) if self.text_only else None)

    inp = input_run()
    for be in (AlwaysA(), AlwaysA(text_only=True)):
        res = family(be, method="pairwise", top_n=10, top_k=10).apply(StageContext(dataset()), [inp])
        assert ranked_ids(res.run["q1"]) == ranked_ids(inp["q1"])
    # the reversed order of every comparison fails: nothing is known, nothing moves
    fail = lambda user: RequestFailed("HTTP 503", 1) if user.index("quality") > user.rindex("Product A") else None  # noqa: E731
    res = family(LabelScripted(fail_on=fail), method="pairwise", top_n=10, top_k=10,
                 failed_calls="accept").apply(StageContext(dataset()), [inp])  # fmt: skip
    assert res.stats.failed > 0 and ranked_ids(res.run["q1"]) == ranked_ids(inp["q1"])


@pytest.mark.parametrize("c", [2, 3, 4, 5])
def test_the_schemes_on_every_small_list(c):
    """Every n up to 9 and every k: with a consistent judge, both schemes give the true top k in order,
    setwise within its bound, which a judge that always names a child reaches exactly."""
    for n in range(0, 10):
        quality = random.Random(n * 13 + c).sample(range(100), n)
        best = sorted(range(n), key=lambda i: -quality[i])
        for k in range(1, n + 2):
            best_of, calls = counting(lambda g: max(range(len(g)), key=lambda i: quality[g[i]]))
            order = setwise_heap(n, k, c, best_of)
            assert order[: min(k, n)] == best[: min(k, n)] and sorted(order) == list(range(n)), (n, k)
            assert len(calls) <= setwise_heap_calls(n, k, c)
            worst, calls = counting(lambda g: 1)  # always the first child: every sift to the bottom
            setwise_heap(n, k, c, worst)
            assert len(calls) == setwise_heap_calls(n, k, c), (n, k, c)
            prefer = lambda a, b: (quality[a] > quality[b]) - (quality[a] < quality[b])  # noqa: E731
            assert prp_sliding(n, k, prefer)[: min(k, n)] == best[: min(k, n)], (n, k)
            ties, calls = counting(lambda a, b: 0)  # no preference anywhere: nothing moves
            assert prp_sliding(n, k, ties) == list(range(n)) and len(calls) == prp_sliding_comparisons(n, k)
    assert setwise_heap_calls(1, 3, c) == 0 and prp_sliding_comparisons(1, 3) == 0
    for n in range(10):  # no preference anywhere (failed or unreadable calls): nothing moves
        assert setwise_heap(n, 4, c, lambda g: None) == list(range(n))


def test_a_set_of_one_is_refused():
    with pytest.raises(ValueError, match="^a set holds at least two candidates$"):
        setwise_heap(5, 2, 1, lambda g: 0)


@pytest.mark.parametrize("method,extra", [("listwise", {"window": 5, "stride": 2}), *FAMILIES])
def test_answers_of_another_model_are_not_served_from_the_cache(method, extra, tmp_path):
    """Answers are keyed by the backend's identity: a second model through a warm cache is asked
    every question again."""
    cache = Cache(tmp_path / "cache")

    first = LabelScripted() if method != "listwise" else Scripted()
    family(first, method=method, top_n=10, **extra).apply(StageContext(dataset(), cache), [input_run()])
    second = LabelScripted(name="another model") if method != "listwise" else OtherScripted()
    family(second, method=method, top_n=10, **extra).apply(StageContext(dataset(), cache), [input_run()])
    assert first.calls > 0 and second.calls == first.calls


# ---------------------------------------------------------------------------- the real model in process


@pytest.fixture(scope="module")
def smollm2():
    from stagebench.runtime.devices import place
    from stagebench.models.resolve import resolve_model
    from stagebench.llm.local import TransformersBackend

    return TransformersBackend(resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct"),
                               place("cpu", "fp32", "torch", "test", role="generator"))  # fmt: skip


PRODUCTS = ["Men's leather wallet, red", "Stainless steel kettle 1.7 liter with a very long description " * 4,
            "Phone case", "Red wallet chain for jeans, nickel free, 50 cm long, with two clips"]  # fmt: skip


@pytest.mark.slow
def test_pointwise_scores_do_not_depend_on_batch_mates(smollm2):
    reqs = [ChatRequest((("user", f"A shopper searched for: red wallet\n\nProduct: {p}\n\nAnswer Yes or No."),), 1, 0.0, 0,
                        ("Yes", "No")) for p in PRODUCTS]  # fmt: skip
    together = smollm2.complete_labels(reqs)
    for req, batched in zip(reqs, together):
        alone = smollm2.complete_labels([req])[0]
        # float rounding only: measured at most 4e-5 on this machine (fp32, CPU)
        assert alone.label_logprobs == pytest.approx(batched.label_logprobs, abs=1e-4)
        assert alone.prompt_tokens == batched.prompt_tokens
    reversed_ = smollm2.complete_labels(reqs[::-1])[::-1]
    for r, t in zip(reversed_, together):
        assert r.label_logprobs == pytest.approx(t.label_logprobs, abs=1e-4)


@pytest.mark.slow
def test_label_logprobs_equal_generates_first_step_scores(smollm2):
    """A second path: transformers' generate, one greedy step with its scores, on the unpadded prompt."""
    import torch

    req = ChatRequest((("user", "Which is a wallet, A or B?\nA: kettle\nB: wallet\nAnswer A or B."),), 1, 0.0, 0, ("A", "B"))
    [got] = smollm2.complete_labels([req])
    tok, model = smollm2._tok, smollm2._model
    enc = tok.apply_chat_template([{"role": "user", "content": req.messages[0][1]}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)  # fmt: skip
    out = model.generate(**enc, max_new_tokens=1, do_sample=False, output_scores=True, return_dict_in_generate=True,
                         pad_token_id=tok.eos_token_id, temperature=None, top_p=None, top_k=None)  # fmt: skip
    logp = torch.log_softmax(out.scores[0][0].float(), -1)
    for lab, lp in zip(("A", "B"), got.label_logprobs):
        ids = sorted({tok.encode(v, add_special_tokens=False)[0] for v in (lab, " " + lab)})
        assert lp == pytest.approx(float(torch.logsumexp(logp[ids], 0)), abs=1e-4)
    assert got.text == ("A", "B")[max(range(2), key=lambda i: got.label_logprobs[i])]


@pytest.mark.slow
def test_a_gguf_model_loads_from_its_dequantized_checkpoint_with_the_same_answers(tmp_path, smollm2, model_entries, caplog):
    """The checkpoint kept in the cache (built by :func:`~stagebench.models.variants.gguf_checkpoint` for
    the session: the ``model_entries`` fixture) is the GGUF file's weights and tokenizer: the same label
    log-probabilities, generated text and tensors, exactly, as the GGUF file loaded directly; a Ray
    worker reads the checkpoint the driver built, and builds none itself."""
    import pickle

    import torch
    from stagebench.llm.chat import keep_models_in
    from stagebench.llm.local import TransformersBackend
    from stagebench.models.resolve import on_this_machine
    from stagebench.models.variants import cached_gguf_checkpoint

    labels = [ChatRequest((("user", f"A shopper searched for: red wallet\n\nProduct: {p}\n\nAnswer Yes or No."),), 1,
                          0.0, 0, ("Yes", "No")) for p in PRODUCTS]  # fmt: skip
    text = ChatRequest((("system", "You rank products."), ("user", "Rank: [1] kettle [2] wallet (query: wallet). "
                                                                  "Answer like [2] > [1].")), 12, 0.0, 0)  # fmt: skip
    from_gguf = smollm2.complete_labels(labels), smollm2.complete(text)
    empty = TransformersBackend(smollm2.resolved, smollm2.placement, "llm")
    keep_models_in(empty, Cache(tmp_path / "empty"))
    sent = pickle.loads(pickle.dumps(empty))  # as a Ray worker gets it where no checkpoint exists yet
    assert sent.models is None and cached_gguf_checkpoint(on_this_machine(sent.resolved), Cache(sent._workers_read)) is None
    cache = Cache(seed_models(model_entries, tmp_path / "cache"))
    [entry] = [p for p in (tmp_path / "cache" / "models").iterdir() if not p.name.startswith(".")]
    assert {"model.safetensors", "tokenizer.json", "config.json", "variant.json"} <= {p.name for p in entry.iterdir()}
    assert json.loads((entry / "entry.json").read_text())["meta"]["recipe"] == "gguf-dequantized"
    built = TransformersBackend(smollm2.resolved, smollm2.placement, "llm")
    keep_models_in(built, cache)
    with caplog.at_level("INFO", logger="stagebench"):
        got = built.complete_labels(labels), built.complete(text)
    assert "cached de-quantized fp32 checkpoint" in caplog.text and f"its de-quantized checkpoint {entry}" in caplog.text
    assert [c.label_logprobs for c in got[0]] == [c.label_logprobs for c in from_gguf[0]]  # bit for bit
    assert [c.prompt_tokens for c in got[0]] == [c.prompt_tokens for c in from_gguf[0]]
    assert (got[1].text, got[1].prompt_tokens, got[1].completion_tokens) == \
        (from_gguf[1].text, from_gguf[1].prompt_tokens, from_gguf[1].completion_tokens) and got[1].text  # fmt: skip
    want = smollm2._model.state_dict()
    assert all(torch.equal(t, want[k]) for k, t in built._model.state_dict().items())
    # a Ray worker (the driver built or verified the checkpoint first: keep_models_in(..., remote=True))
    # reads it from the cache folder it sees, checksums verified, and builds nothing itself
    caplog.clear()
    driver = TransformersBackend(smollm2.resolved, smollm2.placement, "llm")
    keep_models_in(driver, cache, remote=True)
    worker = pickle.loads(pickle.dumps(driver))
    with caplog.at_level("INFO", logger="stagebench"):
        assert worker.complete_labels(labels[:1])[0].label_logprobs == smollm2.complete_labels(labels[:1])[0].label_logprobs
    assert f"its de-quantized checkpoint {entry} (built by the driver)" in caplog.text
    assert "computing" not in caplog.text and "computed de-quantized" not in caplog.text


# ---------------------------------------------------------------------------- through the CLI


def cli_config(tmp_path: Path, data: Path, method: str, extra: dict, name: str = "t", queries: int = 3) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    params = {"method": method, "top_n": 8, "max_doc_words": 20, **extra}
    cfg.write_text(f"""name: {name}
output: {tmp_path / name}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {data}, split: test, max_queries: {queries}}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 30}}}}
  - {{name: llm, type: llm_rerank, inputs: [bm25], params: {json.dumps(params)}}}
evaluation: {{metrics: [nDCG@10, RR@10]}}
""")
    return cfg


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# the process killed is what this tests, and it is the same for every family: each call's answer is one
# cache entry written atomically, whichever family asked it. Setwise is killed here (its heap carries
# the most state from call to call); that every family's calls resume from the cache one by one is
# tested in process for each (test_a_rerun_asks_nothing_and_a_bigger_top_n_asks_only_the_new_questions),
# listwise's kill -9 through the server (test_llm_server). The smallest head that still asks enough
# questions to be killed between two of them.
SETWISE = ("setwise", {"top_k": 3, "set_size": 3, "top_n": 6})
#: the text-reading families through a server, each with the smallest head that asks several questions
SERVER_FAMILIES = [("pairwise", {"top_k": 2, "top_n": 5}), SETWISE]


@pytest.mark.slow
@pytest.mark.parametrize("method,extra", [SETWISE])
def test_kill_9_resumes_at_the_next_call(tmp_path, small_synthetic, model_entries, method, extra):
    import os

    env = {**os.environ, **OFFLINE}
    (tmp_path / "x").mkdir()
    for cache in (tmp_path / "cache", tmp_path / "x" / "cache"):  # the model's checkpoint, built once per session
        seed_models(model_entries, cache)
    ref = cli_config(tmp_path, small_synthetic, method, extra, queries=2)  # uninterrupted
    r = stagebench_cli("run", ref, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    total = json.loads((tmp_path / "t" / "manifest.json").read_text())["stages"][1]["stats"]["windows"]
    cfg = cli_config(tmp_path / "x", small_synthetic, method, extra, queries=2)
    proc = subprocess.Popen([sys.executable, "-m", "stagebench", "run", str(cfg)], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    answers = tmp_path / "x" / "cache" / "llm"
    deadline = time.monotonic() + 240
    while not (answers.is_dir() and len([p for p in answers.iterdir() if not p.name.startswith(".")]) >= 4):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len([p for p in answers.iterdir() if not p.name.startswith(".")])
    assert 4 <= done < total and not (tmp_path / "x" / "t").exists()
    r = stagebench_cli("run", cfg, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{done} from the cache, {total - done} asked" in r.stderr
    assert "cached de-quantized fp32 checkpoint of HuggingFaceTB/SmolLM2-135M-Instruct" in r.stderr  # built before the kill
    for f in ("stage_table.txt", "stage_table.json", "runs/llm.trec", "per_query.csv"):
        assert (tmp_path / "t" / f).read_bytes() == (tmp_path / "x" / "t" / f).read_bytes(), f
    # the resumed run was stored whole: a rerun would ask nothing (the run's key in the manifest is a cache entry)
    key = json.loads((tmp_path / "x" / "t" / "manifest.json").read_text())["cache"]["keys"]["llm"]
    assert Cache(tmp_path / "x" / "cache").verify("runs", key) is None and (tmp_path / "x" / "cache" / "runs" / key).is_dir()


@pytest.mark.slow
def test_the_server_path_reads_text_and_pointwise_needs_logprobs(tmp_path, small_synthetic):
    from tests.llm.test_server import env as katan_env, katan

    server = {"backend": "openai", "model": "echo-model", "api_key_env": "KATAN_KEY", "backoff": 0.01}
    with katan(tmp_path) as url:
        cfg = cli_config(tmp_path, small_synthetic, "pointwise", {**server, "base_url": url}, name="p")
        r = stagebench_cli("run", cfg, env=katan_env())
        assert r.returncode != 0 and not (tmp_path / "p").exists()
        assert "answered without logprobs" in r.stderr and "method pointwise" in r.stderr
        for method, extra in SERVER_FAMILIES:
            cfg = cli_config(tmp_path, small_synthetic, method, {**extra, **server, "base_url": url}, name=method)
            r = stagebench_cli("run", cfg, env=katan_env())
            assert r.returncode == 0, r.stderr[-3000:]
            s = json.loads((tmp_path / method / "manifest.json").read_text())["stages"][1]["stats"]
            # the echo server repeats the prompt, which opens "A shopper ...": every answer names label A
            assert s["method"] == method and s["windows"] > 0 and s["ok"] == s["windows"] and "label_mass" not in s
            assert "0 from the cache" in r.stderr
            r2 = stagebench_cli("run", cfg, env=katan_env())
            assert r2.returncode == 0 and "stage llm: cached run" in r2.stderr
