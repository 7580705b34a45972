"""Speed and memory figures (`make perf`), written to results/perf/perf.{json,md}.

Measures, on the embedded synthetic dataset (data/synthetic-esci, test split):
* BM25: index + search time, sparse backend vs rank-bm25 (reference);
* dense: corpus encoding docs/s (MiniLM-L6, bundled) and faiss query latency (flat, HNSW);
* cross-encoder: pairs/s batched across queries vs one query at a time, same model and pairs;
* metrics: stagebench's evaluator vs pytrec_eval on the same run;
* peak resident memory of the process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", default="results/perf")
    ap.add_argument("--data", default="data/synthetic-esci")
    ap.add_argument("--encode-docs", type=int, default=2000)
    ap.add_argument("--ce-queries", type=int, default=40)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from stagebench.config import load_config
    from stagebench.data.esci import load_esci
    from stagebench.stages.base import StageContext
    from stagebench.stages.bm25 import BM25Params, BM25Stage

    opts = load_config("configs/default.yaml").dataset.options  # the default benchmark's text template
    opts.path = args.data
    ds = load_esci(opts)
    ctx = StageContext(ds, Path(".cache/stagebench"))
    figures: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
                     "dataset": {"documents": len(ds.corpus), "queries": len(ds.queries)}}  # fmt: skip

    # BM25
    run, t_sparse = timed(BM25Stage("bm25", BM25Params(top_k=1000, backend="sparse")), ctx, [])
    sub = type(ds)(ds.name, ds.corpus, {q: ds.queries[q] for q in ds.query_ids[:50]}, ds.qrels, ds.text_template)
    _, t_ref = timed(BM25Stage("bm25", BM25Params(top_k=1000, backend="rank_bm25")), StageContext(sub, ctx.cache_dir), [])
    figures["bm25"] = {"sparse_index_and_500_queries_s": round(t_sparse, 2),
                       "rank_bm25_index_and_50_queries_s": round(t_ref, 2)}  # fmt: skip
    print("bm25", figures["bm25"], flush=True)

    # metrics
    import pytrec_eval

    from stagebench.metrics import evaluate

    ev, t_ours = timed(evaluate, ds.qrels, run, ["nDCG@10", "RR@10", "R@100", "P@10", "AP@100"])
    rev = pytrec_eval.RelevanceEvaluator(ds.qrels, {"ndcg_cut.10", "recall.100", "P.10", "map_cut.100", "recip_rank"})
    _, t_trec = timed(rev.evaluate, run)
    figures["metrics"] = {"stagebench_5_measures_500x1000_s": round(t_ours, 3), "pytrec_eval_same_s": round(t_trec, 3)}
    print("metrics", figures["metrics"], flush=True)

    # dense encoding + faiss
    from stagebench.encoders import load_bi_encoder, load_cross_encoder
    from stagebench.models import resolve_model
    from stagebench.stages.dense import DenseParams, build_index

    enc = load_bi_encoder(resolve_model("sentence-transformers/all-MiniLM-L6-v2"), 256)
    texts = ds.doc_texts[: args.encode_docs]
    _, t_enc = timed(enc.encode, texts, 128)
    qemb = enc.encode([ds.queries[q] for q in ds.query_ids], 128)
    # faiss latency does not depend on the vectors' content: random unit vectors of the corpus' shape
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((len(ds.doc_ids), enc.dim)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    faiss_fig = {}
    for kind in ("flat", "hnsw"):
        p = DenseParams(index=kind, top_k=1000)
        index, t_build = timed(build_index, corpus, p)
        _, t_search = timed(index.search, qemb, 1000)
        faiss_fig[kind] = {"build_s": round(t_build, 2), "ms_per_query_k1000": round(1000 * t_search / len(qemb), 3)}
    figures["dense"] = {"model": "sentence-transformers/all-MiniLM-L6-v2 (bundled fp32)", "max_length": 256,
                        "text_template": ds.text_template,
                        "encode_docs_per_s": round(len(texts) / t_enc, 1), "encode_sample_docs": len(texts),
                        "faiss_20k_x_384": faiss_fig}  # fmt: skip
    print("dense", figures["dense"], flush=True)

    # cross-encoder: batched across queries vs one query at a time, same pairs
    from stagebench.rerankers import CrossEncoderReranker
    from stagebench.stages.rerank import RerankCommon, rerank_run

    ce = CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L-12-v2", max_length=256, batch_size=32)
    qs = ds.query_ids[: args.ce_queries]
    head = {q: run[q] for q in qs}
    n_pairs = sum(min(50, len(run[q])) for q in qs)
    _, t_batched = timed(rerank_run, head, ce, ctx, RerankCommon(top_n=50, pairs_per_call=512), "ce", "ce")
    _, t_perq = timed(rerank_run, head, ce, ctx, RerankCommon(top_n=50, per_query=True), "ce", "ce")
    figures["cross_encoder"] = {"model": "cross-encoder/ms-marco-MiniLM-L-12-v2 (bundled INT8 ONNX)", "pairs": n_pairs,
                                "batched_across_queries_pairs_per_s": round(n_pairs / t_batched, 1),
                                "one_query_at_a_time_pairs_per_s": round(n_pairs / t_perq, 1)}  # fmt: skip
    print("cross_encoder", figures["cross_encoder"], flush=True)
    _ = load_cross_encoder  # imported for the docs' sake: the reranker wraps it

    figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf.json").write_text(json.dumps(figures, indent=2) + "\n")
    lines = ["# stagebench performance figures", "", "Written by `make perf` (benchmarks/run_perf.py).", "", "```json",
             json.dumps(figures, indent=2), "```", ""]  # fmt: skip
    (out / "perf.md").write_text("\n".join(lines))
    print(f"written to {out}/perf.json")


if __name__ == "__main__":
    main()
