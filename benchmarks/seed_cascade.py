"""The default cascade end to end against its seed-equivalent (issue 83), one after the other on this machine.

**stagebench**: ``configs/default.yaml`` (BM25 -> MiniLM-L6 dense -> RRF -> MiniLM-L12 cross-encoder over the
top 50) run with a fresh, empty cache, so every stage is computed; each stage's seconds from the manifest.
**seed-equivalent**: the same cascade as a project without stagebench writes it with sentence-transformers at
its defaults: the corpus and the queries encoded by ``SentenceTransformer`` (fp32 torch, batch 32, 256 tokens,
unit-length), an exact inner-product top 1,000, and ``CrossEncoder`` (fp32 torch, batch 32, the same weights:
the bundled INT8 carrier's, dequantized) over RRF's top 50 of each query, one query's pairs a call. BM25 and
RRF are stagebench's on both sides (the issue measured the seed's own BM25 17x slower: counting ours for both
favours the seed). Both cascades' nDCG@10 beside their seconds.

Run: ``python benchmarks/seed_cascade.py --output results`` (writes seed_cascade.json and seed_cascade.md;
about 16 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import stagebench
from stagebench.runtime.devices import cpu_class
from stagebench.runtime.system import compute_threads, machine_info

REPO = Path(__file__).resolve().parents[1]
CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BI = "sentence-transformers/all-MiniLM-L6-v2"


def ndcg10(ds, run) -> float:
    return round(stagebench.api.evaluate(ds.qrels, run, ["nDCG@10"]).means["nDCG@10"], 4)


def stagebench_side(config: dict, work: Path) -> dict:
    t0 = time.perf_counter()
    stagebench.api.run(config, output=work / "out", cache_dir=str(work / "cache"))
    wall = time.perf_counter() - t0
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    table = {row["stage"]: row for row in json.loads((work / "out" / "stage_table.json").read_text())}
    seconds = {s["name"]: s["seconds"] for s in manifest["stages"]}
    streams = {s["name"]: s["placement"].get("streams") for s in manifest["stages"] if s.get("placement")}
    return {"seconds": seconds, "wall": round(wall, 1), "streams": streams,
            "ndcg10": {s: round(table[s]["nDCG@10"], 4) for s in seconds}}  # fmt: skip


def seed_side(ds, bm25_run) -> dict:
    import torch
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from stagebench.models.onnx_weights import build_reference_folder
    from stagebench.models.resolve import resolve_model

    torch.set_num_threads(compute_threads())
    out: dict = {"seconds": {}}
    st = SentenceTransformer(resolve_model(BI).path, device="cpu")
    st.max_seq_length = 256
    t0 = time.perf_counter()
    docs = st.encode(list(ds.doc_texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    qids = ds.query_ids
    queries = st.encode([ds.queries[q] for q in qids], batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    scores = queries @ docs.T
    k = min(1000, len(ds.doc_ids))
    dense = {}
    for q, row in zip(qids, scores):
        top = np.argpartition(-row, k - 1)[:k]
        dense[q] = {ds.doc_ids[i]: float(row[i]) for i in top}
    out["seconds"]["dense"] = round(time.perf_counter() - t0, 1)
    out["ndcg10"] = {"dense": ndcg10(ds, dense)}

    rrf = stagebench.stage("rrf", k=60).apply(ds, bm25_run, dense, cache=False).run
    with tempfile.TemporaryDirectory() as tmp:
        ref = build_reference_folder(resolve_model(CE).path, Path(tmp) / "ce-fp32")
        ce = CrossEncoder(str(ref), device="cpu", max_length=256, activation_fn=torch.nn.Identity())
        t0 = time.perf_counter()
        reranked = {}
        for q, cands in rrf.items():
            head = sorted(cands, key=lambda d: (-cands[d], d))[:50]
            s = ce.predict([[ds.queries[q], ds.doc_text[d]] for d in head], batch_size=32, show_progress_bar=False)
            reranked[q] = {d: float(x) for d, x in zip(head, s)}
        out["seconds"]["cross_encoder"] = round(time.perf_counter() - t0, 1)
    out["ndcg10"]["cross_encoder"] = ndcg10(ds, reranked)
    out["pairs"] = sum(len(r) for r in reranked.values())
    out["docs"] = len(ds.doc_ids)
    return out


def markdown(x: dict) -> list[str]:
    ours, seed = x["stagebench"], x["seed_equivalent"]
    m = x["machine"]
    lines = [f"Machine: {m['cpu']} ({m['cpu_class']}), {m['cores']} cores; {seed['docs']} products, {seed['pairs']} pairs "
             f"reranked; stagebench's streams: {', '.join(f'{k} {v}' for k, v in ours['streams'].items())}.", "",
             "| stage | seed-equivalent s | stagebench s | ratio | nDCG@10 seed / stagebench |", "|---|---|---|---|---|"]  # fmt: skip
    for s in ("dense", "cross_encoder"):
        a, b = seed["seconds"][s], ours["seconds"][s]
        lines.append(f"| {s} | {a} | {b} | {a / b:.2f}x | {seed['ndcg10'][s]} / {ours['ndcg10'][s]} |")
    a, b = x["neural_seed"], x["neural_ours"]
    lines += [f"| the two neural stages | {a} | {b} | **{a / b:.2f}x** | |",
              f"| the whole cascade (BM25 and RRF stagebench's on both sides: {x['shared']} s) | {round(a + x['shared'], 1)} | "
              f"{round(b + x['shared'], 1)} | **{(a + x['shared']) / (b + x['shared']):.2f}x** | |"]  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", default="results")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = stagebench.load_config(REPO / "configs/default.yaml").raw
    config = {**config, "dataset": {**config["dataset"], "path": str(REPO / config["dataset"]["path"])}}
    with tempfile.TemporaryDirectory() as tmp:
        ours = stagebench_side(config, Path(tmp))
    ds = stagebench.load_dataset(config["dataset"])
    bm25 = stagebench.stage("bm25", **config["stages"][0]["params"]).apply(ds, cache=False).run
    seed = seed_side(ds, bm25)
    shared = round(ours["seconds"]["bm25"] + ours["seconds"]["rrf"], 1)
    x = {"machine": {**machine_info(), "cpu_class": cpu_class()}, "stagebench": ours, "seed_equivalent": seed, "shared": shared,
         "neural_seed": round(sum(seed["seconds"].values()), 1),
         "neural_ours": round(ours["seconds"]["dense"] + ours["seconds"]["cross_encoder"], 1)}  # fmt: skip
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "seed_cascade.json").write_text(json.dumps(x, indent=2) + "\n")
    (out / "seed_cascade.md").write_text("# The default cascade against its seed-equivalent\n\n" + __doc__.split("\n\n")[1]
                                         + "\n\n" + "\n".join(markdown(x)) + "\n")  # fmt: skip
    print("\n".join(markdown(x)))


if __name__ == "__main__":
    main()
