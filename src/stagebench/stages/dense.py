"""Dense retrieval: a bi-encoder embeds corpus and queries, faiss searches by inner product.

Embeddings are L2-normalised, so inner product = cosine. ``index: flat`` is exact search
(``IndexFlatIP``); ``index: hnsw`` is approximate (``IndexHNSWFlat``, inner product).

Corpus embeddings are cached as an ``embeddings`` entry of :mod:`stagebench.cache`; the
key hashes the model identity (name, origin, weight-file hash), the corpus fingerprint
(doc ids and the exact indexed texts, so the text template is covered), the passage
prefix, max_length, batch size and the encoder code. Changing any of them computes new
vectors; nothing else does (a new query set or top_k reuses them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from stagebench.cache import code_identity, memo
from stagebench.runtime.devices import HardwareParams, Placement, StreamParams
from stagebench.models.encoders import EncodeTask, encode_with
from stagebench.optional import need
from stagebench.params import EMBEDDINGS, RUN, PositiveInt, Range, affecting, param
from stagebench.runs import Run, ranked
from stagebench.stages.base import Server, StageContext
from stagebench.stages.neural import ModelStage

log = logging.getLogger("stagebench")


@dataclass
class DenseParams(HardwareParams, StreamParams):
    # the model enters the embeddings' key as its identity (name, origin, weights' digest), not as written
    model: str = param("sentence-transformers/all-MiniLM-L6-v2", "bi-encoder: a public name, a local folder or a hub id "
                       "(docs/models.md)", affects=(RUN,))  # fmt: skip
    source: str = param("auto", "where the model comes from: auto | bundled | hub (docs/models.md)", affects=(RUN,))
    top_k: PositiveInt = param(1000, "documents kept per query (ties at the cut by doc id)", affects=(RUN,))
    batch_size: PositiveInt = param(32, "texts per encoder batch (length-sorted; 32 measured fastest on a 2-core CPU, "
                                        "a GPU wants 256-512: docs/models.md)")
    max_length: PositiveInt | None = param(256, "tokens per text; longer ones are truncated")
    query_prefix: str = param("", 'prepended to queries (e5: "query: ", bge: "Represent this sentence ...")', affects=(RUN,))
    passage_prefix: str = param("", 'prepended to documents (e5: "passage: ")')
    index: Literal["flat", "hnsw"] = param("flat", "flat: exact inner-product search; hnsw: approximate", affects=(RUN,))
    hnsw_m: Annotated[int, Range(ge=2)] = param(32, "HNSW graph degree (faiss needs >= 2)", affects=(RUN,))
    hnsw_ef_construction: PositiveInt = param(200, "HNSW build-time search depth", affects=(RUN,))
    hnsw_ef_search: PositiveInt = param(256, "HNSW query-time search depth (raised to top_k if lower); check "
                                             "recall against flat on large catalogs (docs/scale.md)", affects=(RUN,))
    cache: bool = param(True, "keep the corpus embeddings in the stage cache", affects=())
    # model/source are checked by the config loader (stagebench.config.parse_config)




def embeddings_parts(model_identity: str, fingerprint: str, p: DenseParams, placement: Placement) -> dict:
    """What corpus embeddings depend on (the cache key is the hash of this): the params declared to affect
    them (the others act on queries and search alone, so a change of them reuses the cached embeddings),
    the model's identity and the corpus, with the device type and precision (not the device index)."""

    return {"model": model_identity, "corpus": fingerprint, **{k: getattr(p, k) for k in affecting(DenseParams, EMBEDDINGS)},
            **placement.key(), "code": code_identity(("stagebench.models.encoders", "stagebench.models.shapes"))}  # fmt: skip


def corpus_embeddings(task: EncodeTask, ctx: StageContext, p: DenseParams, stage: str) -> np.ndarray:
    ds = ctx.dataset
    parts = embeddings_parts(task.model.identity, ds.fingerprint, p, task.placement)
    texts = [p.passage_prefix + t for t in ds.doc_texts]
    m = memo(ctx.cache if p.cache else None, "embeddings", parts,
             lambda: encode_with(ctx.engine, task, texts, p.batch_size, f"{stage}: corpus"),
             save=lambda emb, folder: np.save(folder / "embeddings.npy", emb),
             load=lambda entry: np.load(entry.file("embeddings.npy")),
             meta=lambda emb: {"model": task.model.identity, "shape": list(emb.shape), **task.placement.key()},
             describe=lambda emb: f"{emb.shape[0]} documents x {emb.shape[1]} with {task.model.name} "
                                  f"[{task.model.origin}]",
             label=f"stage {stage}", what="corpus embeddings")  # fmt: skip
    if m.status == "computed":
        log.info("stage %s: %.0f docs/s (%s)", stage, len(texts) / max(m.seconds, 1e-9), runs_on(task, ctx))
    return m.value


def runs_on(task: EncodeTask, ctx: StageContext) -> str:
    """For the log: the library, device and precision (loaded here), or the Ray workers' placement."""
    if ctx.engine.remote:
        pl = task.placement
        return f"Ray workers, {pl.device}, {pl.precision} ({pl.why}); {ctx.engine.params.describe()}"
    return task.encoder.runs_on


