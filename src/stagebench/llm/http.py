"""An OpenAI-compatible chat-completion server as a backend (:class:`OpenAIBackend`): the HTTP
client with its deadline, size cap, redirects, retries and concurrency.

``POST {base_url}/chat/completions`` (Ollama, vLLM, llama.cpp's server, a hosted API). The API key
is read from the environment variable the config names, never from the config.
:meth:`OpenAIBackend.check` asks ``GET {base_url}/models`` before any stage runs: a server that
does not answer, refuses the key or does not serve the model is one clear error. The server's own
description of the model (less its ``created`` time, which some servers set per request) is the
model's identity, with the name and base URL.

* **Retries**: 429, 5xx, timeouts and dropped connections are retried with exponential backoff (a
  ``Retry-After`` header is honoured, up to 60 s), each retry a warning; after the last retry the
  request raises :class:`~stagebench.llm.request.RequestFailed`, which the stage counts. Any other
  refusal (400, 401, 403, 404) is a :class:`~stagebench.errors.StagebenchError`: retrying cannot fix it.
* **Concurrency**: requests in flight are held to :class:`InFlightLimit`, which halves after such a
  failure and grows back as answers come, so retries do not pile onto a server still computing.
* **Deadline and size**: ``timeout`` is a deadline for the whole request (connecting, waiting, and
  reading the answer), not per socket read, so a server that trickles its answer is cut off in
  time; an answer larger than :data:`MAX_ANSWER_BYTES` is refused (and so never cached).
* **A hung server** (issue 71): when :data:`SILENT_TIMEOUTS` requests in a row time out with no
  answer between them, and no answer has come for a whole ``timeout`` (since the last answer, or
  the first request), every request of the backend ends at once, each raising
  :class:`~stagebench.llm.request.RequestFailed` with one line saying so. A server that accepts and
  never answers ends the run at the first timeouts with the defaults (4 requests in flight, 120 s:
  about 2 minutes), not after every retry of every request queued behind a lowered limit.
  **A busy server is not hung** (issue 80): a server that has answered keeps working on the requests
  the client gave up on, and the requests behind them wait. So the silence that makes a server hung
  is longer by one service time (the median time to an answer so far, at most ``timeout``) for every
  request given up on since the last answer: ``timeout + drops x service``. A server that never
  answered has no service time, and the rule is as above; one that answers one request at a time in
  1.5 s, with 4 in flight and a 4 s timeout, is waited for, not abandoned; one that answered and then
  stopped is found hung once its silence outlasts the work it could still be doing. **On Ray** (issue 94)
  each worker holds its own copy of the backend, while the server's queue holds every worker's requests:
  the copies note every answer in the cluster's key-value store (:meth:`OpenAIBackend.shared_by`), so a
  server answering another worker is not silent to this one and a worker that has had no answer yet
  takes the others' pace as the service time; a copy shared by ``n`` workers counts ``n`` service times
  for each request it gave up on (it cannot see the others' drops; the workers run the same kind of
  units at the same pace, so each has given up on about as many), and holds ``concurrency // n`` in flight.
* **Redirects** are never followed: the request carries the API key, and a 3xx would send it to
  another address, so a redirect is one error naming where the server pointed.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import re
import socket
import statistics
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from collections.abc import Iterator
from typing import Any

from stagebench.errors import StagebenchError
from stagebench.llm.labels import label_variants
from stagebench.llm.request import TOP_LOGPROBS, Abandoned, ChatRequest, Completion, RequestFailed
from stagebench.runtime.engine import AnswerNotes

log = logging.getLogger("stagebench")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 60.0
#: the largest answer read from a server (a chat completion is a few KB; a listing, a few hundred)
MAX_ANSWER_BYTES = 4 << 20
#: an environment variable's name (the API key's)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are errors, never followed: a followed redirect would carry the API key to
    wherever the server (or a proxy) points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 - urllib's hook
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl}", headers, fp)


class _Watch:
    """One request's deadline: when it passes, the request's socket is shut down, which ends
    whatever read is waiting (connecting, headers, or an answer that trickles in)."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.fired = self.abandoned = False
        self._timer: threading.Timer | None = None
        self._sock: socket.socket | None = None

    def arm(self, sock: socket.socket) -> None:
        self._sock = sock
        self._timer = threading.Timer(max(0.0, self.at - time.monotonic()), self._fire, (sock,))
        self._timer.daemon = True
        self._timer.start()
        if self.abandoned:  # abandoned while it connected
            self._fire(sock)

    def _fire(self, sock: socket.socket) -> None:
        self.fired = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed: the request ended on its own
            pass

    def abandon(self) -> None:
        """End the request now (the run is stopping): its socket is shut down as at the deadline."""
        self.abandoned = True
        if self._sock is not None:
            self._fire(self._sock)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class _Current(threading.local):
    watch: _Watch | None = None


