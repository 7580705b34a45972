"""Chat backends for the LLM rerankers and the judge: which backend a config names, and each
answer through the cache.

:class:`ChatParams` are the keys a config's LLM stage (and ``judge:``) share; :func:`make_backend`
builds the backend they name - any OpenAI-compatible server (:mod:`stagebench.llm.http`: deadline,
size cap, redirects, retries, concurrency) or a model in process (:mod:`stagebench.llm.local`).
Both follow :class:`~stagebench.llm.request.ChatBackend`: they answer a
:class:`~stagebench.llm.request.ChatRequest` with a :class:`~stagebench.llm.request.Completion` and
say who they are (``identity()``), part of every cache key built from their answers
(:func:`cached_answer`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from stagebench.cache import Cache, make_key, memo
from stagebench.errors import ConfigError, StagebenchError
from stagebench.llm.http import ENV_NAME, OpenAIBackend
from stagebench.llm.local import TransformersBackend
from stagebench.llm.request import ChatBackend, ChatRequest, Completion, LabelBatches, RequestFailed
from stagebench.models.resolve import resolve_model
from stagebench.params import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Seed, param
from stagebench.runtime.devices import HardwareParams, gpu_worker_placement, place
from stagebench.textfile import read_text

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
    api_key_env: str = param("", "openai: the NAME of the environment variable holding the API key (never the key)",
                              affects=())  # fmt: skip
    temperature: NonNegativeFloat = param(0.0, "0: greedy decoding")
    seed: Seed = param(0, "sampling seed (sent to servers; some ignore it)")
    max_new_tokens: PositiveInt | None = param(None, "the longest answer asked for; null: as long as the answer needs "
                                               "(a reasoning model needs more)")  # fmt: skip
    concurrency: PositiveInt = param(4, "openai: requests in flight at once, at most: halved after a timeout or a busy "
                                     "answer, raised again as answers come (the in-process backend runs one)", affects=())  # fmt: skip
    # how requests are sent, what they cost and where the key is never change an answer: affects=()
    timeout: PositiveFloat = param(120.0, "openai: seconds one request may take", affects=())
    retries: NonNegativeInt = param(3, "openai: retries of a request after 429, 5xx, a timeout or a dropped connection",
                                    affects=())  # fmt: skip
    backoff: NonNegativeFloat = param(1.0, "openai: seconds before the first retry, doubling after each", affects=())
    price_per_1k_tokens: NonNegativeFloat | None = param(None, "price of 1,000 tokens (prompt + completion) for the "
                                                         "cost column; null: no cost shown", affects=())  # fmt: skip

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
        else place(p.device, p.precision, "torch", label, role="generator")  # fmt: skip
    return TransformersBackend(resolved, placement, label)


def keep_models_in(backend: ChatBackend, cache: Cache | None, remote: bool = False) -> None:
    """An in-process GGUF model is loaded from its de-quantized checkpoint kept in ``cache``, next
    to the answers computed with it (built on its first load; a server keeps its own model).
    ``remote``: the model runs on Ray workers, so the checkpoint is built here first and they read it."""
    if isinstance(backend, TransformersBackend):
        backend.models = cache
        if remote:
            backend.prepare_workers()


def _answer_key(identity: dict, req: ChatRequest) -> dict:
    return {"model": identity, "request": req.as_json()}


def cached_answer(cache: Cache | None, backend: ChatBackend, identity: dict, req: ChatRequest,
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


def cached_answers(cache: Cache | None, backend: ChatBackend, identity: dict,
                   reqs: list[ChatRequest], model: str, label: str,
                   what: str) -> list[tuple[Completion, bool] | RequestFailed]:  # fmt: skip
    """:func:`cached_answer` of each label request, or the :class:`RequestFailed` it raised; those
    the cache lacks are computed together in one batch where the backend batches them (in
    process), else one at a time."""
    fresh: dict[ChatRequest, Completion] = {}
    if isinstance(backend, LabelBatches):
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