#: extra neighbours asked of faiss beyond k, so that ties at the cut can be resolved
TIE_MARGIN = 16


def search_top_k(index, qemb: np.ndarray, qids: list[str], doc_ids: list[str], k: int) -> Run:
    """Each query's top ``k`` with the run tie rule (score desc, docid desc), as BM25 cuts.

    Each query is searched alone, so its scores are the ones serving it gives (a batch of queries
    is scored by a matrix product, rounded otherwise). faiss breaks ties among equal scores
    arbitrarily, so it is asked for more than ``k``;
    a query whose k-th score is still tied with the last one returned is searched again,
    deeper, until the tie group is complete (or the whole corpus is returned). The cut is
    then made by :func:`stagebench.runs.ranked`.
    """
    n = len(doc_ids)
    k = min(k, n)
    run: Run = {}
    todo = np.arange(len(qids))
    depth = min(n, k + TIE_MARGIN)
    while todo.size:
        # one query per search, as a served query is searched: faiss scores a batch of queries with a
        # matrix product, whose rounding differs from one query's dot products
        found = [index.search(qemb[qi : qi + 1], depth) for qi in todo]
        again = []
        for qi, (scores, idx) in zip(todo, found):
            s, ix = scores[0], idx[0]
            valid = ix >= 0
            s, ix = s[valid], ix[valid]
            if depth < n and len(s) >= k and len(s) == depth and s[k - 1] == s[-1]:
                again.append(qi)  # the tie at the cut may continue past what faiss returned
                continue
            run[qids[qi]] = dict(ranked({doc_ids[j]: float(v) for v, j in zip(s, ix)})[:k])
        todo = np.asarray(again, dtype=np.int64)
        depth = min(n, depth * 2)
    return run


def build_index(emb: np.ndarray, p: DenseParams):
    faiss = need("faiss", "dense retrieval")
    dim = emb.shape[1]
    if p.index == "hnsw":
        index = faiss.IndexHNSWFlat(dim, p.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = p.hnsw_ef_construction
        index.add(emb)
        index.hnsw.efSearch = max(p.hnsw_ef_search, p.top_k)
    else:
        index = faiss.IndexFlatIP(dim)
        index.add(emb)
    return index


class DenseStage(ModelStage):
    type_name = "dense"
    Params = DenseParams
    role = "bi_encoder"
    packages = ("faiss-cpu", "numpy", *("onnxruntime", "tokenizers", "sentence-transformers", "transformers", "torch"))
    # device/precision: keyed as written and, in identity(), as resolved

    @classmethod
    def tune_space(cls, params: DenseParams, inputs: list[str]) -> dict[str, list]:
        """The query prefix: none, e5's, and bge's retrieval instruction (the corpus embeddings are
        the same for every trial: the prefix is a query param)."""
        return {"query_prefix": ["", "query: ", "Represent this sentence for searching relevant passages: "]}

    #: the encoder and index a run built, handed to :meth:`server` for the same dataset and cache (so that
    #: the latency check of a run that just encoded the corpus does not encode it again)
    _built: tuple[object, object, EncodeTask, object] | None = None

    def _prepared(self, ctx: StageContext) -> tuple[EncodeTask, object]:
        """The query encoder and the index of the corpus embeddings (from the cache when computed)."""
        p: DenseParams = self.params
        model, placement = self.model_to_run(ctx)
        log.info("stage %s: model %s resolved to %s", self.name, p.model, model.origin)
        task = EncodeTask(model, p.source, placement, p.max_length, p.streams)
        return task, build_index(corpus_embeddings(task, ctx, p, self.name), p)

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: DenseParams = self.params
        task, index = self._prepared(ctx)
        self._built = (ctx.dataset, ctx.cache, task, index)
        ds = ctx.dataset
        qids = ds.query_ids
        # each query encoded alone, as a search service encodes it (server() below): the run ranks a
        # query exactly as serving it does, on every device and precision (rounding included)
        qemb = encode_with(ctx.engine, task, [p.query_prefix + ds.queries[q] for q in qids], 1,
                           f"{self.name}: queries")  # fmt: skip
        log.info("stage %s: runs on %s", self.name, runs_on(task, ctx))
        k = min(p.top_k, len(ds.doc_ids))
        t0 = time.perf_counter()
        run = search_top_k(index, qemb, qids, ds.doc_ids, k)
        dt = time.perf_counter() - t0
        log.info("stage %s: faiss %s search, %d queries, k=%d (ties at the cut by docid): %.2f ms/query",
                 self.name, p.index, len(qids), k, 1000 * dt / max(len(qids), 1))  # fmt: skip
        return run

    def server(self, ctx: StageContext) -> Server:
        """The model and the index loaded once; a query encoded alone and searched."""
        p: DenseParams = self.params
        built, self._built = self._built, None
        if built is not None and built[0] is ctx.dataset and built[1] is ctx.cache:
            task, index = built[2], built[3]
        else:
            task, index = self._prepared(ctx)
        ds = ctx.dataset
        k = min(p.top_k, len(ds.doc_ids))

        def one(qid: str, inputs: list[Run]) -> Run:
            return search_top_k(index, task([[p.query_prefix + ds.queries[qid]]]), [qid], ds.doc_ids, k)

        return one
