"""What a stage will cost on this machine, said before it runs (``run --dry-run``, and the run's log).

A stage's seconds are its work times rates measured **on this machine, on this dataset, by the stage
itself**: a probe applies the stage here, nothing cached, to a small slice of the dataset, once to load
and warm it and then timed -

* a reranker (``reorders_input``): a few of the dataset's queries, each with ``top_n`` documents drawn
  from the corpus (seeded) as its input run; one query timed alone, then, when that took under a
  second, :data:`PROBE_QUERIES` together (the run scores every query's pairs by length, as they are).
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
from stagebench.stages.base import Stage, StageContext

log = logging.getLogger("stagebench")

#: queries a reranker's timed probe scores together (after one alone), and its seed
PROBE_QUERIES = 6
#: a retriever's two slices: (documents, queries) with many documents, and with many queries
DOC_SLICE = (1024, 4)
QUERY_SLICE = (64, 48)
SEED = 17
#: what a probe keeps in the cache: the models (variants) it builds, which the run would build too
PROBE_KEEPS = frozenset({"models"})
#: bump when what a probe measures changes: rates measured otherwise are not reused
PROBE_VERSION = 1


@dataclass(frozen=True)
class Rates:
    """What a probe measured: seconds to load and warm the stage once, per pair (a reranker), per
    document and per query (a retriever), and what one served query costs (the latency pass)."""

    fixed: float = 0.0
    per_pair: float = 0.0
    per_doc: float = 0.0
    per_query: float = 0.0
    served_query: float = 0.0
    when: str = ""  # when it was measured (ISO, UTC)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("fixed", "per_pair", "per_doc", "per_query", "served_query", "when")}


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
    one = _candidates(ds, qids[:1], top, rng)
    alone = max(_timed(stage, ds.subset(qids[:1]), [one], cache) - call, 0.0)
    pairs = sum(map(len, one.values()))
    per_pair = alone / max(pairs, 1)
    rest = qids[1:]
    if alone < 1.0 and rest:  # cheap enough to time several queries scored together, as the run scores them
        many = _candidates(ds, rest, top, rng)
        per_pair = max(_timed(stage, ds.subset(rest), [many], cache) - call, 0.0) / max(sum(map(len, many.values())), 1)
    return Rates(fixed=fixed, per_pair=per_pair, served_query=alone)


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
    n0, q0 = len(tiny.corpus), len(tiny.queries)
    da, qa, db, qb = len(a.corpus) - n0, len(a.queries) - q0, len(b.corpus) - n0, len(b.queries) - q0
    det = da * qb - db * qa
    if det > 0:  # ta = da x + qa y, tb = db x + qb y
        per_doc, per_query = (ta * qb - tb * qa) / det, (da * tb - db * ta) / det
    else:  # a corpus no larger than the slices: all of it probed, only the queries vary
        per_doc, per_query = 0.0, max(tb, 0.0) / max(qb, 1)
    if per_doc < 0 or per_query < 0:  # noise larger than one part: each slice's time put on its larger part
        per_doc, per_query = max(per_doc, 0.0) or max(ta, 0.0) / max(da, 1), max(per_query, 0.0) or max(tb, 0.0) / max(qb, 1)
    return Rates(fixed=fixed, per_doc=per_doc, per_query=per_query, served_query=per_query)


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


def forecast(sc: StageConfig, ds: Dataset, cache: Cache | None, pairs: int | None, latency_queries: int,
             probe: bool) -> Forecast:  # fmt: skip
    """A stage's expected seconds: its work (``pairs`` for a reranker, at most queries x top_n when its input
    is not known yet; the corpus and queries for a retriever) at its rates, and the latency pass's."""
    try:
        r, source = rates(sc, ds, cache, probe)
    except Exception as exc:  # noqa: BLE001 - a probe that fails must not end the dry run; the run would say it
        return Forecast(None, None, f"the probe failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if r is None:
        return Forecast(None, None, source, probed=kind_of(make_stage(sc), len(sc.inputs)) != "other")
    if pairs is not None:
        seconds = r.fixed + pairs * r.per_pair
    else:
        seconds = r.fixed + len(ds.corpus) * r.per_doc + len(ds.queries) * r.per_query
    served = min(latency_queries, len(ds.queries)) * r.served_query if latency_queries else None
    if sc.engine.type != "local":
        source += "; probed in this process, the run is on Ray"
    return Forecast(seconds if math.isfinite(seconds) else None, served, source)


def total(forecasts: list[Forecast]) -> tuple[float, list[int]]:
    """The expected seconds of the forecasts that have one (latency passes included), and the indexes of
    those that could have one and do not (:attr:`Forecast.missing`)."""
    s = sum((f.seconds or 0.0) + (f.latency or 0.0) for f in forecasts)
    return s, [i for i, f in enumerate(forecasts) if f.missing]


__all__ = ["Forecast", "Rates", "forecast", "kind_of", "machine_key", "rate_parts", "rates", "total"]
