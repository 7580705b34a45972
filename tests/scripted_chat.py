"""The one scripted chat backend of the unit tests: it answers a request from its prompt by a
script the test gives, so the parsers, the LLM stages and the judge can be unit-tested without a
model. It follows the backend protocol :class:`stagebench.llm.request.ChatBackend` (``concurrent``,
``check``, ``identity``, ``complete``). The real model and the real server are in tests/llm/test_server.py
and tests/judge/test_server.py."""

from __future__ import annotations

import threading
from collections.abc import Callable

from stagebench.llm.request import ChatRequest, Completion


class ScriptedChat:
    """``reply(request) -> Completion`` answers (a subclass may override :meth:`reply` instead);
    ``fail_on(request)`` returns an exception to raise for a request, or None. ``identity`` is
    ``{"backend": name, **identity}``, so two scripts are two models to the cache. Counts its calls
    and keeps every (request, answer) in ``asked``."""

    concurrent = True

    def __init__(self, reply: Callable[[ChatRequest], Completion] | None = None, *,
                 fail_on: Callable[[ChatRequest], BaseException | None] | None = None, name: str = "scripted",
                 **identity) -> None:  # fmt: skip
        self._reply = reply
        self.fail_on = fail_on or (lambda req: None)
        self._identity = {"backend": name, **identity}
        self.calls = 0
        self.asked: list[tuple[ChatRequest, Completion]] = []
        self.lock = threading.Lock()

    def check(self) -> None:
        return None

    def identity(self) -> dict:
        return dict(self._identity)

    def reply(self, req: ChatRequest) -> Completion:
        assert self._reply is not None, "a ScriptedChat needs reply= or a reply() method"
        return self._reply(req)

    def complete(self, req: ChatRequest) -> Completion:
        with self.lock:
            self.calls += 1
        exc = self.fail_on(req)
        if exc is not None:
            raise exc
        out = self.reply(req)
        with self.lock:
            self.asked.append((req, out))
        return out
