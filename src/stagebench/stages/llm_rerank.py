"""``type: llm_rerank``: reranking by a chat LLM, in one of four families (``method``).

The stage reorders each query's top ``top_n`` candidates of its one input (the tail keeps
its order below, as with every reranker).

* ``pointwise``, ``pairwise``, ``setwise`` ask questions answered by one label (yes/no or an
  ESCI letter per product; A/B per pair; the letter of the best of ``set_size``), read from
  the label tokens' probabilities where the backend gives them (:mod:`stagebench.llm.labels`,
  :mod:`stagebench.llm.schemes`, :mod:`stagebench.llm.families`); their calls are counted,
  cached and resumed exactly as listwise windows are (below).
* ``listwise`` (RankGPT): windows of ``window`` candidates, ``stride`` apart,
go from the back of the list to the front (:func:`stagebench.llm.listwise.sliding_windows`),
``passes`` times; each window's answer is read by :func:`stagebench.llm.listwise.parse_permutation`
and its outcome counted (ok / repaired / fallback / failed after retries).

Every window's request -> answer is kept in the content-addressed cache (kind ``llm``) under
the model's identity, the exact messages and the decoding settings: a killed run resumes at
the next window, a rerun asks the model nothing, and a change of ``top_n`` or the prompt asks
only for the windows that changed. A run in which some request failed after every retry is
not cached (its answers that did arrive are), so the next run retries just those windows.

Queries run ``concurrency`` at a time against a server; the windows of one query always run
in order, since each window sees the order the previous one left. The in-process backend
runs one window at a time.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Any, Literal

from stagebench.runtime.engine import EngineParams
from stagebench.record import LLMStats, Stats
from stagebench.llm.chat import ChatParams, keep_models_in, make_backend, prompt_problems, read_prompt
from stagebench.llm.http import OpenAIBackend
from stagebench.llm.request import ChatBackend
from stagebench.llm.families import TASKS
from stagebench.llm.labels import check_template as check_label_template, default_template
from stagebench.llm.listwise import DEFAULT_SYSTEM, DEFAULT_TEMPLATE, FAILED, LOW_MASS, check_template, sliding_windows
from stagebench.llm.schemes import prp_sliding_comparisons, setwise_heap_calls
from stagebench.llm.windows import QueryTask, WindowStats
from stagebench.params import RUN, Length, PositiveInt, param
from stagebench.runs import Run
from stagebench.rerank.merge import merge_head_tail, split_head
from stagebench.stages.base import Stage, StageContext, StageOutput

log = logging.getLogger("stagebench")


@dataclass
class LLMRerankParams(ChatParams):
    top_n: PositiveInt = param(20, "candidates reranked per query; the rest keep their order below", affects=(RUN,))
    window: PositiveInt = param(20, "candidates shown to the model at once")
    stride: PositiveInt = param(10, "how far each window moves towards the top (at most window)")
    passes: PositiveInt = param(1, "sweeps of the sliding window over the top_n")
    max_doc_words: PositiveInt = param(60, "words of each document's text in the prompt")
    prompt: str = param("", "a file holding the user-message template ({query}, {passages}, {num}); empty: built in")
    system_prompt: str = param(DEFAULT_SYSTEM, "the system message (empty: none)")
    max_new_tokens: PositiveInt | None = param(None, "the longest answer asked for; null: 8 tokens per candidate + 16 (a "
                                               "reasoning model needs more)")  # fmt: skip
    concurrency: PositiveInt = param(4, "openai: queries in flight at once, at most: halved after a timeout or a busy "
                                     "answer, raised again as answers come (the in-process backend runs one); on Ray across the cluster",
                                     affects=())  # fmt: skip
    failed_calls: Literal["stop", "accept"] = param(
        "stop", "a request that fails after every retry: stop (one error line, exit 2, no results written; the "
                "answers that came are cached, so the same command asks only for the rest) | accept (the call keeps "
                "its input order or says nothing, the table marks the stage, its run is not cached)", affects=())  # fmt: skip
    depths: Annotated[list[PositiveInt], Length()] | None = param(None, "also run at each of these depths (each its own run: the windows "
                                             "depend on N; identical windows come from the cache); the depth table",
                                             affects=(RUN,))  # fmt: skip
    method: Literal["listwise", "pointwise", "pairwise", "setwise"] = param(
        "listwise", "listwise: permutations of sliding windows; pointwise: a label per product (batched); pairwise: "
                    "PRP comparisons in both orders; setwise: the best of set_size (docs/llm.md)")  # fmt: skip
    labels: Literal["yes_no", "esci"] = param("yes_no", "pointwise: the answer's labels: yes_no (score P(Yes)) or esci "
                                              "(E/S/C/I, score the expected grade 3/2/1/0)")  # fmt: skip
    top_k: PositiveInt = param(10, "pairwise, setwise: how many top places the sort settles (the rest follow in "
                                   "input order)")  # fmt: skip
    set_size: PositiveInt = param(4, "setwise: candidates shown per call (2-26)")
    batch_size: PositiveInt = param(16, "pointwise, in process: pairs per forward pass")


class LLMRerankStage(Stage):
    type_name = "llm_rerank"
    Params = LLMRerankParams
    min_inputs = max_inputs = 1
    reorders_input = True
    uses_engine = True
    packages = ("transformers", "torch", "gguf")

    def __init__(self, name: str, params: Any, engine: EngineParams | None = None) -> None:
        super().__init__(name, params, engine)
        self._backend: ChatBackend | None = None

    @classmethod
    def check_params(cls, params: Any, inputs: list[str]) -> list[tuple[str, str]]:
        p: LLMRerankParams = params
        errs: list[tuple[str, str]] = []
        if p.stride > p.window:
            errs.append(("stride", f"{p.stride} is larger than window ({p.window}): candidates between windows would "
                                   "never be ranked"))  # fmt: skip
        if not 2 <= p.set_size <= 26:
            errs.append(("set_size", f"{p.set_size}: a set shows 2 to 26 candidates (lettered A-Z)"))
        check = check_template if p.method == "listwise" else partial(check_label_template, p.method)
        return errs + p.check() + prompt_problems(p.prompt, check)

    # ------------------------------------------------------------------ backend
    def template(self) -> str:
        p: LLMRerankParams = self.params
        if p.prompt:
            return read_prompt(p.prompt)
        return DEFAULT_TEMPLATE if p.method == "listwise" else default_template(p.method, p.labels)

    def backend(self) -> ChatBackend:
        if self._backend is None:
            self._backend = make_backend(self.params, f"stage {self.name}", bool(self.engine.gpus))
        return self._backend

    def preflight(self) -> None:
        backend = self.backend()
        backend.check()
        if self.params.method == "pointwise" and isinstance(backend, OpenAIBackend):
            backend.check_logprobs()

    def probe_refusal(self) -> str | None:
        if isinstance(self.backend(), OpenAIBackend):
            return f"it asks the server at {self.params.base_url}: a probe would send requests (which may cost)"
        return None

    def identity(self) -> dict:
        """The model (for a server: what it says it serves, its name and URL) and the prompt's digest."""
        return {"llm": self.backend().identity(), "prompt_template": _digest(self.template()),
                "prompt_file": bool(self.params.prompt)}  # fmt: skip

    def finish_stats(self, stats: Stats | None) -> Stats | None:
        return stats.priced(self.params.price_per_1k_tokens) if isinstance(stats, LLMStats) else stats

    # ------------------------------------------------------------------ the run
    def apply(self, ctx: StageContext, inputs: list[Run]) -> StageOutput:
        """The run at ``top_n``; with ``depths``, each depth is a run of its own (its windows depend
        on N), through the same response cache, so windows identical across depths are asked once."""
        p: LLMRerankParams = self.params
        pairs, seconds, depth_runs, failed = {}, {}, {}, 0
        for n in sorted(set(p.depths or ()) - {p.top_n}):
            run, stats = self._rerank(ctx, inputs[0], n)
            depth_runs[n] = run
            pairs[n], seconds[n], failed = stats.candidates, stats.model_seconds, failed + stats.outcomes[FAILED]
        run, stats = self._rerank(ctx, inputs[0], p.top_n)
        pairs[p.top_n], seconds[p.top_n], failed = stats.candidates, stats.model_seconds, failed + stats.outcomes[FAILED]
        incomplete = None
        if stats.outcomes[FAILED]:
            incomplete = (f"{stats.outcomes[FAILED]} window(s) failed after retries and kept their input order; the "
                          "run is not cached, so the next run asks for those windows again")  # fmt: skip
        elif failed:
            incomplete = (f"{failed} window(s) of its other depths failed after retries; the run is not cached, so the "
                          "next run asks for those windows again")  # fmt: skip
        if p.depths:
            stats = replace(stats, pairs=pairs, seconds=seconds)
        return StageOutput(run, depth_runs, stats, incomplete)

    def _rerank(self, ctx: StageContext, run: Run, top_n: int) -> tuple[Run, LLMStats]:
        p: LLMRerankParams = self.params
        ds = ctx.dataset
        backend = self.backend()
        keep_models_in(backend, ctx.cache, ctx.engine.remote)
        heads, tails = split_head(run, top_n)
        qids = [q for q in run if heads[q]]
        plan = {q: sliding_windows(len(heads[q]), p.window, p.stride) * p.passes for q in qids}
        threads = p.concurrency if backend.concurrent else 1
        notes = None
        if isinstance(backend, OpenAIBackend):  # the server is shared by every process the engine runs the units in
            sharers = ctx.engine.processes(threads, len(qids))
            notes = ctx.engine.shared_notes() if sharers > 1 else None
            backend.shared_by(sharers, notes)
        task = (QueryTask if p.method == "listwise" else TASKS[p.method])(backend, backend.identity(), ctx.cache,
                                                                            self.template(), p, self.name)  # fmt: skip
        units = [(q, ds.queries[q], heads[q], [ds.doc_text.get(d, "") for d in heads[q]], plan[q]) for q in qids]
        t0 = time.perf_counter()
        # a query's calls run in order in one unit; queries run concurrently against a server (threads
        # here, or spread over the Ray workers)
        try:
            answers = ctx.engine.map(task, units, desc=f"{self.name}: llm {p.method} calls", unit="call",
                                     sizes=[self._calls(len(heads[q]), len(plan[q])) for q in qids],
                                     threads=threads)  # fmt: skip
        finally:
            if notes is not None:
                notes.forget()
        dt = time.perf_counter() - t0
        counts = WindowStats(queries=len(qids))
        reranked: dict[str, list[str]] = {}
        for (qid, *_), (order, windows) in zip(units, answers):
            reranked[qid] = order
            for w in windows:
                if w.answer is None:
                    kept = "the window keeps its input order" if p.method == "listwise" else \
                        "the query keeps its input order" if p.method == "pointwise" else "no preference"  # fmt: skip
                    log.warning("stage %s: query %r %s: request failed: %s; %s", self.name, qid, w.where, w.error, kept)
                counts.record(w.status, w.repairs, w.answer, retries=w.retries, cached=w.cached, mass=w.mass)
        s = counts
        mass = f", label mass {s.mass_sum / s.mass_calls:.2f}" if s.mass_calls else ""
        log.info("stage %s: %s, %d calls over %d queries (top %d, %s): %d from the cache, %d asked; ok %d, repaired %d, "
                 "low mass %d, fallback %d, failed %d%s; %d prompt + %d completion tokens [%.1fs]",
                 self.name, p.method, s.windows, s.queries, top_n, self._shape(), s.cached_windows,
                 s.windows - s.cached_windows, s.outcomes["ok"], s.outcomes["repaired"], s.outcomes[LOW_MASS],
                 s.outcomes["fallback"], s.outcomes[FAILED], mass, s.prompt_tokens, s.completion_tokens, dt)  # fmt: skip
        decoding = "greedy" if p.temperature == 0 else f"sampled at temperature {p.temperature} with seed {p.seed}"
        if p.method != "listwise":
            decoding = "label probabilities (text where a server gives none)"
        stats = counts.typed(sum(len(heads[q]) for q in qids), f"{decoding}; {getattr(backend, 'reproducibility', '?')}",
                             p.method, wall_seconds=dt)  # fmt: skip
        result: Run = {}
        for qid in run:
            order = reranked.get(qid, [])
            result[qid] = merge_head_tail({d: float(len(order) - i) for i, d in enumerate(order)}, tails[qid])
        return result, stats


    def _calls(self, n: int, windows: int) -> int:
        """The calls one query of ``n`` candidates takes (setwise: at most), for the progress bar."""
        p: LLMRerankParams = self.params
        return {"listwise": windows, "pointwise": n, "pairwise": 2 * prp_sliding_comparisons(n, p.top_k),
                "setwise": setwise_heap_calls(n, p.top_k, p.set_size)}[p.method]  # fmt: skip

    def _shape(self) -> str:
        p: LLMRerankParams = self.params
        if p.method == "listwise":
            return f"window {p.window}, stride {p.stride}, {p.passes} pass{'es' if p.passes > 1 else ''}"
        return {"pointwise": f"labels {p.labels}", "pairwise": f"top {p.top_k} by sliding passes, both orders",
                "setwise": f"top {p.top_k} by heap sort, sets of {p.set_size}"}[p.method]  # fmt: skip


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


__all__ = ["LLMRerankParams", "LLMRerankStage"]
