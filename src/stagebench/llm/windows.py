"""Listwise reranking of one query, a sliding window at a time: the engine task of the LLM
stage (:mod:`stagebench.stages.llm_rerank`), and the count of what its windows did.

A query's windows run in order (each sees the order the previous one left); every window's
request -> answer goes through the content-addressed cache (kind ``llm``), so a killed run
resumes at the next window and a rerun asks the model nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from stagebench.cache import Cache
from stagebench.errors import StagebenchError
from stagebench.record import LLMStats
from stagebench.llm.chat import cached_answer
from stagebench.llm.request import Abandoned, ChatBackend, ChatRequest, Completion, RequestFailed
from stagebench.llm.listwise import FAILED, OUTCOMES, REPAIRS, parse_permutation, render_prompt


@dataclass
class WindowStats:
    """What the stage's windows did, recorded with its run (manifest ``stats``)."""

    queries: int = 0
    windows: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    repairs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REPAIRS, 0))
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    model_seconds: float = 0.0  # the answers' compute time, whether computed now or read from the cache
    cached_windows: int = 0
    mass_sum: float = 0.0  # label answers read from log-probabilities: their label mass, summed
    mass_calls: int = 0

    def record(self, status: str, repairs: tuple[str, ...] = (), answer: Completion | None = None, retries: int = 0,
               cached: bool = False, mass: float | None = None) -> None:  # fmt: skip
        """One call's outcome (``answer`` None: the request failed after ``retries`` retries)."""
        if mass is not None:
            self.mass_sum += mass
            self.mass_calls += 1
        self.windows += 1
        self.outcomes[status] += 1
        for r in repairs:
            self.repairs[r] += 1
        if answer is not None:
            self.prompt_tokens += answer.prompt_tokens
            self.completion_tokens += answer.completion_tokens
            self.model_seconds += answer.seconds
            retries = answer.retries
        self.retries += retries
        self.cached_windows += cached

    def typed(self, candidates: int, reproducibility: str, method: str = "listwise",
              wall_seconds: float = 0.0) -> LLMStats:  # fmt: skip
        """The record; ``wall_seconds``: how long the calls took in this run, start to end (what
        ``seconds_per_query`` divides: concurrent requests overlap, so their latencies summed,
        ``model_seconds``, can be several times the time spent)."""
        mass = round(self.mass_sum / self.mass_calls, 4) if self.mass_calls else None
        return LLMStats(method=method, label_mass=mass, queries=self.queries, windows=self.windows, outcomes=dict(self.outcomes),
                        repairs=dict(self.repairs), prompt_tokens=self.prompt_tokens,
                        completion_tokens=self.completion_tokens, retries=self.retries,
                        model_seconds=round(self.model_seconds, 3),
                        seconds_per_query=round(wall_seconds / max(self.queries, 1), 3), wall_seconds=round(wall_seconds, 3),
                        windows_from_cache=self.cached_windows, candidates=candidates,
                        reproducibility=reproducibility)  # fmt: skip


@dataclass(frozen=True)
class WindowAnswer:
    """One call of one query (a listwise window, or a label-reading family's question): its
    outcome, and the answer (None: the request failed)."""

    where: str  # what the call covered, for messages: "products 1-10" (a window), "products 3 and 4" ...
    status: str
    repairs: tuple[str, ...] = ()
    answer: Completion | None = None
    retries: int = 0
    cached: bool = False
    error: str = ""
    mass: float | None = None  # a label answer's share of the next-token probability on the labels


class QueryTask:
    """An engine task: one query's windows, in order -> the reordered head and each window's
    :class:`WindowAnswer`. Every answer goes through the content-addressed cache (a Ray worker
    writes to the same cache folder, which must then be shared: docs/scale.md). Picklable: the
    backend's loaded model and connections are not pickled."""

    def __init__(self, backend: ChatBackend, identity: dict, cache: Cache | None,
                 template: str, p: Any, stage: str) -> None:  # fmt: skip
        self.backend, self.identity, self.cache, self.template, self.stage = backend, identity, cache, template, stage
        self.system = (("system", p.system_prompt),) if p.system_prompt else ()
        self.max_doc_words, self.max_new_tokens = p.max_doc_words, p.max_new_tokens
        self.temperature, self.seed, self.model = p.temperature, p.seed, p.model
        self.failed_calls = p.failed_calls
        self._stop = threading.Event()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_stop"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._stop = threading.Event()

    def cancel(self) -> None:
        """Stop now (the engine calls it when a query's task failed): no further window is asked,
        and the backend abandons its retries and the requests in flight."""
        self._stop.set()
        abandon = getattr(self.backend, "abandon", None)
        if callable(abandon):
            abandon()

    def answer(self, req: ChatRequest) -> tuple[Completion, bool]:
        return cached_answer(self.cache, self.backend, self.identity, req, self.model, f"stage {self.stage}", "window")

    def failed(self, where: str, exc: RequestFailed) -> WindowAnswer:
        """A call whose request failed after every retry: with ``failed_calls: stop`` the query
        (and the run) stops here; with ``accept`` it is counted and the query goes on."""
        if self.failed_calls == "stop":
            raise CallFailed(where, str(exc))
        return WindowAnswer(where, FAILED, retries=exc.attempts - 1, error=str(exc))

    def __call__(self, unit: tuple) -> tuple[list[str], list[WindowAnswer]]:
        try:
            return self.rerank(unit)
        except CallFailed as exc:
            raise StagebenchError(
                f"stage {self.stage}: query {unit[0]!r}, {exc.where}: the request failed after every retry "
                f"({exc.error}); no results were written. The answers that came back are cached, so the same "
                "command asks only for the rest; failed_calls: accept keeps such calls in their input order "
                "instead (the table marks the stage)") from None  # fmt: skip

    def rerank(self, unit: tuple) -> tuple[list[str], list[WindowAnswer]]:
        """One query's windows in order: the reordered candidates and each window's answer."""
        _qid, query, doc_ids, texts, plan = unit
        order = list(range(len(doc_ids)))
        windows: list[WindowAnswer] = []
        for start, end in plan:
            if self._stop.is_set():
                raise Stopped()
            shown = order[start:end]
            user = render_prompt(self.template, query, [texts[i] for i in shown], self.max_doc_words)
            req = ChatRequest((*self.system, ("user", user)), self.max_new_tokens or 8 * len(shown) + 16,
                              self.temperature, self.seed)  # fmt: skip
            try:
                comp, cached = self.answer(req)
            except Abandoned:
                raise Stopped() from None
            except RequestFailed as exc:
                windows.append(self.failed(f"products {start + 1}-{end}", exc))
                continue
            outcome = parse_permutation(comp.text, len(shown))
            order[start:end] = [shown[k] for k in outcome.order]
            windows.append(WindowAnswer(f"products {start + 1}-{end}", outcome.status, outcome.repairs, comp,
                                        cached=cached))  # fmt: skip
        return [doc_ids[i] for i in order], windows


class Stopped(Exception):
    """Another query's failure stopped this one."""


class CallFailed(Exception):
    """A call failed after every retry, with ``failed_calls: stop``."""

    def __init__(self, where: str, error: str) -> None:
        super().__init__(f"{where}: {error}")
        self.where, self.error = where, error


__all__ = ["CallFailed", "QueryTask", "Stopped", "WindowAnswer", "WindowStats"]
