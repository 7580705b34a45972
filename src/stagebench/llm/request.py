"""What a chat backend is asked and answers, and the protocol every backend follows.

A :class:`ChatRequest` (messages, answer budget, temperature, seed; for a label request the labels
whose first-token log-probabilities are wanted) is answered with a :class:`Completion`, or raises
:class:`RequestFailed` once every retry is spent. :class:`ChatBackend` is the protocol the server
client (:mod:`stagebench.llm.http`), the in-process model (:mod:`stagebench.llm.local`) and the
tests' scripted backend implement; ``identity()`` is part of every cache key built from its answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


TOP_LOGPROBS = 20


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[tuple[str, str], ...]  # (role, content)
    max_new_tokens: int
    temperature: float
    seed: int
    #: a label request: the answer's first-token log-probability of each label is wanted
    #: (:mod:`stagebench.llm.labels`); empty: a plain completion
    labels: tuple[str, ...] = ()

    def as_json(self) -> dict:
        out = {"messages": [list(m) for m in self.messages], "max_new_tokens": self.max_new_tokens,
               "temperature": self.temperature, "seed": self.seed}  # fmt: skip
        if self.labels:
            out["labels"] = list(self.labels)
        return out


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float  # the successful attempt's wall time
    retries: int = 0  # attempts before the one that succeeded
    #: a label request's answer: each label's log-probability as the first token (-inf: not
    #: among the alternatives a server listed); None: the backend gave text only
    label_logprobs: tuple[float, ...] | None = None

    def as_json(self) -> dict:
        out = {"text": self.text, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
               "seconds": round(self.seconds, 4), "retries": self.retries}  # fmt: skip
        if self.label_logprobs is not None:  # JSON has no -inf: null stands for it
            out["label_logprobs"] = [None if v == -math.inf else v for v in self.label_logprobs]
        return out

    @classmethod
    def from_json(cls, d: dict) -> Completion:
        lp = d.get("label_logprobs")
        return cls(str(d["text"]), int(d["prompt_tokens"]), int(d["completion_tokens"]), float(d["seconds"]),
                   int(d.get("retries", 0)), None if lp is None else tuple(-math.inf if v is None else float(v) for v in lp))  # fmt: skip


class RequestFailed(Exception):
    """A request that still failed (429, 5xx, timeout, connection) after every retry."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class Abandoned(RequestFailed):
    """A request given up because the run is stopping (another call failed for good, with
    ``failed_calls: stop``): not a failure of its own."""

    def __init__(self) -> None:
        super().__init__("abandoned: the run is stopping", 0)


class ChatBackend(Protocol):
    """A chat-completion backend: ``concurrent`` (requests may be sent from several threads),
    ``check()`` before any stage runs (one clear error when it cannot answer), ``identity()`` (who
    answers: part of every answer's cache key) and ``complete(request)``."""

    concurrent: bool

    def check(self) -> None: ...

    def identity(self) -> dict: ...

    def complete(self, req: ChatRequest) -> Completion: ...


@runtime_checkable
class LabelBatches(Protocol):
    """A backend that answers several label requests in one batch (the in-process model)."""

    def complete_labels(self, reqs: list[ChatRequest]) -> list[Completion]: ...
