"""Asking the LLM judge: its settings (the ``judge:`` section of a config), and one grade per
(query, document) pair through the same chat backends, retries, preflight and per-answer cache as
``llm_rerank`` (:mod:`stagebench.llm.chat`): a killed judge resumes at the next pair, a rerun asks
nothing, and a changed prompt, scale, model or decoding setting asks again. Pairs run
``concurrency`` at a time against a server, one at a time in process.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from stagebench.errors import StagebenchError
from stagebench.cache import Cache
from stagebench.runtime.engine import Engine
from stagebench.judge.scale import DEFAULT_SYSTEM, DEFAULT_TEMPLATE, FAILED, OUTCOMES, Scale, check_template, parse_grade, render_prompt
from stagebench.params import Length, NonNegativeInt, PositiveInt, Range, Seed, param
from stagebench.llm.chat import ChatParams, cached_answer, keep_models_in, make_backend, prompt_problems, read_prompt
from stagebench.llm.request import Abandoned, ChatRequest, Completion, RequestFailed

log = logging.getLogger("stagebench")


@dataclass
class JudgeParams(ChatParams):
    backend: Literal["transformers", "openai", "rules"] = param(
        "transformers", "transformers: in process; openai: any OpenAI-compatible chat-completions server (docs/llm.md); "
        "rules: the synthetic generator's own rules, a perfect judge of a dataset generate-data wrote (docs/metrics.md)")
    depth: PositiveInt = param(10, "the unjudged documents in the top depth of every stage are graded, pooled over "
                               "the stages (each pair asked once)")  # fmt: skip
    stages: Annotated[list[str], Length()] | None = param(None, "the stages whose top depth is pooled (null: every stage)")
    sample: NonNegativeInt = param(200, "already-judged pairs from the same pool that the judge grades without seeing "
                                   "the human label, to measure its agreement (0: none)")  # fmt: skip
    sample_seed: Seed = param(13, "seed of that sample")
    bootstrap: Annotated[int, Range(ge=100)] = param(1000, "bootstrap resamples of the agreement's intervals")
    prompt: str = param("", "a file holding the user-message template ({query}, {document}, {scale}); empty: built in")
    system_prompt: str = param(DEFAULT_SYSTEM, "the system message (empty: none)")
    max_doc_words: PositiveInt = param(80, "words of the document's text in the prompt")
    max_new_tokens: PositiveInt | None = param(None, "the longest answer asked for; null: 8 tokens (a label; a "
                                               "reasoning model needs more)")  # fmt: skip
    concurrency: PositiveInt = param(4, "openai: pairs in flight at once (the in-process backend runs one)")
    failed_calls: Literal["stop", "accept"] = param(
        "stop", "a pair whose request fails after every retry: stop (one error line, exit 2, the judge's tables not "
                "written; the answers that came are cached, so the same command asks only for the rest) | accept (the "
                "pair stays a hole, and the judge's summary counts the failed pairs)", affects=())  # fmt: skip

    def validate(self) -> list[tuple[str, str]]:
        return self.check()

    def check(self) -> list[tuple[str, str]]:
        return super().check() + prompt_problems(self.prompt, check_template)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Answer:
    """One pair's grade (None: unusable or failed) and how its answer was read."""

    grade: int | None
    status: str  # ok | repaired | unusable | failed
    completion: Completion | None = None
    cached: bool = False
    error: str = ""


@dataclass
class Asked:
    """Every pair's answer, in the order asked, and the counts the record keeps."""

    answers: list[Answer]
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    from_cache: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    model_seconds: float = 0.0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        for a in self.answers:
            self.outcomes[a.status] += 1
            self.from_cache += a.cached
            if a.completion is not None:
                c = a.completion
                self.prompt_tokens += c.prompt_tokens
                self.completion_tokens += c.completion_tokens
                self.retries += c.retries
                self.model_seconds += c.seconds


