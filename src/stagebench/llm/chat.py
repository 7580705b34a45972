"""Chat-completion backends for LLM rerankers: any OpenAI-compatible server, or a model in process.

Both answer :class:`ChatRequest` with a :class:`Completion` and say who they are
(``identity()``, part of every cache key built from their answers).

* :class:`OpenAIBackend` - ``POST {base_url}/chat/completions`` (Ollama, vLLM, llama.cpp's
  server, a hosted API). The API key is read from the environment variable the config names,
  never from the config. :meth:`OpenAIBackend.check` asks ``GET {base_url}/models`` before any
  stage runs: a server that does not answer, refuses the key or does not serve the model is
  one clear error. The server's own description of the model (less its ``created`` time,
  which some servers set per request) is the model's identity, with the name and base URL.
  429, 5xx, timeouts and dropped connections are retried with exponential backoff (a
  ``Retry-After`` header is honoured, up to 60 s), each retry a warning; after the last retry
  the request raises :class:`RequestFailed`, which the stage counts. Requests in flight are
  held to :class:`InFlightLimit`, which halves after such a failure and grows back as answers
  come, so retries do not pile onto a server still computing what it was sent. Any other refusal (400, 401, 403, 404) is
  a :class:`~stagebench.errors.StagebenchError`: retrying cannot fix it.
  ``timeout`` is a deadline for the whole request (connecting, waiting, and reading the
  answer), not per socket read, so a server that trickles its answer is cut off in time; an
  answer larger than :data:`MAX_ANSWER_BYTES` is refused (and so never cached). Redirects are
  never followed: the request carries the API key, and a 3xx would send it to another
  address, so a redirect is one error naming where the server pointed.
* :class:`TransformersBackend` - a Hugging Face causal LM in this process (a GGUF file is
  de-quantized on load by transformers), loaded on first use, greedy when ``temperature`` is
  0, else sampled with ``seed``; prompts go through the tokenizer's chat template.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from importlib import metadata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from stagebench.cache import Cache, code_identity, import_closure, make_key, memo
from stagebench.runtime.devices import HardwareParams, Placement, autocast, gpu_worker_placement, place
from stagebench.errors import ConfigError, StagebenchError
from stagebench.models.resolve import ResolvedModel, loading, on_this_machine, resolve_model
from stagebench.optional import need
from stagebench.llm.labels import label_variants
from stagebench.params import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Seed, param
from stagebench.textfile import read_text
from stagebench.models.variants import gguf_checkpoint

log = logging.getLogger("stagebench")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 60.0
#: the largest answer read from a server (a chat completion is a few KB; a listing, a few hundred)
MAX_ANSWER_BYTES = 4 << 20


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a prompt template is a few KB; the largest file read as one
MAX_PROMPT_BYTES = 1 << 20


def read_prompt(path: str) -> str:
    """A prompt template file (``prompt:`` of the LLM stage and of the judge)."""
    return read_text(Path(path).expanduser(), "prompt file", ConfigError, MAX_PROMPT_BYTES)


def prompt_problems(path: str, check: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """``[("prompt", why)]`` when the template file at ``path`` cannot be read or ``check`` refuses it."""
    if not path:
        return []
    try:
        why = check(read_prompt(path))
    except StagebenchError as exc:
        return [("prompt", str(exc))]
    return [("prompt", f"{path}: {why}")] if why else []


@dataclass
class ChatParams(HardwareParams):
    """The keys every chat-LLM user shares (the ``llm_rerank`` stage, the ``judge:`` section): which
    model, served how, decoded how, and how its requests are sent and priced."""

    model: str = param("HuggingFaceTB/SmolLM2-135M-Instruct", "transformers: a public name, local folder, .gguf file or hub "
                       "id; openai: the model name the server knows")  # fmt: skip
    backend: Literal["transformers", "openai"] = param("transformers", "transformers: in process; openai: any OpenAI-"
                                                       "compatible chat-completions server (docs/llm.md)")  # fmt: skip
    source: str = param("auto", "transformers: where the model comes from: auto | bundled | hub (docs/models.md)")
    gguf_file: str = param("", "transformers, a hub repository of GGUF files: the file to load")
    base_url: str = param("", "openai: the server's API root, e.g. http://localhost:11434/v1")
    api_key_env: str = param("", "openai: the NAME of the environment variable holding the API key (never the key)")
    temperature: NonNegativeFloat = param(0.0, "0: greedy decoding")
    seed: Seed = param(0, "sampling seed (sent to servers; some ignore it)")
    max_new_tokens: PositiveInt | None = param(None, "the longest answer asked for; null: as long as the answer needs "
                                               "(a reasoning model needs more)")  # fmt: skip
    concurrency: PositiveInt = param(4, "openai: requests in flight at once, at most: halved after a timeout or a busy "
                                     "answer, raised again as answers come (the in-process backend runs one)")  # fmt: skip
    timeout: PositiveFloat = param(120.0, "openai: seconds one request may take")
    retries: NonNegativeInt = param(3, "openai: retries of a request after 429, 5xx, a timeout or a dropped connection")
    backoff: NonNegativeFloat = param(1.0, "openai: seconds before the first retry, doubling after each")
    price_per_1k_tokens: NonNegativeFloat | None = param(None, "price of 1,000 tokens (prompt + completion) for the "
                                                         "cost column; null: no cost shown")  # fmt: skip

    #: what never changes an answer (how requests are sent, what they cost, where the key is)
    UNKEYED = ("concurrency", "timeout", "retries", "backoff", "price_per_1k_tokens", "api_key_env")

    @property
    def model_is_local(self) -> bool:
        """Whether ``model`` names weights to resolve when the config loads (not a server's name)."""
        return self.backend == "transformers"

    def check(self) -> list[tuple[str, str]]:
        """(key, problem) for every value that cannot make sense, before anything runs."""
        errs: list[tuple[str, str]] = []
        if self.backend == "openai":
            if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", self.base_url):
                errs.append(("base_url", f"backend openai needs the server's URL (http://host:port/v1), got {self.base_url!r}"))
            elif re.search(r"/(chat/)?completions/?$|/models/?$", self.base_url):
                errs.append(("base_url", f"{self.base_url!r} names an endpoint; give the API's root (e.g. "
                                         "http://host:port/v1): stagebench adds /chat/completions and /models itself"))  # fmt: skip
            if self.api_key_env and not ENV_NAME.fullmatch(self.api_key_env):
                errs.append(("api_key_env", "must be the name of an environment variable (e.g. OPENAI_API_KEY), not "
                                            "the key itself"))  # fmt: skip
            if self.gguf_file:
                errs.append(("gguf_file", "applies to backend transformers"))
            errs += [(k, "applies to backend transformers (a server decides where its model runs)")
                     for k in ("device", "precision") if getattr(self, k) != "auto"]  # fmt: skip
        else:
            errs += [(k, "applies to backend openai") for k in ("base_url", "api_key_env") if getattr(self, k)]
            if self.precision == "int8":
                errs.append(("precision", "int8 is not offered for LLMs; use auto, fp32, bf16 or fp16 (GPU)"))
        return errs


def make_backend(p: ChatParams, label: str, gpu_workers: bool = False) -> OpenAIBackend | TransformersBackend:
    """The backend ``p`` names (``gpu_workers``: the model runs on Ray workers holding a GPU each)."""
    if p.backend == "openai":
        return OpenAIBackend(p.base_url, p.model, p.api_key_env, p.timeout, p.retries, p.backoff, label, p.concurrency)
    resolved = resolve_model(p.model, p.source)
    if p.gguf_file and resolved.backend == "hub":
        resolved = type(resolved)(**{**resolved.__dict__, "gguf_file": p.gguf_file})
    placement = gpu_worker_placement(p.precision, "torch", label) if gpu_workers and p.device in ("auto", "cuda") \
        else place(p.device, p.precision, "torch", label, auto_bf16=False)  # fmt: skip
    return TransformersBackend(resolved, placement, label)


def keep_models_in(backend: OpenAIBackend | TransformersBackend, cache: Cache | None) -> None:
    """An in-process GGUF model is loaded from its de-quantized checkpoint kept in ``cache``, next
    to the answers computed with it (built on its first load; a server keeps its own model)."""
    if isinstance(backend, TransformersBackend):
        backend.models = cache


def _answer_key(identity: dict, req: ChatRequest) -> dict:
    return {"model": identity, "request": req.as_json()}


def cached_answer(cache: Cache | None, backend: OpenAIBackend | TransformersBackend, identity: dict, req: ChatRequest,
                  model: str, label: str, what: str, computed: Completion | None = None) -> tuple[Completion, bool]:  # fmt: skip
    """``req``'s answer through the content-addressed cache (kind ``llm``, keyed by the backend's
    identity and the exact request): (the completion, whether it came from the cache). A failed
    request raises :class:`RequestFailed` and stores nothing. ``computed``: the answer, already
    computed in a batch (:func:`cached_answers`), stored if the cache lacks it."""
    m = memo(cache, "llm", _answer_key(identity, req), lambda: computed or backend.complete(req),
             save=lambda c, folder: (folder / "response.json").write_text(json.dumps(c.as_json(), sort_keys=True)),
             load=lambda entry: Completion.from_json(json.loads(entry.file("response.json").read_text())),
             meta=lambda c: {"model": model, "stage": label}, label=label, what=what, quiet=True)  # fmt: skip
    return m.value, m.status == "cached"


def cached_answers(cache: Cache | None, backend: OpenAIBackend | TransformersBackend, identity: dict,
                   reqs: list[ChatRequest], model: str, label: str,
                   what: str) -> list[tuple[Completion, bool] | RequestFailed]:  # fmt: skip
    """:func:`cached_answer` of each label request, or the :class:`RequestFailed` it raised; those
    the cache lacks are computed together in one batch where the backend batches them (in
    process), else one at a time."""
    fresh: dict[ChatRequest, Completion] = {}
    if isinstance(backend, TransformersBackend):
        missing = list(dict.fromkeys(r for r in reqs if cache is None or cache.get("llm", make_key(_answer_key(identity, r))) is None))
        if missing:
            fresh = dict(zip(missing, backend.complete_labels(missing)))
    out: list[tuple[Completion, bool] | RequestFailed] = []
    for r in reqs:
        try:
            out.append(cached_answer(cache, backend, identity, r, model, label, what, fresh.get(r)))
        except RequestFailed as exc:
            out.append(exc)
    return out


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
        self.fired = False
        self._timer: threading.Timer | None = None

    def arm(self, sock: socket.socket) -> None:
        self._timer = threading.Timer(max(0.0, self.at - time.monotonic()), self._fire, (sock,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, sock: socket.socket) -> None:
        self.fired = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed: the request ended on its own
            pass

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


class _Transient(Exception):
    def __init__(self, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


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

    def __getstate__(self) -> dict:  # sent to Ray workers: the lock and the limit's state are not
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_limit")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._limit = InFlightLimit(self.concurrency)

    # ------------------------------------------------------------------ HTTP
    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise StagebenchError(f"{self.label}: environment variable {self.api_key_env} (api_key_env) is not set "
                                      "or empty; export the server's API key in it")  # fmt: skip
            h["Authorization"] = f"Bearer {key}"
        return h

    def _call(self, method: str, path: str, body: dict | None) -> Any:
        """One HTTP request: the decoded JSON answer, :class:`_Transient` for what a retry may
        fix, :class:`StagebenchError` for what it cannot."""
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(url, data=data, method=method, headers=self._headers())
        watch = _CURRENT.watch = _Watch(self.timeout)
        try:
            try:
                with _opener().open(req, timeout=self.timeout) as resp:
                    raw = _read_capped(resp, MAX_ANSWER_BYTES)
            except Exception:
                if watch.fired:  # the shutdown at the deadline ended the read, whatever it raised
                    raise TimeoutError(f"timed out: no complete answer within timeout ({self.timeout:g} s for the "
                                       "whole request)") from None  # fmt: skip
                raise
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
            raise _Transient(f"{type(exc).__name__}: {exc or 'timed out'}") from None
        except urllib.error.URLError as exc:
            raise _Transient(f"cannot reach {url}: {exc.reason}") from None
        finally:
            watch.cancel()
            _CURRENT.watch = None
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
        for attempt in range(self.retries + 1):
            with self._limit.slot():
                t0 = time.perf_counter()
                try:
                    out = self._call("POST", "/chat/completions", body)
                except _Transient as exc:
                    out, last, hint = None, str(exc), exc.wait
                dt = time.perf_counter() - t0
            if out is None:
                lowered = self._limit.overloaded()
                if lowered:
                    log.warning("%s: %s: %s; requests in flight lowered to %d of %d, so retries do not pile on a busy "
                                "server (raised again one at a time as answers come back)", self.label, self.base_url,
                                last, lowered, self.concurrency)  # fmt: skip
                if attempt == self.retries:
                    break
                wait = self.backoff * 2**attempt if hint is None else hint
                log.warning("%s: request failed (%s); retry %d of %d in %.1f s", self.label, last, attempt + 1,
                            self.retries, wait)  # fmt: skip
                time.sleep(wait)
                continue
            raised = self._limit.succeeded()
            if raised:
                log.info("%s: requests in flight raised to %d of %d", self.label, raised, self.concurrency)
            try:
                text = out["choices"][0]["message"]["content"] or ""
            except (KeyError, IndexError, TypeError):
                raise StagebenchError(f"{self.label}: {self.base_url}/chat/completions answered without "
                                      f"choices[0].message.content: {str(out)[:200]}") from None  # fmt: skip
            where = f"{self.label}: {self.base_url}/chat/completions"
            if not isinstance(text, str):
                raise StagebenchError(f"{where} answered choices[0].message.content = {str(text)[:80]!r}, not text")
            usage = out.get("usage") or {}
            if not isinstance(usage, dict):
                raise StagebenchError(f"{where} answered usage = {str(usage)[:80]!r}, not an object")
            lp = label_logprobs(out["choices"][0].get("logprobs"), req.labels, where) if req.labels else None
            return Completion(text, _usage_count(usage, "prompt_tokens", where),
                              _usage_count(usage, "completion_tokens", where), dt, attempt, lp)  # fmt: skip
        raise RequestFailed(f"{last} (after {self.retries + 1} attempts)", self.retries + 1)

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


class TransformersBackend:
    """A causal LM in this process, loaded on first use (so a fully cached run loads nothing)."""

    concurrent = False

    def __init__(self, model: ResolvedModel, placement: Placement, label: str = "llm") -> None:
        self.resolved = model
        self.placement = placement
        self.label = label
        #: where a GGUF model's de-quantized checkpoint is kept (:func:`stagebench.models.variants.gguf_checkpoint`);
        #: None: the GGUF file is de-quantized on every load
        self.models: Cache | None = None
        self._model: Any = None
        self._tok: Any = None
        self._label_tokens: dict[str, list[int]] = {}

    def __getstate__(self) -> dict:
        # sent to Ray workers: each loads the model itself, once, from the GGUF file where it is one
        # (the run's cache folder may not be on a worker's machine, and workers write no cache entries)
        return {**self.__dict__, "models": None, "_model": None, "_tok": None, "_label_tokens": {}}

    def check(self) -> None:
        return None

    @property
    def reproducibility(self) -> str:
        return (f"in process, {self.placement.precision} on {self.placement.device}: repeatable with the same model "
                "file and library versions")  # fmt: skip

    def identity(self) -> dict:
        """The weights, and what generates from them here: this module's code and the libraries'
        versions (a server's answers are keyed by the server's identity instead)."""
        versions = {}
        for dist in ("transformers", "torch"):
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                versions[dist] = None
        return {"backend": "transformers", "model": self.resolved.identity, **self.placement.key(),
                "code": code_identity(import_closure((__name__,))), "packages": versions}  # fmt: skip

    def _load(self) -> None:
        if self._model is not None:
            return
        tf = need("transformers", f"{self.label}: the transformers LLM backend")
        if self.resolved.backend == "gguf":
            need("gguf", f"{self.label}: loading the GGUF model {self.resolved.name}")
        t0 = time.perf_counter()
        here = on_this_machine(self.resolved)
        folder, kw, origin = here.path, {"gguf_file": here.gguf_file} if here.gguf_file else {}, self.resolved.origin
        if here.gguf_file and self.models is not None:
            folder, kw = str(gguf_checkpoint(here, self.models, self.label)), {}
            origin += f", its de-quantized checkpoint {folder}"
        with loading(here, self.label):
            self._tok = tf.AutoTokenizer.from_pretrained(folder, **kw)
        torch = need("torch", f"{self.label}: the transformers LLM backend")
        pl = self.placement
        if pl.precision == "int8":
            raise StagebenchError(f"{self.label}: precision int8 is not offered for LLMs; use fp32, bf16 or fp16 (GPU)")
        weights = torch.float16 if pl.precision == "fp16" else torch.bfloat16 if pl.precision == "bf16" and pl.kind != "cpu" \
            else torch.float32  # fmt: skip
        with loading(here, self.label):
            self._model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=weights, **kw).to(pl.device).eval()
        if not getattr(self._tok, "chat_template", None):
            raise StagebenchError(f"{self.label}: model {self.resolved.name} has no chat template; use an instruction-"
                                  "tuned (chat) model")  # fmt: skip
        log.info("%s: loaded %s from %s on %s, %s (%s) [%.1fs]", self.label, self.resolved.name, origin,
                 pl.device, pl.precision, pl.why, time.perf_counter() - t0)  # fmt: skip

    def _label_ids(self, label: str) -> list[int]:
        """The first token of each of ``label``'s spellings (tokenized once per label)."""
        if label not in self._label_tokens:
            self._label_tokens[label] = sorted({self._tok.encode(v, add_special_tokens=False)[0]
                                                for v in label_variants(label)})  # fmt: skip
        return self._label_tokens[label]

    def complete_labels(self, reqs: list[ChatRequest]) -> list[Completion]:
        """Label requests, one forward pass over a batch (left-padded, positions counted from each
        prompt's first real token, so a prompt's distribution does not depend on its batch mates
        beyond float rounding): each label's log-probability as the answer's first token."""
        self._load()
        torch = need("torch", f"{self.label}: the transformers LLM backend")
        t0 = time.perf_counter()
        ids = [self._tok.apply_chat_template([{"role": r, "content": c} for r, c in q.messages],
                                             add_generation_prompt=True, return_dict=True)["input_ids"] for q in reqs]  # fmt: skip
        width = max(len(x) for x in ids)
        pad = self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id
        input_ids = torch.tensor([[pad] * (width - len(x)) + list(x) for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.placement.device
        with torch.inference_mode(), autocast(self.placement):
            logits = self._model(input_ids=input_ids.to(dev), attention_mask=mask.to(dev),
                                 position_ids=positions.to(dev)).logits[:, -1]  # fmt: skip
        logp = torch.log_softmax(logits.float(), dim=-1).cpu()
        each = (time.perf_counter() - t0) / len(reqs)
        out = []
        for i, q in enumerate(reqs):
            lps = tuple(float(torch.logsumexp(logp[i, self._label_ids(lab)], dim=0)) for lab in q.labels)
            best = max(range(len(lps)), key=lambda k: lps[k])
            out.append(Completion(q.labels[best], len(ids[i]), 1, each, 0, lps))
        return out

    def complete(self, req: ChatRequest) -> Completion:
        if req.labels:
            return self.complete_labels([req])[0]
        self._load()
        torch = need("torch", f"{self.label}: the transformers LLM backend")
        t0 = time.perf_counter()
        enc = self._tok.apply_chat_template([{"role": r, "content": c} for r, c in req.messages],
                                            add_generation_prompt=True, return_tensors="pt", return_dict=True)  # fmt: skip
        n_in = int(enc["input_ids"].shape[1])
        gen: dict[str, Any] = {"max_new_tokens": req.max_new_tokens, "do_sample": req.temperature > 0,
                               "pad_token_id": self._tok.pad_token_id or self._tok.eos_token_id}  # fmt: skip
        if req.temperature > 0:
            gen["temperature"] = req.temperature
            torch.manual_seed(req.seed)
        else:  # greedy: no sampling settings from the model's generation config
            gen.update(temperature=None, top_p=None, top_k=None)
        enc = {k: v.to(self.placement.device) for k, v in enc.items()}
        with torch.inference_mode(), autocast(self.placement):
            out = self._model.generate(**enc, **gen)
        new = out[0, n_in:]
        text = self._tok.decode(new, skip_special_tokens=True)
        return Completion(text.strip(), n_in, int(new.shape[0]), time.perf_counter() - t0)
