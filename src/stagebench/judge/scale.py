"""What the LLM judge is asked and how its answer is read: the dataset's grade scale in words, the
prompt, and one grade out of one answer.

The scale follows the dataset's labels: ESCI's four (Exact, Substitute, Complement, Irrelevant,
with the definitions of the Shopping Queries paper) when its grades are named E/S/C/I, else the
numbers 0..top with graded descriptions. An answer is read as:

* ``ok`` - the answer is one label (or, for ESCI, its letter), give or take punctuation and case;
* ``repaired`` - exactly one label found inside a longer answer ("Exact: it matches");
* ``unusable`` - no label, or several different ones ("Exact, Substitute, ..." - a model that
  repeats the scale): the pair stays a hole (counted, never guessed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stagebench.data.text import template_problem
from stagebench.llm.listwise import shorten

OK, REPAIRED, UNUSABLE, FAILED = "ok", "repaired", "unusable", "failed"
OUTCOMES = (OK, REPAIRED, UNUSABLE, FAILED)

DEFAULT_SYSTEM = ("You are a careful search quality rater for an online shop. You judge how well one product matches "
                  "a shopper's search query.")  # fmt: skip

DEFAULT_TEMPLATE = """A shopper searched for: {query}

Product: {document}

How well does this product match the search? Choose one label:
{scale}

Answer with exactly one word: the label."""

TEMPLATE_FIELDS = ("query", "document", "scale")

#: ESCI's labels as the Shopping Queries paper defines them (Reddy et al., 2022), grade -> (name, letter, meaning)
ESCI = {
    3: ("Exact", "E", "the product is relevant for the query and satisfies every specification in it"),
    2: ("Substitute", "S", "the product is somewhat relevant: it fails some aspect of the query but can be used in its place"),
    1: ("Complement", "C", "the product does not fulfil the query but could be used together with an exact item"),
    0: ("Irrelevant", "I", "the product is irrelevant for the query or fails a central aspect of it"),
}


@dataclass(frozen=True)
class Scale:
    """The grades the judge may give, best first: grade -> the label it answers with, and what it means."""

    labels: tuple[tuple[int, str, str], ...]  # (grade, label, meaning), best first
    letters: tuple[tuple[str, int], ...] = ()  # one-letter answers also read as a label (ESCI's E/S/C/I)

    def text(self) -> str:
        """The scale as the prompt shows it, one label a line."""
        return "\n".join(f"- {label}: {meaning}" for _, label, meaning in self.labels)

    @property
    def grades(self) -> list[int]:
        return sorted(g for g, _, _ in self.labels)

    def name(self, grade: int) -> str:
        return next(label for g, label, _ in self.labels if g == grade)


def scale_for(label_names: dict[int, str], grades: set[int]) -> Scale:
    """The dataset's scale: ESCI's words when its grades are named E/S/C/I, else 0..top in numbers."""
    if label_names and {g: n for g, n in label_names.items()} == {g: v[1] for g, v in ESCI.items()}:
        return Scale(tuple((g, name, meaning) for g, (name, _, meaning) in sorted(ESCI.items(), reverse=True)),
                     tuple((letter, g) for g, (_, letter, _) in ESCI.items()))  # fmt: skip
    top = max(grades | {1})
    labels = []
    for g in range(top, -1, -1):
        meaning = ("not relevant to the query" if g == 0 else "fully relevant: exactly what the query asks for"
                   if g == top else f"partly relevant (grade {g} of {top}; higher is more relevant)")  # fmt: skip
        labels.append((g, str(g), meaning))
    return Scale(tuple(labels))


def check_template(template: str) -> str | None:
    """Why a judge prompt template cannot be used, or None."""
    return template_problem(template, TEMPLATE_FIELDS, ("query", "document"))


def render_prompt(template: str, query: str, document: str, scale: Scale, max_words: int) -> str:
    return template.format(query=" ".join(query.split()), document=shorten(document, max_words), scale=scale.text())


_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Grade:
    """One answer read: the grade (None: unusable) and how it was read."""

    grade: int | None
    status: str  # ok | repaired | unusable


def parse_grade(text: str, scale: Scale) -> Grade:
    """One grade out of a judge's answer (see the module's rules)."""
    answer = _THINK.sub("", text).strip()
    names = {label.lower(): g for g, label, _ in scale.labels}
    bare = answer.strip(" \t\n.!:;\"'`*()[]").lower()
    if bare in names:
        return Grade(names[bare], OK)
    letters = {letter.lower(): g for letter, g in scale.letters}
    if bare in letters:
        return Grade(letters[bare], OK)
    words = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    found = {names[m.lower()] for m in re.findall(rf"(?<![\w.-])({words})(?![\w-]|\.\d)", answer, re.IGNORECASE)}
    if len(found) == 1:
        return Grade(found.pop(), REPAIRED)
    return Grade(None, UNUSABLE)
