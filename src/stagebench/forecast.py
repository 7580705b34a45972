"""What a stage will cost on this machine, said before it runs (``run --dry-run``, and the run's log).

A stage's seconds are its work times rates measured **on this machine, on this dataset, by the stage
itself**: a probe applies the stage here, nothing cached, to a small slice of the dataset, once to load
and warm it and then timed -

* a reranker (``reorders_input``): a few of the dataset's queries, each with ``top_n`` documents drawn
  from the corpus (seeded) as its input run; one query timed alone, then (unless that took over
  :data:`SLOW_QUERY` seconds) enough queries together for :data:`PROBE_PAIRS` pairs, at most
  :data:`PROBE_QUERIES`, as the run scores every query's pairs by length (several batches, every stream busy).
  Its rate is seconds per pair; a served query (the latency pass) costs what the lone query cost.
* a retriever that reads the corpus (BM25, dense, a PyTerrier or plug-in retriever): two slices, one
  with many documents and few queries, one the other way round, solved for seconds per document
  (indexing, embedding the corpus) and per query (embedding it alone, searching).
* other stages (fusion, a run file, the oracle) are not probed: no model, no corpus; said so.

A stage that asks a server (an LLM reranker on an OpenAI-compatible endpoint) is never probed: the
probe would send requests a user may pay for (:meth:`stagebench.stages.Stage.probe_refusal`).

Rates are kept in the cache (kind ``rates``), keyed by what the stage's scores depend on
(:func:`stagebench.execute.scoring_key`: model, settings, code, the dataset's texts) and by this
machine (CPU, cores, threads), so a second dry run reads them back and ``run`` logs its expected total
from them before its first stage (it never probes). The probe runs in this process: a stage that runs
on Ray is forecast as if it ran here (said so). The fixed part (loading a model, building a variant)
is measured and added once.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from stagebench.cache import Cache, make_key, memo
from stagebench.config import StageConfig
from stagebench.data.dataset import Dataset
from stagebench.execute import make_stage, scoring_key, stage_key
from stagebench.runs import Run
from stagebench.runtime.engine import LocalEngine
from stagebench.runtime.system import compute_threads, machine_info
from stagebench.runtime.devices import stream_shape
from stagebench.stages.base import Stage, StageContext
from stagebench.stages.neural import ModelStage

log = logging.getLogger("stagebench")

#: queries a reranker's timed probe scores together (after one alone): at most, and enough for this many pairs
PROBE_QUERIES = 6
PROBE_PAIRS = 128
#: a query that took longer alone (an LLM's windows) is not timed again with others: its rate is the lone query's
SLOW_QUERY = 5.0
#: a retriever's two slices: (documents, queries) with many documents, and with many queries
DOC_SLICE = (1024, 4)
QUERY_SLICE = (64, 48)
SEED = 17
#: what a probe keeps in the cache: the models (variants) it builds, which the run would build too
PROBE_KEEPS = frozenset({"models"})
#: characters a token holds, about (English text, WordPiece or BPE): a model's max_length in characters
CHARS_PER_TOKEN = 4
#: bump when what a probe measures changes: rates measured otherwise are not reused
PROBE_VERSION = 8


@dataclass(frozen=True)
class Rates:
    """What a probe measured: seconds to load and warm the stage once; seconds per character (:func:`size`:
    a text's length, capped where the model truncates) of a pair (a reranker), of a document and of a query
    (a retriever); what one served query costs (the latency pass)."""

    fixed: float = 0.0
    per_pair_char: float = 0.0
    per_doc_char: float = 0.0
    per_query_char: float = 0.0
    served_query: float = 0.0
    when: str = ""  # when it was measured (ISO, UTC)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("fixed", "per_pair_char", "per_doc_char", "per_query_char", "served_query",
                                              "when")}  # fmt: skip


@dataclass(frozen=True)
class Forecast:
    """One stage's expected seconds (None: not estimated, ``why`` says so) and where the rate came from."""

    seconds: float | None
    latency: float | None = None  # the latency pass's seconds (None: none)
    source: str = ""  # "probed now", "probed <when>" (read back), or why it is not estimated
    probed: bool = True  # False: a stage without a model or corpus (fusion, a run file), never probed

    @property
    def missing(self) -> bool:
        """A stage that could be forecast but is not (no rate yet, a server, a probe that failed)."""
        return self.seconds is None and self.probed

    def text(self) -> str:
        if self.seconds is None:
            return f"- ({self.source})"
        pass_ = f" + {_dur(self.latency)} latency pass" if self.latency else ""
        return f"{_dur(self.seconds)}{pass_} ({self.source})"


def _dur(s: float) -> str:
    if s < 1:
        return "<1 s"
    if s < 120:
        return f"~{s:.0f} s"
    return f"~{s / 60:.1f} min"


def machine_key() -> dict:
    """What a rate measured here depends on besides the stage: the CPU, its cores, the threads used."""
    m = machine_info()
    return {"cpu": m.get("cpu"), "cores": m.get("usable_cores") or os.cpu_count(), "threads": compute_threads()}


def kind_of(stage: Stage, inputs: int) -> str:
    """``reranker`` (reorders its one input's top ``top_n``), ``retriever`` (reads the corpus, no inputs, as a
    config places it: a PyTerrier stage may be either) or ``other`` (not probed)."""
    if inputs == 1 and stage.reorders_input and hasattr(stage.params, "top_n"):
        return "reranker"
    if inputs == 0 and stage.reads_corpus:
        return "retriever"
    return "other"


@contextmanager
def _quiet() -> Iterator[None]:
    """A probe's own log lines (model resolved, computing, pairs/s) are not the dry run's: at warning level."""
    logger = logging.getLogger("stagebench")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def size(text: str, cap: int | None) -> int:
    """What a text costs a stage, in characters: its length, capped at ``cap`` (a model reads at most
    ``max_length`` tokens, about :data:`CHARS_PER_TOKEN` characters each), plus one."""
    return 1 + (len(text) if cap is None else min(len(text), cap))


def cap_of(stage: Stage) -> int | None:
    """The characters a stage's model reads of a text (its ``max_length`` in characters), or None: all of it."""
    n = getattr(stage.params, "max_length", None)
    return CHARS_PER_TOKEN * n if isinstance(n, int) else None


def pair_chars(ds: Dataset, run: Run, cap: int | None, batch: int | None = None, across: bool = False) -> int:
    """What scoring every (query, document) pair of ``run`` costs, in characters: each pair capped as the model
    reads it, and padded as its batches pad it - ``batch`` pairs a batch, every query's pairs sorted by
    length together (``across``: the cross-encoder's units) or each query's in its order - so a probe of a
    few batches (more padding) and a run of thousands (almost none) are measured in one unit."""
    sizes = {q: [size(ds.queries.get(q, "") + " " + ds.doc_text.get(d, ""), cap) for d in docs] for q, docs in run.items()}
    if not batch:
        return sum(map(sum, sizes.values()))
    groups = [sorted((x for v in sizes.values() for x in v), reverse=True)] if across else list(sizes.values())
    return sum(len(g[i : i + batch]) * max(g[i : i + batch]) for g in groups for i in range(0, len(g), batch))


def _batching(stage: Stage) -> tuple[int | None, bool]:
    """A reranker's model batch (``batch_size``; None: none declared) and whether its batches mix queries (a
    stage with streams scores every query's pairs by length; the others a query at a time)."""
    batch = getattr(stage.params, "batch_size", None)
    return (batch if isinstance(batch, int) else None), _stream_fill(stage) is not None


def _timed(stage: Stage, ds: Dataset, inputs: list[Run], cache: Cache | None) -> float:
    ctx = StageContext(dataset=ds, cache=cache, engine=LocalEngine())
    t0 = time.perf_counter()
    stage.apply(ctx, inputs)
    return time.perf_counter() - t0


def _candidates(ds: Dataset, qids: list[str], depth: int, rng: random.Random) -> Run:
    """An input run for a reranker's probe: ``depth`` documents of the corpus per query, drawn with ``rng``."""
    ids = ds.doc_ids
    return {q: {d: float(depth - i) for i, d in enumerate(rng.sample(ids, min(depth, len(ids))))} for q in qids}


def probe_reranker(stage: Stage, ds: Dataset, cache: Cache | None) -> Rates:
    """Each call loads what the stage loads (its model), as the run does once: a call of 2 pairs, timed twice
    (the first also warms), is what a call costs besides its pairs, taken off the timed calls."""
    rng = random.Random(SEED)
    qids = rng.sample(sorted(ds.queries), min(PROBE_QUERIES + 1, len(ds.queries)))
    top = stage.params.top_n
    tiny = _candidates(ds, qids[:1], 2, rng)
    fixed = _timed(stage, ds.subset(qids[:1]), [tiny], cache)  # loads and warms the model
    call = _timed(stage, ds.subset(qids[:1]), [tiny], cache)  # what a call costs besides its pairs
    cap, (batch, across) = cap_of(stage), _batching(stage)
    one = _candidates(ds, qids[:1], top, rng)
    # timed twice, the second kept: a torch model builds its kernels for each new batch shape on first sight
    alone = min(_timed(stage, ds.subset(qids[:1]), [one], cache) for _ in range(2))
    alone = max(alone - call, 0.0)
    per_char = alone / max(pair_chars(ds, one, cap, batch, across), 1)
    # several queries scored together, as the run scores them (every query's pairs by length): whole batches,
    # as many on every stream (a probe of 5 batches on 2 streams leaves one idle for the last; the run's
    # thousands of batches do not), at least PROBE_PAIRS pairs
    fill = _stream_fill(stage)
    want = fill * math.ceil(PROBE_PAIRS / fill) if fill else PROBE_PAIRS
    rest = qids[1 : 1 + min(PROBE_QUERIES, max(2, math.ceil(want / max(top, 1))))]
    if alone < SLOW_QUERY and rest:
        many = _candidates(ds, rest, top, rng)
        if fill:  # the last query's candidates cut so that the pairs fill whole batches on every stream
            extra = sum(map(len, many.values())) % fill
            last = rest[-1]
            if extra and len(many[last]) > extra:
                many[last] = dict(list(many[last].items())[: len(many[last]) - extra])
        per_char = max(_timed(stage, ds.subset(rest), [many], cache) - call, 0.0) / max(pair_chars(ds, many, cap, batch,
                                                                                                     across), 1)
    # a served query: the lone query's call where the stage mixes queries in its batches (served alone, its pairs
    # fill fewer streams than the run's); a query-at-a-time stage's: its pairs at the rate (steadier than the lone
    # call, whose model load can swamp a few pairs)
    served = per_char * pair_chars(ds, one, cap, batch, across) if not across and alone < SLOW_QUERY and rest else alone
    return Rates(fixed=fixed, per_pair_char=per_char, served_query=served)


def _stream_fill(stage: Stage) -> int | None:
    """Pairs that fill one batch on every stream of a batched model stage (``batch_size`` x its streams), or
    None: a stage without both (scored a query at a time, or not a model's batches)."""
    batch = getattr(stage.params, "batch_size", None)
    if not isinstance(batch, int) or not isinstance(stage, ModelStage):
        return None
    what = stage.what_runs()  # where it runs, as the run resolves it: its streams from the one rule
    return batch * stream_shape(stage.params.streams, stage.placement().kind, what["runtime"])[0]


def _slice(ds: Dataset, docs: int, queries: int, rng: random.Random) -> Dataset:
    n = len(ds.corpus)
    keep = set(rng.sample(range(n), min(docs, n)))
    qids = rng.sample(sorted(ds.queries), min(queries, len(ds.queries)))
    return replace(ds.subset(qids), corpus=ds.corpus.take([i in keep for i in range(n)]))


def probe_retriever(stage: Stage, ds: Dataset, cache: Cache | None) -> Rates:
    """Two slices solved for seconds per document and per query, each less what a call costs besides
    (a slice of 16 documents and one query, timed again after the warm-up)."""
    rng = random.Random(SEED)
    tiny = _slice(ds, 16, 1, rng)
    fixed = _timed(stage, tiny, [], cache)  # loads and warms
    call = _timed(stage, tiny, [], cache)
    a, b = _slice(ds, *DOC_SLICE, rng), _slice(ds, *QUERY_SLICE, rng)
    ta, tb = _timed(stage, a, [], cache) - call, _timed(stage, b, [], cache) - call
    (n0, q0), (da, qa), (db, qb) = (_chars(x, cap_of(stage)) for x in (tiny, a, b))
    da, qa, db, qb = da - n0, qa - q0, db - n0, qb - q0
    det = da * qb - db * qa
    if det > 0:  # ta = da x + qa y, tb = db x + qb y (in characters)
        per_doc, per_query = (ta * qb - tb * qa) / det, (da * tb - db * ta) / det
    else:  # a corpus no larger than the slices: all of it probed, only the queries vary
        per_doc, per_query = 0.0, max(tb, 0.0) / max(qb, 1)
    if per_doc < 0 or per_query < 0:  # noise larger than one part: each slice's time put on its larger part
        per_doc, per_query = max(per_doc, 0.0) or max(ta, 0.0) / max(da, 1), max(per_query, 0.0) or max(tb, 0.0) / max(qb, 1)
    served = per_query * sum(size(t, cap_of(stage)) for t in ds.queries.values()) / max(len(ds.queries), 1)
    return Rates(fixed=fixed, per_doc_char=per_doc, per_query_char=per_query, served_query=served)


def _chars(ds: Dataset, cap: int | None) -> tuple[int, int]:
    """The characters of a dataset's documents and of its queries, each capped as the model reads it."""
    return sum(size(t, cap) for t in ds.doc_texts), sum(size(t, cap) for t in ds.queries.values())


def rate_parts(sc: StageConfig, stage: Stage, ds: Dataset) -> dict:
    """What a stage's rates are keyed by: its scoring (model, settings, code, the dataset's texts; not
    which candidates, nor how many) and this machine."""
    _, parts = stage_key(sc, stage, ds, [""] * len(sc.inputs))
    return {"scoring": scoring_key(parts, stage.Params), "machine": machine_key(), "probe": PROBE_VERSION}


def rates(sc: StageConfig, ds: Dataset, cache: Cache | None, probe: bool) -> tuple[Rates | None, str]:
    """The stage's rates on this machine and where they came from: read back from ``cache``, measured
    now by a probe (``probe``; kept in the cache), or None and why not."""
    stage = make_stage(sc)
    kind = kind_of(stage, len(sc.inputs))
    if kind == "other":
        return None, "no model and no corpus: not probed"
    refusal = stage.probe_refusal()
    if refusal:
        return None, f"not probed: {refusal}"
    parts = rate_parts(sc, stage, ds)
    if not probe:
        entry = cache.get("rates", make_key(parts)) if cache is not None else None
        if entry is None:
            return None, "no rate measured on this machine (run --dry-run probes it)"
        return _read(entry.meta["rates"]), f"rate probed {entry.meta['rates'].get('when', '')}"
    measure = probe_reranker if kind == "reranker" else probe_retriever

    def compute() -> Rates:
        from_now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with _quiet():
            return replace(measure(make_stage(sc), ds, None if cache is None else cache.storing_only(PROBE_KEEPS)),
                           when=from_now)  # fmt: skip

    m = memo(cache, "rates", parts, compute, save=lambda v, folder: None, load=lambda e: _read(e.meta["rates"]),
             meta=lambda v: {"rates": v.to_json(), "stage": sc.name}, label=f"stage {sc.name}",
             what="rates (a timed probe)", quiet=True)  # fmt: skip
    return m.value, ("probed now" if m.status == "computed" else f"rate probed {m.value.when}")


def _read(raw: dict) -> Rates:
    return Rates(**{k: (raw[k] if k == "when" else float(raw[k])) for k in Rates.__dataclass_fields__ if k in raw})


def forecast(sc: StageConfig, ds: Dataset, cache: Cache | None, head: Run | None, pairs: int | None,
             latency_queries: int, probe: bool) -> Forecast:  # fmt: skip
    """A stage's expected seconds: its work in characters at its rates, and the latency pass's. A reranker's
    work is the pairs of ``head`` (its input's top ``top_n``, where the input is known) or ``pairs`` pairs of
    the dataset's mean pair length; a retriever's, the corpus and the queries."""
    try:
        r, source = rates(sc, ds, cache, probe)
    except Exception as exc:  # noqa: BLE001 - a probe that fails must not end the dry run; the run would say it
        return Forecast(None, None, f"the probe failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if r is None:
        return Forecast(None, None, source, probed=kind_of(make_stage(sc), len(sc.inputs)) != "other")
    stage = make_stage(sc)
    cap = cap_of(stage)
    if head is not None:
        seconds = r.fixed + pair_chars(ds, head, cap, *_batching(stage)) * r.per_pair_char
    elif pairs is not None:
        seconds = r.fixed + pairs * mean_pair_chars(ds, cap) * r.per_pair_char
    else:
        docs, queries = _chars(ds, cap)
        seconds = r.fixed + docs * r.per_doc_char + queries * r.per_query_char
    served = min(latency_queries, len(ds.queries)) * r.served_query if latency_queries else None
    if sc.engine.type != "local":
        source += "; probed in this process, the run is on Ray"
    return Forecast(seconds if math.isfinite(seconds) else None, served, source)


def mean_pair_chars(ds: Dataset, cap: int | None, n: int = 2000) -> float:
    """The mean characters of a (query, document) pair of the dataset, over ``n`` pairs drawn with a seed:
    what a reranker's pair costs before its input is known (its candidates' own lengths are not)."""
    rng = random.Random(SEED)
    qids, ids = sorted(ds.queries), ds.doc_ids
    if not qids or not ids:
        return 0.0
    return sum(size(ds.queries[rng.choice(qids)] + " " + ds.doc_text.get(rng.choice(ids), ""), cap) for _ in range(n)) / n


def total(forecasts: list[Forecast]) -> tuple[float, list[int]]:
    """The expected seconds of the forecasts that have one (latency passes included), and the indexes of
    those that could have one and do not (:attr:`Forecast.missing`)."""
    s = sum((f.seconds or 0.0) + (f.latency or 0.0) for f in forecasts)
    return s, [i for i, f in enumerate(forecasts) if f.missing]


__all__ = ["Forecast", "Rates", "forecast", "kind_of", "machine_key", "rate_parts", "rates", "total"]
