"""Listwise reranking logic: the sliding windows and reading a model's permutation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagebench.llm.listwise import (
    DEFAULT_TEMPLATE, Outcome, check_template, parse_permutation, render_prompt, shorten, sliding_windows,
)  # fmt: skip


@pytest.mark.parametrize(("n", "w", "s", "want"), [
    (20, 20, 10, [(0, 20)]),                      # the whole list in one window
    (30, 20, 10, [(10, 30), (0, 20)]),            # RankGPT's 100/20/10 scheme, smaller
    (25, 20, 10, [(5, 25), (0, 20)]),             # uneven: the head still gets a full window
    (10, 20, 10, [(0, 10)]),                      # top_n < window
    (10, 4, 2, [(6, 10), (4, 8), (2, 6), (0, 4)]),
    (7, 3, 3, [(4, 7), (1, 4), (0, 3)]),          # stride == window: disjoint, then the head window overlaps
    (5, 1, 1, []),                                # windows of one candidate: nothing to order
    (1, 20, 10, []),
    (0, 20, 10, []),
    (5, 5, 1, [(0, 5)]),
])  # fmt: skip
def test_sliding_windows(n, w, s, want):
    assert sliding_windows(n, w, s) == want


@given(st.integers(0, 120), st.integers(1, 30), st.integers(1, 30))
def test_windows_cover_every_pair_of_neighbours_back_to_front(n, w, s):
    s = min(s, w)
    got = sliding_windows(n, w, s)
    assert all(0 <= a < b <= n and b - a <= w and b - a >= 2 for a, b in got)
    assert [b for _, b in got] == sorted((b for _, b in got), reverse=True)  # back to front
    if n >= 2 and w >= 2:
        assert got[0][1] == n and got[-1][0] == 0
        # every position is in a window (so every candidate is seen) ...
        assert set().union(*(range(a, b) for a, b in got)) == set(range(n))
        # ... the head window is full, and consecutive windows overlap when stride < window, so a
        # document can travel from the bottom to the top in one pass
        assert got[-1] == (0, min(w, n))
        if s < w:
            assert all(a2 < a1 < b2 for (a1, _), (a2, b2) in zip(got, got[1:]))


def test_windows_reject_nonsense():
    with pytest.raises(ValueError):
        sliding_windows(10, 0, 1)


@pytest.mark.parametrize(("text", "n", "order", "status", "repairs"), [
    ("[2] > [3] > [1]", 3, (1, 2, 0), "ok", ()),
    ("Ranking: [2] > [1] > [3]. Done.", 3, (1, 0, 2), "ok", ()),
    ("<think>maybe [1] > [2] > [3]</think>\n[3] > [2] > [1]", 3, (2, 1, 0), "ok", ()),
    ("<THINK>[1]</THINK>[3] > [1] > [2]", 3, (2, 0, 1), "ok", ()),
    ("[2] > [2] > [1] > [3]", 3, (1, 0, 2), "repaired", ("duplicate",)),
    ("[0] > [3] > [1] > [2]", 3, (2, 0, 1), "repaired", ("out_of_range",)),  # [0] is not the last candidate
    ("[4] > [1]", 3, (0, 1, 2), "repaired", ("out_of_range", "missing")),
    ("[3]", 3, (2, 0, 1), "repaired", ("missing",)),          # the missing ones follow in input order
    ("[3] > [3] > [9]", 4, (2, 0, 1, 3), "repaired", ("duplicate", "out_of_range", "missing")),
    ("2 > 3 > 1", 3, (1, 2, 0), "ok", ()),                    # bare numbers when nothing is bracketed
    ("[ 2 ] > [3]>[1]", 3, (1, 2, 0), "ok", ()),
    ("I cannot rank these products.", 3, (0, 1, 2), "fallback", ()),
    ("", 2, (0, 1), "fallback", ()),
    ("<think>[2] > [1] and then I ran out of tokens", 2, (0, 1), "fallback", ()),  # unclosed reasoning is not an answer
    ("[99] > [100]", 2, (0, 1), "fallback", ()),
    ("1.5 stars, 2.0 > 3", 3, (2, 0, 1), "repaired", ("missing",)),  # decimals are not identifiers
])  # fmt: skip
def test_parse_permutation(text, n, order, status, repairs):
    assert parse_permutation(text, n) == Outcome(order, status, repairs)


@given(st.text(alphabet="[]>0123456789 <thinkTHINK/>x", max_size=80), st.integers(1, 12))
def test_any_answer_gives_a_permutation_of_the_window(text, n):
    out = parse_permutation(text, n)
    assert sorted(out.order) == list(range(n))  # no document invented, none lost
    assert out.status in ("ok", "repaired", "fallback")
    assert (out.status == "repaired") == bool(out.repairs)


def test_prompt_numbers_documents_from_one_and_truncates():
    p = render_prompt(DEFAULT_TEMPLATE, "red  shoes\n", ["a b c d e", "line one\nline two"], max_words=3)
    assert "A shopper searched for: red shoes\n" in p
    assert "[1] a b c ...\n[2] line one line ..." in p
    assert "Rank all 2 products" in p
    assert shorten("x y", 5) == "x y"


@pytest.mark.parametrize(("template", "problem"), [
    ("{query} {passages}", None),
    ("{query} {passages} {num} {{literal}}", None),
    ("{query}", "must use {passages}"),
    ("{passages}", "must use {query}"),
    ("{query} {passages} {doc}", "unknown field(s) {doc}"),
    ("{query} {passages} {", "not a valid template"),
    ("{} {query} {passages}", "positional field"),
])  # fmt: skip
def test_check_template(template, problem):
    got = check_template(template)
    assert (got is None) if problem is None else (problem in got)


def test_window_edges_and_shortening_at_the_word_limit():
    for window, stride in ((0, 1), (4, 0)):
        with pytest.raises(ValueError, match="^window and stride must be >= 1$"):
            sliding_windows(10, window, stride)
    assert shorten("a b  c", 3) == "a b c" and shorten("a b c d", 3) == "a b c ..."