class PairTask:
    """An engine task: one (query text, document text) -> :class:`Answer`. Picklable (the backend's
    loaded model and connections are not pickled)."""

    def __init__(self, judge: Judge, cache: Cache | None, scale: Scale) -> None:
        p = judge.params
        self.backend, self.identity, self.cache, self.scale = judge.backend(), judge.backend().identity(), cache, scale
        self.template, self.model, self.label = judge.template(), p.model, judge.label
        self.system = (("system", p.system_prompt),) if p.system_prompt else ()
        self.max_doc_words, self.max_new_tokens, self.temperature, self.seed = (p.max_doc_words, p.max_new_tokens or 8,
                                                                               p.temperature, p.seed)  # fmt: skip
        self.failed_calls = p.failed_calls

    def cancel(self) -> None:
        """Another pair failed for good (``failed_calls: stop``): the backend abandons its retries and
        the requests in flight (the engine starts no further pair)."""
        abandon = getattr(self.backend, "abandon", None)
        if callable(abandon):
            abandon()

    def request(self, query: str, document: str) -> ChatRequest:
        user = render_prompt(self.template, query, document, self.scale, self.max_doc_words)
        return ChatRequest((*self.system, ("user", user)), self.max_new_tokens, self.temperature, self.seed)

    def __call__(self, unit: tuple[str, str]) -> Answer:
        query, document = unit
        try:
            comp, cached = cached_answer(self.cache, self.backend, self.identity, self.request(query, document),
                                         self.model, self.label, "judgment")  # fmt: skip
        except Abandoned:
            raise
        except RequestFailed as exc:
            if self.failed_calls == "stop":
                raise StagebenchError(
                    f"{self.label}: a pair's request failed after every retry ({exc}); the judge's tables were not "
                    "written. The answers that came back are cached, so the same command asks only for the rest; "
                    "failed_calls: accept keeps such pairs as holes instead (the judge's summary counts them)") from None  # fmt: skip
            return Answer(None, FAILED, error=str(exc))
        g = parse_grade(comp.text, self.scale)
        return Answer(g.grade, g.status, comp, cached)


class Judge:
    """The judge a ``judge:`` section describes; its backend is made on first use."""

    def __init__(self, params: JudgeParams, label: str = "judge") -> None:
        self.params, self.label = params, label
        self._backend: Any = None

    def backend(self) -> Any:
        if self._backend is None:
            self._backend = make_backend(self.params, self.label)
        return self._backend

    def template(self) -> str:
        return read_prompt(self.params.prompt) if self.params.prompt else DEFAULT_TEMPLATE

    def preflight(self) -> None:
        """A server answers, accepts the key and serves the model, before anything runs."""
        self.backend().check()

    def identity(self) -> dict:
        p = self.params
        return {"llm": self.backend().identity(), "prompt_template": _digest(self.template()),
                "system_prompt": _digest(p.system_prompt), "prompt_file": bool(p.prompt)}  # fmt: skip

    def grade(self, pairs: list[tuple[str, str]], texts: list[tuple[str, str]], scale: Scale, cache: Cache | None,
              engine: Engine) -> Asked:  # fmt: skip
        """Grade every (query id, document id) pair from its (query text, document text)."""
        return self.ask(texts, scale, cache, engine)

    def ask(self, units: list[tuple[str, str]], scale: Scale, cache: Cache | None, engine: Engine) -> Asked:
        """Grade every (query text, document text), in order."""
        keep_models_in(self.backend(), cache, engine.remote)
        task = PairTask(self, cache, scale)
        t0 = time.perf_counter()
        answers = engine.map(task, units, desc=f"{self.label}: pairs", unit="pair",
                             threads=self.params.concurrency if self.backend().concurrent else 1)  # fmt: skip
        asked = Asked(answers, seconds=time.perf_counter() - t0)
        failed = [a for a in answers if a.status == FAILED]
        if failed:
            log.warning("%s: %d of %d pairs failed after every retry (failed_calls: accept; the first: %s); they stay "
                        "holes", self.label, len(failed), len(answers), failed[0].error)  # fmt: skip
        return asked


__all__ = ["Answer", "Asked", "Judge", "JudgeParams", "PairTask"]
