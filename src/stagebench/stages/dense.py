"""Dense retrieval: a bi-encoder embeds corpus and queries, faiss searches by inner product.

Embeddings are L2-normalised, so inner product = cosine. ``index: flat`` is exact search
(``IndexFlatIP``); ``index: hnsw`` is approximate (``IndexHNSWFlat``, inner product).

Corpus embeddings are cached in ``<cache_dir>/embeddings/<key>.npy``; the key hashes the
model identity (name, origin, weight-file hash), the dataset fingerprint (doc ids and the
exact indexed texts, so the text template is covered), the passage prefix and max_length.
Changing any of them computes new vectors; nothing else does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stagebench.run import Run
from stagebench.stages.base import Stage, StageContext

log = logging.getLogger("stagebench")


@dataclass
class DenseParams:
    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    source: str = "auto"  # auto | bundled | hub (see stagebench.models)
    top_k: int = 1000
    batch_size: int = 64
    max_length: int | None = 256
    query_prefix: str = ""  # e5: "query: ", bge: "Represent this sentence for searching relevant passages: "
    passage_prefix: str = ""  # e5: "passage: "
    index: str = "flat"  # flat | hnsw
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 256
    cache: bool = True

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if self.index not in ("flat", "hnsw"):
            errs.append(("index", f"must be 'flat' or 'hnsw', got {self.index!r}"))
        if self.top_k < 1:
            errs.append(("top_k", "must be >= 1"))
        from stagebench.models import check_model

        return errs + check_model(self.model, self.source)


def embeddings_key(model_identity: str, fingerprint: str, passage_prefix: str, max_length: int | None) -> str:
    blob = json.dumps([model_identity, fingerprint, passage_prefix, max_length])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def corpus_embeddings(encoder, ctx: StageContext, p: DenseParams, stage: str) -> np.ndarray:
    ds = ctx.dataset
    key = embeddings_key(encoder.model.identity, ds.fingerprint, p.passage_prefix, p.max_length)
    folder = Path(ctx.cache_dir) / "embeddings"
    path = folder / f"{key}.npy"
    if p.cache and path.is_file():
        emb = np.load(path)
        if emb.shape[0] == len(ds.doc_ids):
            log.info("stage %s: reused cached corpus embeddings %s (%d x %d; model %s)",
                     stage, path, *emb.shape, encoder.model.identity)  # fmt: skip
            return emb
    texts = [p.passage_prefix + t for t in ds.doc_texts]
    t0 = time.perf_counter()
    emb = encoder.encode(texts, p.batch_size, progress=True, desc=f"{stage}: corpus")
    dt = time.perf_counter() - t0
    log.info("stage %s: encoded %d documents in %.1fs (%.0f docs/s) with %s [%s]",
             stage, len(texts), dt, len(texts) / max(dt, 1e-9), encoder.model.name, encoder.model.origin)  # fmt: skip
    if p.cache:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.npy"
        np.save(tmp, emb)
        os.replace(tmp, path)
        meta = {"model": encoder.model.identity, "dataset_fingerprint": ds.fingerprint, "passage_prefix": p.passage_prefix,
                "max_length": p.max_length, "shape": list(emb.shape), "seconds": round(dt, 2)}  # fmt: skip
        (folder / f"{key}.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        log.info("stage %s: saved corpus embeddings to %s", stage, path)
    return emb


def build_index(emb: np.ndarray, p: DenseParams):
    import faiss

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


class DenseStage(Stage):
    type_name = "dense"
    Params = DenseParams

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        from stagebench.encoders import load_bi_encoder
        from stagebench.models import resolve_model

        p: DenseParams = self.params
        model = resolve_model(p.model, p.source)
        log.info("stage %s: model %s resolved to %s", self.name, p.model, model.origin)
        encoder = load_bi_encoder(model, p.max_length)
        emb = corpus_embeddings(encoder, ctx, p, self.name)
        ds = ctx.dataset
        qids = ds.query_ids
        qemb = encoder.encode([p.query_prefix + ds.queries[q] for q in qids], p.batch_size, desc=f"{self.name}: queries")
        index = build_index(emb, p)
        k = min(p.top_k, len(ds.doc_ids))
        t0 = time.perf_counter()
        scores, idx = index.search(qemb, k)
        dt = time.perf_counter() - t0
        log.info("stage %s: faiss %s search, %d queries, k=%d: %.2f ms/query",
                 self.name, p.index, len(qids), k, 1000 * dt / max(len(qids), 1))  # fmt: skip
        doc_ids = ds.doc_ids
        return {
            q: {doc_ids[j]: float(s) for s, j in zip(scores[i], idx[i]) if j >= 0}
            for i, q in enumerate(qids)
        }
