"""Label-reading LLM rerankers, free of any model: prompts, label sets, and reading an answer.

The pointwise, pairwise and setwise families (:mod:`stagebench.llm.families`) each ask a
question whose answer is one *label*: ``Yes``/``No`` (or an ESCI letter) for one product,
``A``/``B`` for a pair, a letter for the best of a set. A backend answers such a request
with the log-probability of each label as the answer's first token where it can
(in process: always; a server: when it returns ``logprobs``), else with generated text.
:func:`read_labels` turns either into a distribution over the labels and an outcome:

* from log-probabilities: the labels' probabilities renormalized over the labels; ``ok``
  when the labels held at least half of the next-token probability mass, ``low_mass`` when
  the model wanted to say something else (the relative probabilities are still used);
* from text: the first label the answer names (``B``, ``[B]``, ``Product B``, ``yes``),
  one-hot, ``ok``; no label named: ``fallback``, a uniform distribution (no preference:
  the candidate keeps its place).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from stagebench.data.text import template_problem
from stagebench.llm.listwise import FALLBACK, LOW_MASS, OK, shorten

#: label sets of the pointwise family: (label, grade); the score is the expected grade
LABEL_SETS: dict[str, tuple[tuple[str, float], ...]] = {
    "yes_no": (("Yes", 1.0), ("No", 0.0)),
    "esci": (("E", 3.0), ("S", 2.0), ("C", 1.0), ("I", 0.0)),
}
#: the least share of the next-token probability the labels must hold for an ``ok`` answer
MIN_MASS = 0.5

POINTWISE_YES_NO = """A shopper searched for: {query}

Product: {passage}

Is this product what the shopper is looking for? Answer Yes or No."""

POINTWISE_ESCI = """A shopper searched for: {query}

Product: {passage}

How well does this product match the search? Answer with one letter: E if it is exactly what the shopper asked for, S if it is a substitute, C if it is a complement or accessory, I if it is irrelevant."""

PAIRWISE = """A shopper searched for: {query}

Product A: {passage_a}

Product B: {passage_b}

Which product better matches the search, A or B? Answer A or B."""

SETWISE = """A shopper searched for: {query}

Products:
{passages}

Which product best matches the search? Answer with its letter only ({labels})."""

#: per family: the fields a prompt template may use, and those it must use
TEMPLATE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pointwise": (("query", "passage"), ("query", "passage")),
    "pairwise": (("query", "passage_a", "passage_b"), ("query", "passage_a", "passage_b")),
    "setwise": (("query", "passages", "labels"), ("query", "passages")),
}


def default_template(method: str, labels: str = "yes_no") -> str:
    if method == "pointwise":
        return POINTWISE_ESCI if labels == "esci" else POINTWISE_YES_NO
    return {"pairwise": PAIRWISE, "setwise": SETWISE}[method]


def check_template(method: str, template: str) -> str | None:
    """Why ``template`` cannot prompt the ``method`` family, or None."""
    allowed, required = TEMPLATE_FIELDS[method]
    return template_problem(template, allowed, required)


def letters(n: int) -> tuple[str, ...]:
    """``A``, ``B``, ... for a set of ``n`` candidates (at most 26)."""
    if not 1 <= n <= 26:
        raise ValueError(f"a set of {n} candidates cannot be lettered A-Z")
    return tuple(chr(ord("A") + i) for i in range(n))


def render_pointwise(template: str, query: str, text: str, max_words: int) -> str:
    return template.format(query=" ".join(query.split()), passage=shorten(text, max_words))


def render_pairwise(template: str, query: str, a: str, b: str, max_words: int) -> str:
    return template.format(query=" ".join(query.split()), passage_a=shorten(a, max_words), passage_b=shorten(b, max_words))


def render_setwise(template: str, query: str, texts: list[str], max_words: int) -> str:
    names = letters(len(texts))
    passages = "\n".join(f"[{k}] {shorten(t, max_words)}" for k, t in zip(names, texts))
    return template.format(query=" ".join(query.split()), passages=passages, labels=", ".join(names))


@dataclass(frozen=True)
class LabelReading:
    """One answer read as a distribution over the labels asked for."""

    probs: tuple[float, ...]  # sums to 1
    status: str  # ok | low_mass | fallback
    mass: float | None  # the labels' share of the next-token probability (None: read from text)

    def best(self) -> int | None:
        """The most probable label's index; None when no label is preferred (a tie at the top)."""
        top = max(self.probs)
        winners = [i for i, p in enumerate(self.probs) if p == top]
        return winners[0] if len(winners) == 1 else None


def read_labels(labels: tuple[str, ...], logprobs: tuple[float, ...] | None, text: str) -> LabelReading:
    """The distribution over ``labels`` from their log-probabilities, else from ``text``."""
    n = len(labels)
    if logprobs is not None:
        probs = [math.exp(lp) if lp > -math.inf else 0.0 for lp in logprobs]
        mass = sum(probs)
        if mass <= 0.0:
            return LabelReading((1.0 / n,) * n, FALLBACK, 0.0)
        return LabelReading(tuple(p / mass for p in probs), OK if mass >= MIN_MASS else LOW_MASS, round(min(mass, 1.0), 6))
    k = label_in_text(labels, text)
    if k is None:
        return LabelReading((1.0 / n,) * n, FALLBACK, None)
    return LabelReading(tuple(1.0 if i == k else 0.0 for i in range(n)), OK, None)


_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)


def label_in_text(labels: tuple[str, ...], text: str) -> int | None:
    """The index of the first label ``text`` names as a word (case-insensitive for words,
    exact for single letters, so the article "a" is not the label ``A``), or None."""
    answer = _THINK.sub("", text)
    first: tuple[int, int] | None = None
    for i, lab in enumerate(labels):
        flags = 0 if len(lab) == 1 else re.IGNORECASE
        m = re.search(rf"(?<![A-Za-z0-9]){re.escape(lab)}(?![A-Za-z0-9])", answer, flags)
        if m and (first is None or m.start() < first[0]):
            first = (m.start(), i)
    return None if first is None else first[1]


def label_variants(label: str) -> tuple[str, ...]:
    """The spellings of ``label`` whose first token counts as the label (``Yes``, ``yes``, `` Yes`` ...;
    a letter only as written, with or without a space before it)."""
    forms = {label} if len(label) == 1 else {label, label.lower(), label.upper(), label.capitalize()}
    return tuple(sorted(forms | {" " + f for f in forms}))


__all__ = ["LABEL_SETS", "LabelReading", "MIN_MASS", "check_template", "default_template", "label_in_text",
           "label_variants", "letters", "read_labels", "render_pairwise", "render_pointwise", "render_setwise"]
