"""Pointwise reranking: a reranker scores (query, document) pairs; the built-in cross-encoder
and user plug-ins go through the same code.

Both take one input run, rerank the top ``top_n`` documents of every query with a
:class:`stagebench.rerank.plugins.Reranker`, and return **every** candidate of the input:

* the reranked head, ordered by the reranker's scores (optionally passed through a
  sigmoid), then
* the unreranked tail in its original order, with scores strictly below the lowest head
  score whatever the sign of the scores (``tail_j = min(head) - 1 - j``).

A reranker with ``score_pairs`` is given the candidates of **every query at once, in units of
``pairs_per_call`` pairs of similar length** (the longest first, ties in run order): the least
padding, and full model batches whatever the depth. That is sound because a pair's score is a
function of the pair: the plug-in protocol asks it of ``score_pairs``, and the built-in
cross-encoder's paths keep it (``int8-token`` and ``fp32`` exactly: tests/models/test_batch_invariance.py),
except ``precision: int8``, the carrier's own dynamic INT8, which takes one activation scale per
batch and is documented as batch-dependent. With ``depths: [10, 20, 50, 100, 200]`` the stage
scores the largest depth once and derives the run at each depth by reordering only the top N
(the tail kept below): for a batch-invariant reranker exactly the run ``top_n: N`` gives
(tests/stages/test_depth_sweep.py); its own ``top_n`` run is the stage's output. A reranker with
only ``score(query, docs)`` (or ``per_query: true``) is called once per query with its whole
head, and once per depth: its scores may depend on the list it is shown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import numpy as np

from stagebench.runtime.devices import Placement, place
from stagebench.runtime.engine import Engine
from stagebench.models.encoders import load_cross_encoder
from stagebench.errors import StagebenchError
from stagebench.models.resolve import ResolvedModel, on_this_machine, resolve_model
from stagebench.params import RUN, Length, PositiveFloat, PositiveInt, param
from stagebench.rerank.merge import merge_head_tail, sigmoid_keeping_order, split_head
from stagebench.runs import Run
from stagebench.models.variants import for_placement, onnx_kind

if TYPE_CHECKING:
    from stagebench.data.dataset import Dataset

log = logging.getLogger("stagebench")


@dataclass
class RerankCommon:
    # which candidates are scored and how their scores are merged change the run, never a pair's score:
    # stages differing only in these (and their inputs) share their pair scores (execute.scoring_key)
    top_n: PositiveInt = param(50, "candidates reranked per query; the rest keep their order below", affects=(RUN,))
    activation: Literal["none", "sigmoid"] = param("none", "sigmoid maps scores to (0, 1); the order stays the logits'",
                                                   affects=(RUN,))  # fmt: skip
    pairs_per_call: PositiveInt = param(512, "most pairs per score_pairs call (the pairs of every query, by length)")
    per_query: bool = param(False, "call score(query, docs) once per query with its whole head (slower; for comparison)")
    depths: Annotated[list[PositiveInt], Length()] | None = param(None, "also derive the run at each of these depths from one scoring pass "
                                             "at the largest (the depth table; docs/report.md)", affects=(RUN,))  # fmt: skip
    tail: Literal["below", "scaled_input"] = param("below", "below: the candidates past top_n stay strictly below the "
                                                   "head; scaled_input: they keep their input score x tail_scale, as "
                                                   "search-ranking-stack does (they can rise above negative head "
                                                   "scores; docs/reproductions.md)", affects=(RUN,))  # fmt: skip
    tail_scale: PositiveFloat = param(0.01, "tail: scaled_input: the factor", affects=(RUN,))

    def validate(self) -> list[tuple[str, str]]:
        if self.depths is not None:
            if not self.depths:
                return [("depths", "give at least one depth, or leave it out")]
            if len(set(self.depths)) != len(self.depths):
                return [("depths", f"{self.depths}: a depth is listed twice")]
        if self.tail == "below" and self.tail_scale != 0.01:
            return [("tail_scale", "applies to tail: scaled_input")]
        return []


class CrossEncoderReranker:
    """A cross-encoder (sentence-transformers or ONNX) behind the plug-in protocol."""

    def __init__(self, model: str = "cross-encoder/ms-marco-MiniLM-L-12-v2", source: str = "auto",
                 max_length: int = 256, batch_size: int = 32, device: str = "auto",
                 precision: str = "auto", streams: str | int = "auto") -> None:  # fmt: skip
        resolved = resolve_model(model, source)
        kind = onnx_kind(resolved)
        placement = place(device, precision, kind, f"cross-encoder {model}")
        self._load(for_placement(resolved, placement, kind, None, f"cross-encoder {model}"), placement, max_length, batch_size,
                   streams)  # fmt: skip

    @classmethod
    def placed(cls, resolved: ResolvedModel, source: str, placement: Placement, max_length: int,
               batch_size: int, streams: str | int = "auto") -> CrossEncoderReranker:  # fmt: skip
        """The model a run resolved and placed where it started, loaded here (a Ray worker finds it
        again with :func:`stagebench.models.on_this_machine`)."""
        self = cls.__new__(cls)
        self._load(on_this_machine(resolved, source), placement, max_length, batch_size, streams)
        return self

    def _load(self, resolved: ResolvedModel, placement: Placement, max_length: int, batch_size: int,
              streams: str | int) -> None:  # fmt: skip
        self.resolved = resolved
        self.placement = placement
        self.model = load_cross_encoder(resolved, placement, max_length, streams)
        self.batch_size = batch_size

    def score(self, query: str, docs: Sequence[str]) -> list[float]:
        return self.score_pairs([(query, d) for d in docs])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return np.asarray(self.model.predict(pairs, self.batch_size), dtype=np.float64).tolist()


class ScoreTask:
    """An engine task (:mod:`stagebench.runtime.engine`): one unit of a reranking stage -> its raw scores.

    A unit is ``(qids, query_texts, doc_inputs)`` of one ``score_pairs`` call (``batched``) or of
    one query's ``score(query, docs)`` call. ``factory`` builds the reranker, once per process, on
    first use; it must be picklable for the Ray engine (a class and its arguments, a partial)."""

    def __init__(self, factory: Callable[[], Any], batched: bool, stage: str, label: str, loaded: Any = None,
                 wants_fields: bool = False) -> None:  # fmt: skip
        self.factory, self.batched, self.stage, self.label = factory, batched, stage, label
        self.wants_fields = wants_fields
        self._reranker: Any = loaded  # already built here (the local engine), or None

    @classmethod
    def of(cls, reranker: Any, per_query: bool, stage: str, label: str, factory: Callable[[], Any] | None = None,
           kind: Any = None) -> ScoreTask:  # fmt: skip
        """The task of a reranker object (``kind``: the class, when only the class is at hand): batched
        when it has ``score_pairs``, unless ``per_query`` or it ``wants_fields``."""
        kind = reranker if kind is None else kind
        wants_fields = bool(getattr(kind, "wants_fields", False))
        batched = callable(getattr(kind, "score_pairs", None)) and not per_query and not wants_fields
        return cls(factory or (lambda: reranker), batched, stage, label, reranker, wants_fields)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reranker": None}

    @property
    def reranker(self) -> Any:
        if self._reranker is None:
            self._reranker = self.factory()
        return self._reranker

    def __call__(self, unit: tuple[list[str], list[str], list[Any]]) -> Any:
        qids, queries, docs = unit
        method = "score_pairs" if self.batched else "score"
        try:
            if self.batched:
                return self.reranker.score_pairs(list(zip(queries, docs)))
            return self.reranker.score(queries[0], docs)
        except (StagebenchError, MemoryError):  # out of memory is the machine's, not the plug-in's: said as such
            raise
        except Exception as exc:
            raise _failed(self.stage, self.label, method, list(dict.fromkeys(qids)), exc) from exc


@dataclass
class Reranked:
    """A reranking stage's output: its ``top_n`` run, and the run at each extra depth with the pairs
    each needed and the seconds they took (measured, or pro-rated by pairs from one pass)."""

    run: Run
    depths: dict[int, Run]
    pairs: dict[int, int]
    seconds: dict[int, float]


def _duration(seconds: float) -> str:
    """``seconds`` as a person reads it: ``40s``, ``12 min``, ``2.5 h``."""
    return f"{seconds:.0f}s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class Surroundings(Protocol):
    """What pointwise reranking needs of where it runs: the dataset (queries, document texts and
    fields) and the engine its units run on. A stage's context has both; reranking does not import
    the stage protocol for it (rerank/ sits below stages/)."""

    dataset: Dataset
    engine: Engine


def rerank_run(run: Run, reranker: Any, ctx: Surroundings, p: RerankCommon, stage: str, label: str) -> Run:
    """Rerank each query's top ``p.top_n`` of ``run`` with ``reranker`` (a :class:`ScoreTask`, whose
    units run on ``ctx.engine``, or a reranker object, run here)."""
    return rerank_depths(run, reranker, ctx, p, stage, label).run


def rerank_depths(run: Run, reranker: Any, ctx: Surroundings, p: RerankCommon, stage: str, label: str,
                  quiet: bool = False, shared: dict[tuple[str, str], float] | None = None) -> Reranked:  # fmt: skip
    """:func:`rerank_run` at ``p.top_n`` and at every depth of ``p.depths`` (see the module docstring);
    ``quiet``: no progress bar, and its summary logged at debug level (one query served at a time, many
    calls). ``shared`` (a batched reranker only, whose pair scores are functions of the pair): scores of
    pairs an earlier stage with the same scoring already computed, used instead of scoring them again,
    and filled with this stage's."""
    ds = ctx.dataset
    task = reranker if isinstance(reranker, ScoreTask) else ScoreTask.of(reranker, p.per_query, stage, label)
    wants_fields = task.wants_fields

    def doc_input(d: str):
        text = ds.doc_text.get(d, "")
        return {"id": d, "text": text, **ds.corpus.get(d, {})} if wants_fields else text

    depths = sorted({p.top_n, *(p.depths or ())})
    deepest = depths[-1]
    heads, tails = split_head(run, deepest)
    qids = [q for q in run if heads[q]]

    def unit(chunk: list[tuple[str, str]]):
        return [q for q, _ in chunk], [ds.queries[q] for q, _ in chunk], [doc_input(d) for _, d in chunk]

    def score(chunks: list[list[tuple[str, str]]], what: str) -> dict[tuple[str, str], float]:
        got = ctx.engine.map(task, [unit(c) for c in chunks], desc=f"{stage}: {what}", unit="pair",
                             sizes=[len(c) for c in chunks], progress_bar=not quiet)  # fmt: skip
        out: dict[tuple[str, str], float] = {}
        for g, c in zip(got, chunks):
            out.update(zip(c, _check_scores(g, c, stage, label).tolist()))
        return out

    pairs = {n: sum(min(n, len(heads[q])) for q in qids) for n in depths}
    seconds: dict[int, float] = {}
    per_depth: dict[int, dict[tuple[str, str], float]] = {}
    t0 = time.perf_counter()
    reused = 0
    if task.batched:  # one pass at the deepest depth, every query's pairs by length
        every = [(q, d) for q in qids for d in heads[q]]
        known = {} if shared is None else {pr: shared[pr] for pr in every if pr in shared}
        reused = len(known)
        chunks = length_units([pr for pr in every if pr not in known],
                              lambda pair: len(ds.queries[pair[0]]) + len(ds.doc_text.get(pair[1], "")), p.pairs_per_call)
        what = "rerank" if len(depths) == 1 else f"rerank (depths {', '.join(map(str, depths))})"
        first: dict[tuple[str, str], float] = {}
        if len(chunks) > 1 and not quiet:  # a measured rate before the long part: how long the rest will take
            t1 = time.perf_counter()
            first = score(chunks[:1], "rerank (the first call, timed)")
            took = time.perf_counter() - t1
            size = lambda chunk: sum(len(ds.queries[q]) + len(ds.doc_text.get(d, "")) for q, d in chunk)  # noqa: E731
            rest = sum(map(len, chunks[1:]))
            # the units go longest first: the rest's time scaled by its text, not by its pairs (an underestimate
            # where a model truncates long texts: the longest then cost less than their length says)
            ahead = took * sum(map(size, chunks[1:])) / max(size(chunks[0]), 1)
            log.info("stage %s: %d pairs to score (%d queries, top %d); the first %d (the longest) took %.1fs: about "
                     "%s for the other %d, by their length", stage, len(first) + rest, len(qids), deepest, len(first),
                     took, _duration(ahead), rest)  # fmt: skip
            chunks = chunks[1:]
        scores = {**known, **first, **score(chunks, what)}
        if shared is not None:
            shared.update(scores)
        dt = time.perf_counter() - t0
        for n in depths:
            per_depth[n] = scores
            seconds[n] = dt * pairs[n] / max(pairs[deepest], 1)
    else:  # the whole head shown at once: its scores may depend on it, so one call per query and depth
        for n in depths:
            t1 = time.perf_counter()
            per_depth[n] = score([[(q, d) for d in heads[q][:n]] for q in qids], f"rerank top {n}")
            seconds[n] = time.perf_counter() - t1
        dt = time.perf_counter() - t0
    scored = pairs[deepest] - reused if task.batched else sum(pairs.values())
    if reused:
        log.info("stage %s: %d of its %d pairs were scored by an earlier stage of this run with the same model and "
                 "settings: their scores reused, not scored again", stage, reused, pairs[deepest])  # fmt: skip
    sweep = "" if len(depths) == 1 else f"; depths {', '.join(map(str, depths))}" + (" from one pass" if task.batched else "")
    (log.debug if quiet else log.info)("stage %s: reranked %d pairs (%d queries, top %d%s) in %.1fs: %.0f pairs/s (%s%s)", stage, scored,
             len(qids), p.top_n, sweep, dt, scored / max(dt, 1e-9),
             "every query's pairs by length" if task.batched else "one query at a time",
             "; on Ray" if ctx.engine.remote else "")  # fmt: skip
    runs: dict[int, Run] = {}
    for n in depths:
        result: Run = {}
        for qid, docs in run.items():
            order = heads[qid] + tails[qid]  # split_head covers every query of the run
            head, tail = order[:n], order[n:]
            s = np.asarray([per_depth[n][(qid, d)] for d in head], dtype=np.float64)
            if p.activation == "sigmoid":
                s = sigmoid_keeping_order(s)
            if p.tail == "scaled_input":  # the published setup some pipelines use (not order-safe)
                result[qid] = {**dict(zip(head, s.tolist())), **{d: docs[d] * p.tail_scale for d in tail}}
            else:
                result[qid] = merge_head_tail(dict(zip(head, s.tolist())), tail)
        runs[n] = result
    return Reranked(runs[p.top_n], {n: r for n, r in runs.items() if p.depths and n in p.depths}, pairs, seconds)


