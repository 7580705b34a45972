"""A Hugging Face causal LM in this process as a chat backend (:class:`TransformersBackend`): loaded
on first use (so a fully cached run loads nothing; a GGUF file is de-quantized on load by
transformers, its fp32 checkpoint kept in the cache by :func:`stagebench.models.variants.gguf_checkpoint`),
greedy when ``temperature`` is 0, else sampled with ``seed``; prompts go through the tokenizer's
chat template, and label requests are answered in batches from the first token's log-probabilities.
"""

from __future__ import annotations

import logging
import time
from importlib import metadata
from typing import Any

from stagebench.cache import Cache, code_identity
from stagebench.errors import StagebenchError
from stagebench.llm.labels import label_variants
from stagebench.llm.request import ChatRequest, Completion
from stagebench.models.resolve import ResolvedModel, loading, on_this_machine
from stagebench.models.variants import cached_gguf_checkpoint, gguf_checkpoint
from stagebench.optional import need
from stagebench.runtime.devices import Placement, autocast, weights_dtype

log = logging.getLogger("stagebench")


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
        #: on a Ray worker: the driver's cache folder, whose checkpoint the worker reads where it sees it
        self._workers_read: str | None = None
        self._model: Any = None
        self._tok: Any = None
        self._label_tokens: dict[str, list[int]] = {}

    def __getstate__(self) -> dict:
        # sent to Ray workers: each loads the model itself, once. A GGUF model's de-quantized checkpoint
        # (built by the driver first: prepare_workers) is read from the run's cache folder where the worker
        # sees it - the same machine, or the shared folder an LLM stage's answers need anyway (docs/scale.md) -
        # checksums verified; elsewhere the worker de-quantizes the GGUF file itself. Workers build no model entry.
        shared = str(self.models.root.resolve()) if self.models is not None else None  # a worker's cwd is not ours
        return {**self.__dict__, "models": None, "_workers_read": shared, "_model": None, "_tok": None, "_label_tokens": {}}

    def prepare_workers(self) -> None:
        """Before the model runs on Ray workers: build (or verify) a GGUF model's de-quantized
        checkpoint in the cache here, once, rather than in each worker."""
        if self.resolved.gguf_file and self.models is not None:
            gguf_checkpoint(on_this_machine(self.resolved), self.models, self.label)

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
                "code": code_identity((__name__,)), "packages": versions}  # fmt: skip

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
        elif here.gguf_file and self._workers_read is not None:
            found = cached_gguf_checkpoint(here, Cache(self._workers_read))
            if found is not None:
                folder, kw = str(found), {}
                origin += f", its de-quantized checkpoint {folder} (built by the driver)"
        with loading(here, self.label):
            self._tok = tf.AutoTokenizer.from_pretrained(folder, **kw)
        need("torch", f"{self.label}: the transformers LLM backend")
        pl = self.placement
        if pl.precision == "int8":
            raise StagebenchError(f"{self.label}: precision int8 is not offered for LLMs; use fp32, bf16 or fp16 (GPU)")
        with loading(here, self.label):
            self._model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=weights_dtype(pl), **kw).to(pl.device).eval()
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
