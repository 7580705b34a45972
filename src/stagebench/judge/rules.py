"""The rules judge (``judge: {backend: rules}``): the synthetic generator's own rules grade every
(query, product) pair of a dataset ``stagebench generate-data`` wrote - a perfect judge, so the
judge-filled table of such a folder is its true table (every hole in every stage's top ``depth``
graded). It grades by ids, not texts: nothing is asked, nothing is cached, and it refuses in one
line any dataset that is not a generated one (:func:`stagebench.data.synthetic.truth`).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stagebench.data.synthetic import RECORD, Truth, truth
from stagebench.errors import StagebenchError
from stagebench.judge.ask import Answer, Asked, JudgeParams
from stagebench.judge.scale import OK, Scale

RULES = "rules"


def dataset_problem(loader: str, options: Any) -> str | None:
    """Why the rules cannot grade the dataset a config names (None: they can, as far as the config
    shows; the folder itself is checked when the judge starts)."""
    if loader != "esci":
        return f"backend rules grades only a dataset stagebench generate-data wrote (loader esci), not loader {loader}"
    path = Path(getattr(options, "path", "") or "")
    if not (path / RECORD).is_file() and path.is_dir():
        return f"backend rules: {path} is not a dataset stagebench generate-data wrote (no {RECORD})"
    return None


class RulesJudge:
    """The judge a ``judge: {backend: rules}`` section describes, over the generated dataset in
    ``folder`` whose labels map to grades by ``labels`` (the loader's label table)."""

    concurrent = False
    reproducibility = "exact: the generator's rules, rebuilt from the seed and sizes the dataset records"

    def __init__(self, params: JudgeParams, folder: str | Path, labels: dict[str, int], label: str = "judge") -> None:
        self.params, self.folder, self.labels, self.label = params, Path(folder), dict(labels), label
        self._truth: Truth | None = None

    def truth(self) -> Truth:
        if self._truth is None:
            self._truth = truth(self.folder)
            missing = sorted({"E", "S", "C", "I"} - set(self.labels))
            if missing:
                raise StagebenchError(f"dataset.labels: maps no grade for {', '.join(missing)}: the rules answer E, S, C "
                                      "or I")  # fmt: skip
        return self._truth

    def backend(self) -> RulesJudge:
        return self

    def preflight(self) -> None:
        """The folder is a generated dataset, unchanged, and its rows are what its seed generates."""
        self.truth()

    def identity(self) -> dict:
        return {"rules": "stagebench.data.synthetic", "spec": asdict(self.truth().spec)}

    def grade(self, pairs: list[tuple[str, str]], texts: object, scale: Scale, cache: object, engine: object) -> Asked:
        """Every (query id, product id) graded by the rules, in order. A pair outside the dataset (a
        run's id that no generated product has) is an error, never a guessed grade. The texts, cache
        and engine an LLM judge uses are not needed."""
        t, t0 = self.truth(), time.perf_counter()
        answers = []
        for q, d in pairs:
            letter = t.label(q, d.split(":", 1)[1] if d.startswith("us:") else d)
            if letter is None:
                raise StagebenchError(f"judge (rules): query {q!r} or product {d!r} is not in the generated dataset "
                                      f"{self.folder}")  # fmt: skip
            grade = self.labels[letter]
            if grade not in scale.grades:
                raise StagebenchError(f"judge (rules): label {letter} maps to grade {grade}, outside the scale "
                                      f"{scale.grades}")  # fmt: skip
            answers.append(Answer(grade, OK))
        return Asked(answers, seconds=time.perf_counter() - t0)


__all__ = ["RULES", "RulesJudge", "dataset_problem"]