def length_units(pairs: list[tuple[str, str]], size: Callable[[tuple[str, str]], int], most: int) -> list[list[tuple[str, str]]]:
    """``pairs`` in units of at most ``most``, the longest first (``size``), ties in their given order."""
    order = sorted(range(len(pairs)), key=lambda i: -size(pairs[i]))  # sorted() is stable
    todo = [pairs[i] for i in order]
    return [todo[i : i + most] for i in range(0, len(todo), most)]


def _failed(stage: str, label: str, method: str, queries: list[str], exc: Exception) -> StagebenchError:
    """A reranker that raised: one line naming the stage, the call and the query (or queries)."""
    which = f"query {queries[0]!r}" if len(queries) == 1 else \
        f"a batch of {len(queries)} queries ({queries[0]!r} ... {queries[-1]!r})"  # fmt: skip
    return StagebenchError(f"stage {stage}: {label} raised in {method}() on {which}: {type(exc).__name__}: {exc}")


def _check_scores(got: Any, chunk: list[tuple[str, str]], stage: str, label: str) -> np.ndarray:
    try:
        arr = np.asarray(got, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise StagebenchError(f"stage {stage}: {label} returned scores that are not numbers ({exc})") from exc
    if arr.shape[0] != len(chunk):
        raise StagebenchError(
            f"stage {stage}: {label} returned {arr.shape[0]} scores for {len(chunk)} documents (query {chunk[0][0]!r})"
        )
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        q, d = chunk[int(bad[0])]
        raise StagebenchError(f"stage {stage}: {label} returned {arr[bad[0]]} for query {q!r} document {d!r}")
    return arr
