"""Listwise reranking logic, free of any model: windows, prompts, and reading a permutation.

An LLM reranker (RankGPT's scheme) orders a query's top ``top_n`` candidates a window at a
time. :func:`sliding_windows` walks from the back of the list to the front with window ``w``
and stride ``s``, so a strong document found deep in the list is carried forward window by
window. Each window is shown to the model as a numbered list (:func:`render_prompt`); the
answer is read by :func:`parse_permutation`, which never lets the model's text decide what a
document *is*, only the order of the documents it was shown:

* reasoning blocks (``<think>...</think>``, or an unclosed ``<think>`` to the end) are removed;
* identifiers are read in order: ``[3]`` forms if there are any, else bare numbers;
* numbers outside ``1..n`` are dropped (``[0]`` is not the last document), repeats are dropped;
* candidates the answer left out are appended in their input order;
* nothing usable: the window keeps its input order.

Every window gets one :class:`Outcome` - ``ok``, ``repaired`` (with the repairs made),
``fallback`` - and the stage adds ``failed`` for requests that failed after retries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stagebench.data.text import template_problem
from stagebench.record import FAILED, FALLBACK, LOW_MASS, OK, OUTCOMES, REPAIRED, REPAIRS

__all__ = ["FAILED", "FALLBACK", "LOW_MASS", "OK", "OUTCOMES", "REPAIRED", "REPAIRS", "Outcome", "parse_permutation",
           "render_prompt", "shorten"]  # fmt: skip

DEFAULT_SYSTEM = "You are a search relevance expert for an online shop. You rank products by how well they match a shopper's search query."

DEFAULT_TEMPLATE = """A shopper searched for: {query}

Here are {num} products, each with an identifier in square brackets:

{passages}

Rank all {num} products from the best match for the search to the worst. A product that is exactly what the shopper asked for ranks above a substitute, a substitute above an accessory or complement, and those above unrelated products.
Answer with the identifiers only, best first, separated by " > ", for example [2] > [1] > [3]. Do not explain."""

#: the fields a prompt template may use; ``query`` and ``passages`` are required
TEMPLATE_FIELDS = ("query", "passages", "num")

_THINK_CLOSED = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>.*\Z", re.DOTALL | re.IGNORECASE)
_BRACKETED = re.compile(r"\[\s*(\d+)\s*\]")
_BARE = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


@dataclass(frozen=True)
class Outcome:
    """How one window's answer was read: ``order`` is a permutation of ``range(n)``."""

    order: tuple[int, ...]
    status: str  # ok | repaired | fallback
    repairs: tuple[str, ...] = ()  # which of REPAIRS were made (status == repaired)


def sliding_windows(n: int, window: int, stride: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` windows over ``n`` ranked candidates, back to front.

    The first window ends at ``n``; each next one ends ``stride`` earlier; the last one is
    the head, ``[0, min(window, n))``, always a full window (RankGPT stops early when the
    stride does not divide evenly and leaves the head partly unranked). A window of fewer
    than two candidates has nothing to order and is not produced.
    """
    if window < 1 or stride < 1:
        raise ValueError("window and stride must be >= 1")
    out: list[tuple[int, int]] = []
    end = n
    while end > 0:
        start = end - window
        if start <= 0:
            start, end = 0, min(window, n)
        if end - start >= 2:
            out.append((start, end))
        if start == 0:
            break
        end -= stride
    return out


def check_template(template: str) -> str | None:
    """Why a prompt template cannot be used, or None."""
    return template_problem(template, TEMPLATE_FIELDS, ("query", "passages"))


def shorten(text: str, max_words: int) -> str:
    """Whitespace (newlines too) collapsed, at most ``max_words`` words."""
    words = text.split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


def render_prompt(template: str, query: str, texts: list[str], max_words: int) -> str:
    passages = "\n".join(f"[{i + 1}] {shorten(t, max_words)}" for i, t in enumerate(texts))
    return template.format(query=" ".join(query.split()), passages=passages, num=len(texts))


def parse_permutation(text: str, n: int) -> Outcome:
    """Read a ranking of ``n`` candidates (identifiers ``1..n``) from a model's answer."""
    answer = _THINK_OPEN.sub("", _THINK_CLOSED.sub("", text))
    found = _BRACKETED.findall(answer) or _BARE.findall(answer)
    seen: list[int] = []
    repairs: set[str] = set()
    for raw in found:
        k = int(raw) - 1
        if not 0 <= k < n:
            repairs.add("out_of_range")
        elif k in seen:
            repairs.add("duplicate")
        else:
            seen.append(k)
    if not seen:
        return Outcome(tuple(range(n)), FALLBACK)
    if len(seen) < n:
        repairs.add("missing")
        seen += [k for k in range(n) if k not in seen]
    if repairs:
        return Outcome(tuple(seen), REPAIRED, tuple(r for r in REPAIRS if r in repairs))
    return Outcome(tuple(seen), OK)
