"""How HNSW's recall@100 grows with ``hnsw_ef_search`` on a catalog whose corpus embeddings the dense stage
has cached (e.g. by ``run_perf.py --sections index``): one graph built as the stage builds it
(``stagebench.stages.dense.build_index``), searched one query at a time at each efSearch, against the exact
top 100 of a flat index over the same vectors. The queries are a results folder's (its ``texts.json``),
encoded alone, as the stage encodes them, with the model, precision and max_length given.

    python benchmarks/hnsw_ef_sweep.py --embeddings CACHE/embeddings/KEY/embeddings.npy \\
        --run data/perf-scale/index-1000000 --precision int8-token --max-length 32
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import stagebench
from stagebench.optional import need
from stagebench.stages.dense import DenseParams, build_index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--embeddings", required=True, help="the dense stage's cached corpus embeddings (.npy)")
    ap.add_argument("--run", required=True, help="a results folder of that catalog (its texts.json holds the queries)")
    ap.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--ef", default="256,512,1024,4096,16384", help="efSearch values, comma-separated")
    ap.add_argument("--output", help="write the figures here (JSON)")
    args = ap.parse_args()
    faiss = need("faiss", "the HNSW sweep")
    emb = np.ascontiguousarray(np.load(args.embeddings, mmap_mode="r"))
    texts = json.load(open(f"{args.run}/texts.json"))["queries"]
    qids = sorted(texts, key=lambda q: (len(q), q))
    enc = stagebench.api.bi_encoder(args.model, device="cpu", precision=args.precision, max_length=args.max_length)
    q = np.concatenate([enc.encode([texts[i]], 1) for i in qids])
    exact = faiss.IndexFlatIP(emb.shape[1])
    exact.add(emb)
    _, truth = exact.search(q, 100)
    params = DenseParams(index="hnsw", top_k=100)
    t0 = time.perf_counter()
    graph = build_index(emb, params)
    out = {"vectors": len(emb), "queries": len(qids), "hnsw_m": params.hnsw_m, "hnsw_ef_construction": params.hnsw_ef_construction,
           "build_s": round(time.perf_counter() - t0, 1), "ef_search": {}}  # fmt: skip
    print(f"{len(emb):,} vectors: graph built in {out['build_s']} s", flush=True)
    for ef in (int(x) for x in args.ef.split(",")):
        graph.hnsw.efSearch = ef
        t0 = time.perf_counter()
        found = [graph.search(q[i : i + 1], 100)[1][0] for i in range(len(q))]
        ms = (time.perf_counter() - t0) / len(q) * 1000
        recall = np.array([len(set(f) & set(t)) / 100 for f, t in zip(found, truth)])
        out["ef_search"][ef] = {"recall_mean": round(float(recall.mean()), 4), "recall_min": float(recall.min()),
                                "queries_at_0": int((recall == 0).sum()), "queries_complete": int((recall == 1).sum()),
                                "search_ms_per_query": round(ms, 2)}  # fmt: skip
        print(f"efSearch {ef}: {out['ef_search'][ef]}", flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