_CURRENT = _Current()


class _TrackedHTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        if _CURRENT.watch is not None:
            _CURRENT.watch.arm(self.sock)


class _TrackedHTTPS(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        if _CURRENT.watch is not None:
            _CURRENT.watch.arm(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):  # noqa: D102 - urllib's hook
        return self.do_open(_TrackedHTTP, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):  # noqa: D102 - urllib's hook
        return self.do_open(_TrackedHTTPS, req, context=self._context)


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect, _HTTPHandler, _HTTPSHandler)


def _read_capped(resp, limit: int) -> bytes:
    """The answer's body, refused past ``limit`` bytes (read as it arrives, never whole first)."""
    chunks, size = [], 0
    while chunk := resp.read1(65536):
        size += len(chunk)
        if size > limit:
            raise _TooLarge(f"the answer is larger than {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class _TooLarge(Exception):
    pass


def _usage_count(usage: dict, key: str, where: str) -> int:
    """A token count from an answer's ``usage``: absent or null is 0; anything but a whole
    number >= 0 is an error naming the field."""
    v = usage.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0 or (isinstance(v, float) and not v.is_integer()):
        raise StagebenchError(f"{where} answered usage.{key} = {v!r}, not a token count")
    return int(v)


def label_logprobs(logprobs: Any, labels: tuple[str, ...], where: str) -> tuple[float, ...] | None:
    """Each label's log-probability as the first token of a chat completion's ``logprobs``
    (``content[0]``: the token and its ``top_logprobs``); a label's spellings
    (:func:`~stagebench.llm.labels.label_variants`) are summed, a label not listed is -inf.
    None when the answer carries no logprobs; a malformed listing is an error naming the field."""
    if logprobs is None:
        return None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not content:
        return None
    first = content[0]
    if not isinstance(first, dict):
        raise StagebenchError(f"{where} answered logprobs.content[0] = {str(first)[:80]!r}, not an object")
    seen: dict[str, float] = {}
    for alt in [first, *(first.get("top_logprobs") or [])]:
        tok, lp = (alt.get("token"), alt.get("logprob")) if isinstance(alt, dict) else (None, None)
        if not isinstance(tok, str) or isinstance(lp, bool) or not isinstance(lp, int | float) or not lp <= 0:
            raise StagebenchError(f"{where} answered a logprobs entry {str(alt)[:80]!r}: expected a token and a "
                                  "log-probability <= 0")  # fmt: skip
        seen[tok] = float(lp)
    out = []
    for lab in labels:
        found = [seen[v] for v in label_variants(lab) if v in seen]
        out.append(math.log(sum(math.exp(v) for v in found)) if found else -math.inf)
    return tuple(out)


#: how many alternatives per position a server is asked for (OpenAI's largest ``top_logprobs``)

def _answer_text(out: Any, where: str, labels: bool) -> str | None:
    """The answer's text (``choices[0].message.content``); None when it has none - null, or empty
    where the text is what was asked for (``labels``: the label probabilities are read instead)."""
    try:
        text = out["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise StagebenchError(f"{where} answered without choices[0].message.content: {str(out)[:200]}") from None
    if text is None or (text == "" and not labels):
        return None
    if not isinstance(text, str):
        raise StagebenchError(f"{where} answered choices[0].message.content = {str(text)[:80]!r}, not text")
    return text


class _Transient(Exception):
    def __init__(self, message: str, wait: float | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.wait = wait
        self.timed_out = timed_out


#: requests in a row that time out, no answer between them, after which the server counts as hung
SILENT_TIMEOUTS = 2


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        return min(MAX_RETRY_AFTER, max(0.0, parsedate_to_datetime(value).timestamp() - time.time()))
    except (TypeError, ValueError):
        return None


def _server_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        err = json.loads(text).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    except (ValueError, AttributeError):
        pass
    return text[:200] or "(empty body)"


class InFlightLimit:
    """How many requests a backend has in flight at once: ``limit`` at most, halved (down to
    one) when a request times out or the server says it is busy (429, 5xx, a dropped
    connection), and raised by one after as many answers in a row as the current limit (up to
    ``limit`` again). A retry waits for a free slot like any request, so a server still
    computing the answers it was asked for is not sent the same work again on top of them
    (additive increase, multiplicative decrease, as TCP does)."""

    def __init__(self, limit: int) -> None:
        self.most = self.now = max(1, limit)
        self.busy = 0
        self.streak = 0
        self._cond = threading.Condition()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._cond:
            while self.busy >= self.now:
                self._cond.wait()
            self.busy += 1
        try:
            yield
        finally:
            with self._cond:
                self.busy -= 1
                self._cond.notify_all()

    def overloaded(self) -> int | None:
        """A request failed in a way more load cannot help: the lowered limit, or None if unchanged."""
        with self._cond:
            self.streak = 0
            if self.now == 1:
                return None
            self.now = max(1, self.now // 2)
            return self.now

    def succeeded(self) -> int | None:
        """An answer came back: the raised limit, or None if unchanged."""
        with self._cond:
            if self.now == self.most:
                return None
            self.streak += 1
            if self.streak < self.now:
                return None
            self.streak = 0
            self.now += 1
            self._cond.notify_all()
            return self.now


class OpenAIBackend:
    """An OpenAI-compatible chat-completions server."""

    concurrent = True
    reproducibility = ("answers from a server: the same request may be answered differently later (a model updated "
                       "under the same name, batching, sampling); this run's answers are in the cache, and the manifest "
                       "holds the server's model listing, URL, prompt digest and decoding parameters")  # fmt: skip

    def __init__(self, base_url: str, model: str, api_key_env: str = "", timeout: float = 60.0, retries: int = 3,
                 backoff: float = 1.0, label: str = "llm", concurrency: int = 1) -> None:  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self._limit = InFlightLimit(concurrency)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.label = label
        self._served: dict | None = None
        self._lock = threading.Lock()
        self._abandon = threading.Event()
        self._in_flight: set[_Watch] = set()
        self._silent = 0  # requests in a row that timed out with no answer between
        self._since: float | None = None  # the last answer (or the first request) - monotonic seconds
        self._answer_times: list[float] = []  # seconds from sending to the answer, the latest ones
        self._dropped = 0  # requests given up on (timed out) since the last answer
        self._hung = ""  # set once the server counts as hung: every request then fails with it
        self.sharers = 1  # processes asking the server at once, each with its own copy (shared_by)
        self._notes: AnswerNotes | None = None  # the answers every copy heard (shared_by)

    def shared_by(self, processes: int, notes: AnswerNotes | None = None) -> None:
        """The server is asked by ``processes`` copies of this backend at once (Ray workers), none seeing the
        others' requests: each copy holds its share of ``concurrency`` in flight (halved on its own timeouts);
        its hung-server rule hears the answers every copy notes in ``notes`` (a server answering another
        worker is not silent, and its answers' pace is the service time), and counts the work the server may
        still owe for requests given up on as if every copy had given up on as many as it did - the server's
        queue holds all of theirs (module doc)."""
        n = max(1, int(processes))
        self._notes = notes if n > 1 else None
        if n != self.sharers:
            self.sharers = n
            self._limit = InFlightLimit(max(1, self.concurrency // n))

    def __getstate__(self) -> dict:  # sent to Ray workers: the lock, the limit's and the stop's state are not
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_limit", "_abandon", "_in_flight")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._limit = InFlightLimit(max(1, self.concurrency // self.sharers))
        self._abandon = threading.Event()
        self._in_flight = set()
        self._silent, self._since, self._hung = 0, None, ""
        self._answer_times, self._dropped = [], 0

    def _heard(self, timed_out: bool, sent: float) -> None:
        """Count a request's outcome toward the hung-server rule (module doc); ``sent``: when it was sent
        (monotonic)."""
        notes = self._notes
        if not timed_out:
            now = time.monotonic()
            if notes is not None:
                notes.answered(now - sent)
            with self._lock:
                self._silent, self._since, self._dropped = 0, now, 0
                self._answer_times = [*self._answer_times[-15:], now - sent]
            return
        seen = notes.latest() if notes is not None else None  # another copy's latest answer (on Ray)
        with self._lock:
            now = time.monotonic()
            times = self._answer_times + ([seen[1]] if seen is not None else [])
            # the work the server may still do for the requests given up on before this one (by every copy
            # asking it: as many as this one gave up on each), at its own pace
            service = min(statistics.median(times), self.timeout) if times else 0.0
            allowance = self.timeout + self._dropped * self.sharers * service
            self._dropped += 1
            self._silent += 1
            quiet = now - (self._since if self._since is not None else now)
            if seen is not None:
                quiet = min(quiet, max(0.0, time.time() - seen[0]))
            if self._silent >= SILENT_TIMEOUTS and quiet >= allowance and not self._hung:
                self._hung = (f"the server answered none of {self._silent} requests in a row within the timeout "
                              f"({self.timeout:g} s each), nor anything for {quiet:.0f} s: it is hung, or far too slow "
                              "for this timeout (raise timeout, or check the server); no further request is sent")  # fmt: skip
                log.error("%s: %s: %s", self.label, self.base_url, self._hung)

    def abandon(self) -> None:
        """The run is stopping (a call failed for good, with ``failed_calls: stop``): no request or
        retry is started from now on, a retry's wait ends, and every request in flight is cut
        (each then raises :class:`~stagebench.llm.request.Abandoned`)."""
        self._abandon.set()
        with self._lock:
            watches = list(self._in_flight)
        for w in watches:
            w.abandon()

    # ------------------------------------------------------------------ HTTP
    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise StagebenchError(f"{self.label}: environment variable {self.api_key_env} (api_key_env) is not set "
                                      f"or empty on {socket.gethostname()} (pid {os.getpid()}); export the server's API "
                                      "key in it where the calls are made (engine ray: on every node, before "
                                      "`ray start`; docs/scale.md)")  # fmt: skip
            h["Authorization"] = f"Bearer {key}"
        return h

    def _call(self, method: str, path: str, body: dict | None) -> Any:
        """One HTTP request: the decoded JSON answer, :class:`_Transient` for what a retry may
        fix, :class:`StagebenchError` for what it cannot."""
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(url, data=data, method=method, headers=self._headers())
        watch = _CURRENT.watch = _Watch(self.timeout)
        with self._lock:
            self._in_flight.add(watch)
        if self._abandon.is_set():
            watch.abandoned = True
        try:
            try:
                with _opener().open(req, timeout=self.timeout) as resp:
                    raw = _read_capped(resp, MAX_ANSWER_BYTES)
            except Exception:
                if watch.abandoned:
                    raise Abandoned() from None
                if watch.fired:  # the shutdown at the deadline ended the read, whatever it raised
                    raise TimeoutError(f"timed out: no complete answer within timeout ({self.timeout:g} s for the "
                                       "whole request)") from None  # fmt: skip
                raise
            if watch.abandoned:
                raise Abandoned()
            if watch.fired:  # the deadline cut the answer short
                raise TimeoutError(f"timed out: no complete answer within timeout ({self.timeout:g} s for the whole "
                                   "request)")  # fmt: skip
        except _TooLarge as exc:
            raise StagebenchError(f"{self.label}: {method} {url}: {exc}; refusing it") from None
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                target = exc.headers.get("Location", "?") if exc.headers else "?"
                where = urllib.parse.urljoin(url, target)
                raise StagebenchError(f"{self.label}: {method} {url} answered HTTP {exc.code}, a redirect to {where}; "
                                      "stagebench does not follow redirects (the request carries your API key): set "
                                      "base_url to the address that answers") from None  # fmt: skip
            msg = _server_message(exc.read(MAX_ANSWER_BYTES))
            if exc.code in RETRYABLE_STATUS:
                raise _Transient(f"HTTP {exc.code}: {msg}", _retry_after(exc.headers.get("Retry-After"))) from None
            if exc.code in (401, 403):
                how = f"the key in ${self.api_key_env}" if self.api_key_env else "no API key (set api_key_env)"
                raise StagebenchError(f"{self.label}: {url} refused the request (HTTP {exc.code}: {msg}); it was sent "
                                      f"{how}") from None  # fmt: skip
            raise StagebenchError(f"{self.label}: {method} {url} failed: HTTP {exc.code}: {msg}") from None
        except (TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            raise _Transient(f"{type(exc).__name__}: {exc or 'timed out'}", timed_out=isinstance(exc, TimeoutError)) from None
        except urllib.error.URLError as exc:
            raise _Transient(f"cannot reach {url}: {exc.reason}") from None
        finally:
            watch.cancel()
            _CURRENT.watch = None
            with self._lock:
                self._in_flight.discard(watch)
        try:
            return json.loads(raw)
        except ValueError:
            raise StagebenchError(f"{self.label}: {url} answered with something that is not JSON: "
                                  f"{raw[:120]!r}") from None  # fmt: skip

    # ------------------------------------------------------------------ protocol
    def check(self) -> None:
        """Before any stage runs: the server answers, accepts the key, and serves the model."""
        if self._served is not None:
            return
        try:
            listing = self._call("GET", "/models", None)
        except _Transient as exc:
            raise StagebenchError(f"{self.label}: the LLM server at {self.base_url} does not answer ({exc}); start it "
                                  "or fix base_url") from None  # fmt: skip
        except StagebenchError as exc:
            if "HTTP 404" not in str(exc):
                raise
            log.warning("%s: %s has no /models listing; the model's identity is its name and the URL only",
                        self.label, self.base_url)  # fmt: skip
            self._served = {"id": self.model}
            return
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise StagebenchError(f"{self.label}: {self.base_url}/models did not return a model list")
        ids = [m.get("id") for m in data if isinstance(m, dict)]
        entry = next((m for m in data if isinstance(m, dict) and m.get("id") == self.model), None)
        if entry is None:
            shown = ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else "")
            raise StagebenchError(f"{self.label}: the server at {self.base_url} does not serve model {self.model!r} "
                                  f"(it serves: {shown or 'nothing'})")  # fmt: skip
        self._served = {k: v for k, v in entry.items() if k not in ("created", "object")}
        log.info("%s: server %s serves %s (%s)", self.label, self.base_url, self.model,
                 json.dumps(self._served, sort_keys=True))  # fmt: skip

    def identity(self) -> dict:
        self.check()
        return {"backend": "openai", "base_url": self.base_url, "model": self.model, "served": self._served}

    def complete(self, req: ChatRequest) -> Completion:
        body = {"model": self.model, "messages": [{"role": r, "content": c} for r, c in req.messages],
                "temperature": req.temperature, "max_tokens": req.max_new_tokens, "seed": req.seed, "stream": False}  # fmt: skip
        if req.labels:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        last = ""
        where = f"{self.label}: {self.base_url}/chat/completions"
        for attempt in range(self.retries + 1):
            if self._abandon.is_set():
                raise Abandoned()
            with self._limit.slot():
                if self._abandon.is_set():  # stopped while it waited for a slot
                    raise Abandoned()
                if self._hung:  # a request before it found the server hung: none is sent any more
                    raise RequestFailed(self._hung, attempt + 1)
                t0 = time.perf_counter()
                with self._lock:
                    sent = time.monotonic()
                    if self._since is None:  # the clock of the hung-server rule starts at the first request
                        self._since = sent
                try:
                    out = self._call("POST", "/chat/completions", body)
                    self._heard(False, sent)
                except _Transient as exc:
                    out, last, hint = None, str(exc), exc.wait
                    self._heard(exc.timed_out, sent)
                    if self._hung:
                        raise RequestFailed(self._hung, attempt + 1) from None
                dt = time.perf_counter() - t0
            answered = out is not None
            if answered:
                text = _answer_text(out, where, bool(req.labels))
                if text is None:  # content null, or no text where text was asked: a failed call, never cached
                    out, last, hint = None, "the server answered without text (choices[0].message.content is null" \
                        f"{'' if req.labels else ' or empty'})", None  # fmt: skip
            if out is None:
                lowered = None if answered else self._limit.overloaded()
                if lowered:
                    log.warning("%s: %s: %s; requests in flight lowered to %d of %d, so retries do not pile on a busy "
                                "server (raised again one at a time as answers come back)", self.label, self.base_url,
                                last, lowered, self.concurrency)  # fmt: skip
                if attempt == self.retries:
                    break
                wait = self.backoff * 2**attempt if hint is None else hint
                log.warning("%s: request failed (%s); retry %d of %d in %.1f s", self.label, last, attempt + 1,
                            self.retries, wait)  # fmt: skip
                if self._abandon.wait(wait):
                    raise Abandoned()
                continue
            raised = self._limit.succeeded()
            if raised:
                log.info("%s: requests in flight raised to %d of %d", self.label, raised, self.concurrency)
            usage = out.get("usage") or {}
            if not isinstance(usage, dict):
                raise StagebenchError(f"{where} answered usage = {str(usage)[:80]!r}, not an object")
            lp = label_logprobs(out["choices"][0].get("logprobs"), req.labels, where) if req.labels else None
            return Completion(text, _usage_count(usage, "prompt_tokens", where),
                              _usage_count(usage, "completion_tokens", where), dt, attempt, lp)  # fmt: skip
        n = self.retries + 1
        raise RequestFailed(f"{last} (after {n} attempt{'s' if n > 1 else ''})", n)

    def check_logprobs(self) -> None:
        """Before any stage runs, for a family that reads label probabilities only (pointwise):
        one probe request, which must come back with ``logprobs``."""
        probe = ChatRequest((("user", "Is the sky blue on a clear day? Answer Yes or No."),), 1, 0.0, 0, ("Yes", "No"))
        try:
            answer = self.complete(probe)
        except RequestFailed as exc:
            raise StagebenchError(f"{self.label}: the probe request to {self.base_url} failed ({exc})") from None
        if answer.label_logprobs is None:
            raise StagebenchError(f"{self.label}: the server at {self.base_url} answered without logprobs (asked for "
                                  f"logprobs: true, top_logprobs: {TOP_LOGPROBS}); method pointwise reads the label "
                                  "probabilities: use a server that returns them (vLLM, llama.cpp's server, OpenAI) or "
                                  "method listwise, pairwise or setwise, which read the answer's text")  # fmt: skip
