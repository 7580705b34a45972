"""`make perf`: speed, latency and memory of every stage, fast path against the reference path.

Writes ``results/perf.md``, ``results/perf.json`` and ``results/perf_scaling.png``.

Sections (timings are the median of ``--repeats`` runs unless noted):

1. BM25 on the embedded catalog (20K products) and on a generated 100K catalog: the
   sparse backend against rank-bm25 (the reference), queries/s, single-query latency
   percentiles, index build time, and parity: identical top-100 lists on every reference query.
2. Cross-encoder: the INT8 ONNX model batched across queries against a per-query fp32
   sentence-transformers ``CrossEncoder`` loop (what search-ranking-stack does), same
   pairs, same model family (the fp32 model is the INT8 graph's weights dequantized,
   see src/stagebench/models/onnx_weights.py), with the rank correlation of their scores.
3. Precision: dense encoding (MiniLM-L6: torch fp32 at batch 32 and 128, bf16 autocast, and
   onnxruntime fp32 and int8-token of its ONNX export; batch invariance, and whether queries
   encoded in a batch rank as encoded alone; ``--sections dense`` runs this part alone) and cross-encoder scoring (the INT8
   ONNX carrier, its dequantized weights in torch fp32 and bf16): docs/s or pairs/s, and the
   nDCG@10 change against fp32 on the embedded test queries, Cranfield and the real ESCI rows
   (../shared/data), all measured in the same run. ``precision: auto`` follows this table.
4. Latency of the default cascade (configs/default.yaml, through the stage cache): each stage's
   batch seconds per query beside its latency serving one query at a time (p50 / p95 / p99 over
   ``--latency-queries`` queries, warm), and the cascade's cumulative latency up to each stage.
5. Scaling: generated catalogs of 10K, 100K and 1M products; per size, in a fresh
   process: BM25 index time, postings, query latency and peak RSS; dense (10K, 100K):
   encoding time, faiss build/search and peak RSS.
6. Catalog memory: loading and BM25-indexing 1M and 2M products, bytes per product.
7. The dense index at 1M products (``--index-size``): ``index: hnsw`` against ``index: flat`` through the
   dense stage itself, one run of both stages over one encoding of the corpus (the stage cache under
   ``--scale-root``, so only the first ``make perf`` encodes; on a GPU when ``device: auto`` finds one,
   about 75 minutes on a 2-core CPU): recall@100 against flat, nDCG@10, compute seconds, queries
   served one at a time (p50/p95/p99), peak RSS, and the machine it ran on.
8. The neural stages against this machine's limit (benchmarks/perf_limits.py, issue 83): the cross-encoder's
   pairs/s and the bi-encoder's docs/s as operations per second against the measured GEMM peak of the
   arithmetic each runs (fp32, bf16, INT8), beside the seed-equivalent fp32 sentence-transformers paths.

Run ``python benchmarks/run_perf.py --help`` for the knobs (sizes, repeats).

Written on the public API (``import stagebench``: load_config, load_dataset, stage(...).apply,
cross_encoder, bi_encoder, evaluate; catalogs by ``stagebench generate-data``). What it imports
below the API are the kernels it measures, by design: the BM25 scoring kernel and analyzer (against
rank-bm25's loop), the faiss index and search of the dense stage (latency per catalog size), the
fp32 reference built from the INT8 weights (onnx_weights), and the process's RSS and machine
facts (system, devices, execute.package_versions).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import stagebench
from stagebench.runtime.system import machine_info

sys.path.insert(0, str(Path(__file__).resolve().parent))
import perf_limits  # noqa: E402 - the limits section, beside this script

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- helpers


def median_time(fn, repeats: int):
    """(result of the last call, median seconds, all seconds)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times), times


def percentiles(latencies_s: list[float]) -> dict:
    a = np.asarray(latencies_s) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3),
            "p99_ms": round(float(np.percentile(a, 99)), 3)}  # fmt: skip


def load(path: str | Path, max_queries: int | None = None) -> stagebench.Dataset:
    """A catalog read as the default benchmark reads its own (its loader options and text template)."""
    spec = stagebench.load_config(REPO / "configs/default.yaml").raw["dataset"]
    return stagebench.load_dataset({**spec, "path": str(path), "max_queries": max_queries})


def ensure_catalog(n_products: int, root: Path, test_queries: int = 200) -> Path:
    out = root / f"catalog-{n_products}"
    if not (out / "shopping_queries_dataset_examples.parquet").is_file():
        print(f"generating a {n_products:,}-product catalog in {out}", flush=True)
        cmd = [sys.executable, "-m", "stagebench", "generate-data", "--output", str(out), "--seed", "101",
               "--products", str(n_products), "--test-queries", str(test_queries), "--train-queries", "0"]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    return out


def log(section: str, figures: dict) -> None:
    print(section, json.dumps(figures), flush=True)


# --------------------------------------------------------------------------- 1. BM25


def bm25_section(ds, repeats: int, ref_queries: int) -> dict:
    from rank_bm25 import BM25Okapi

    from stagebench.analyzer import Tokenizer
    from stagebench.stages.bm25 import BM25Params, SparseBM25, query_batch_size, search, top_k_run

    p = BM25Params(k1=1.2, b=0.75, top_k=1000)
    tok = Tokenizer()
    doc_tokens = [tok(t) for t in ds.doc_texts]
    qids = ds.query_ids
    q_tokens = [tok(ds.queries[q]) for q in qids]
    index, t_build, _ = median_time(lambda: SparseBM25.build(doc_tokens, p.k1, p.b, p.epsilon), repeats)
    # batched search as the stage runs it (query batches in threads, top-k with the tie rule): queries/s
    bs, threads = query_batch_size(p, len(ds.doc_ids)), os.cpu_count() or 1
    _, t_search, _ = median_time(lambda: search(index.score_batch, qids, q_tokens, ds.doc_ids, 1000, bs, threads), repeats)
    qps = len(qids) / t_search
    # parity is checked on what users get: the bm25 stage's own run
    stage = stagebench.stage("bm25", k1=p.k1, b=p.b, top_k=1000).apply(ds, cache=False)
    run = stage.run
    lat = []
    for qt, q in zip(q_tokens, qids):
        t0 = time.perf_counter()
        top_k_run([q], ds.doc_ids, index.score_batch([qt]), 1000, keep_zero=False)
        lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    ref = BM25Okapi(doc_tokens, k1=p.k1, b=p.b, epsilon=p.epsilon)
    t_ref_build = time.perf_counter() - t0
    ref_lat, identical, max_diff = [], 0, 0.0
    sub = list(range(min(ref_queries, len(qids))))
    for i in sub:
        t0 = time.perf_counter()
        scores = ref.get_scores(q_tokens[i])
        ref_top = top_k_run([qids[i]], ds.doc_ids, scores[None, :], 1000, keep_zero=False)[qids[i]]
        ref_lat.append(time.perf_counter() - t0)
        ours = run.get(qids[i], {})
        identical += list(ref_top)[:100] == list(ours)[:100]
        common = set(ref_top) & set(ours)
        max_diff = max([max_diff, *(abs(ref_top[d] - ours[d]) for d in common)])
    ref_qps = len(sub) / sum(ref_lat)
    out = {
        "documents": len(ds.doc_ids), "queries": len(qids), "postings": int(index.weights.nnz),
        "sparse": {"index_build_s": round(t_build, 3), "queries_per_s": round(qps, 1),
                   "single_query_latency": percentiles(lat), "threads": os.cpu_count(),
                   "stage_s": round(stage.record.seconds, 3)},
        "rank_bm25": {"index_build_s": round(t_ref_build, 3), "queries_per_s": round(ref_qps, 2),
                      "single_query_latency": percentiles(ref_lat), "queries_measured": len(sub)},
        "speedup_queries_per_s": round(qps / ref_qps, 1),
        "speedup_single_query_p50": round(percentiles(ref_lat)["p50_ms"] / percentiles(lat)["p50_ms"], 1),
        "parity": {"queries": len(sub), "identical_top100": identical, "max_abs_score_diff": max_diff,
                   "option_set": "BM25Okapi as rank-bm25 0.2.2 defines it (k1=1.2, b=0.75, epsilon=0.25): the sparse "
                                 "backend computes the same formula, idf epsilon floor included"},
    }  # fmt: skip
    return out


# --------------------------------------------------------------------------- 2. cross-encoder


def cross_encoder_section(ds, repeats: int, n_queries: int, top_n: int, ref_dir: Path) -> dict:
    from scipy.stats import spearmanr
    from sentence_transformers import CrossEncoder

    from stagebench.models.resolve import resolve_model
    from stagebench.models.onnx_weights import build_reference_folder

    run = stagebench.stage("bm25", k1=1.2, b=0.75, top_k=top_n).apply(ds, cache=False).run
    qids = [q for q in ds.query_ids if run.get(q)][:n_queries]
    head = {q: run[q] for q in qids}
    pairs = [(q, d) for q in qids for d in head[q]]
    text = ds.doc_text
    # the stage as a run applies it; its scoring seconds (RerankStats, model load excluded) timed
    ce = stagebench.stage("cross_encoder", top_n=top_n, max_length=256, batch_size=32, pairs_per_call=512)
    t_fast = statistics.median(ce.apply(ds, head, cache=False).stats.seconds[top_n] for _ in range(repeats))
    fast = stagebench.api.cross_encoder("cross-encoder/ms-marco-MiniLM-L-12-v2", max_length=256)
    fast_scores = np.asarray(fast.predict([(ds.queries[q], text[d]) for q, d in pairs], 32), dtype=np.float64)
    fast_lat = []
    for q in qids:
        t0 = time.perf_counter()
        fast.predict([(ds.queries[q], text[d]) for d in head[q]], 32)
        fast_lat.append(time.perf_counter() - t0)

    onnx_dir = resolve_model("cross-encoder/ms-marco-MiniLM-L-12-v2").path
    folder = build_reference_folder(onnx_dir, ref_dir)
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    ref = CrossEncoder(str(folder), device="cpu", max_length=256, activation_fn=torch.nn.Identity())

    def per_query_loop():
        out, lat = [], []
        for q in qids:
            t0 = time.perf_counter()
            out.append(ref.predict([[ds.queries[q], text[d]] for d in head[q]], batch_size=32, show_progress_bar=False))
            lat.append(time.perf_counter() - t0)
        return np.concatenate(out), lat

    (ref_scores, ref_lat), t_ref, _ = median_time(per_query_loop, repeats)
    rho = float(spearmanr(fast_scores, ref_scores).statistic)
    per_q = [float(spearmanr(fast_scores[i * top_n:(i + 1) * top_n], ref_scores[i * top_n:(i + 1) * top_n]).statistic)
             for i in range(len(qids)) if len(head[qids[i]]) == top_n]  # fmt: skip
    return {
        "pairs": len(pairs), "queries": len(qids), "top_n": top_n, "max_length": 256,
        "fast": {"what": "the cross_encoder stage at its default (precision auto: the INT8 carrier with per-token "
                         "scales on a CPU), pairs batched across queries, length-sorted",
                 "pairs_per_s": round(len(pairs) / t_fast, 1), "per_query_latency": percentiles(fast_lat)},
        "reference": {"what": "fp32 sentence-transformers CrossEncoder, one query at a time (dequantized weights of the "
                              "same model)", "pairs_per_s": round(len(pairs) / t_ref, 1),
                      "per_query_latency": percentiles(ref_lat)},
        "speedup_pairs_per_s": round(t_ref / t_fast, 2),
        "spearman_all_pairs": round(rho, 5),
        "spearman_within_query_mean": round(float(np.mean(per_q)), 5),
    }  # fmt: skip


# --------------------------------------------------------------------------- 3. precision


def quality_datasets(embedded) -> dict:
    """The embedded test queries, and the real collections beside the repo when present."""
    out = {"embedded (20K synthetic)": embedded}
    shared = REPO.parent / "shared" / "data"
    for name, spec in (("Cranfield", {"loader": "beir", "path": str(shared / "cranfield")}),
                       ("ESCI real rows", {"loader": "esci", "path": str(shared / "esci-real-rows"), "split": None})):  # fmt: skip
        if Path(spec["path"]).exists():
            out[name] = stagebench.load_dataset(spec)
        else:
            print(f"precision: {spec['path']} is absent; {name} left out", flush=True)
    return out


def export_onnx(model_path: str, out: Path) -> dict[str, Path]:
    """The bi-encoder's transformer exported to ONNX (fp32), and a per-channel dynamic INT8 copy
    (onnxruntime.quantization): the onnxruntime alternatives the precision table measures."""
    import shutil

    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    folders = {"fp32": out / "ort-fp32", "int8": out / "ort-int8"}
    if all((f / "model.onnx").is_file() for f in folders.values()):
        return folders
    base = AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask, types):
            return self.m(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    enc = AutoTokenizer.from_pretrained(model_path)(["a b", "c d e"], padding=True, return_tensors="pt")
    for f in folders.values():
        f.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(model_path) / "tokenizer.json", f / "tokenizer.json")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(Hidden(base), tuple(enc[k] for k in names), str(folders["fp32"] / "model.onnx"), input_names=names,
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={k: {0: "batch", 1: "tokens"} for k in [*names, "last_hidden_state"]})  # fmt: skip
    quantize_dynamic(str(folders["fp32"] / "model.onnx"), str(folders["int8"] / "model.onnx"), per_channel=True,
                     weight_type=QuantType.QInt8)  # fmt: skip
    return folders


def gpu_name() -> str:
    """The CUDA device ``device: auto`` encodes on, or "" (no torch, or no GPU)."""
    try:
        import torch
    except ImportError:
        return ""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def machine_here() -> dict:
    """What a section's figures were measured on, and when (UTC): results/perf.md names it."""
    return {**machine_info(), "flags": cpu_flags(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def cpu_flags() -> str:
    """The CPU's family/model and the flags that decide the fast paths (the vector, INT8 and bf16 units)."""
    from stagebench.runtime.devices import cpu_features

    info = Path("/proc/cpuinfo").read_text(errors="replace") if Path("/proc/cpuinfo").is_file() else ""
    field = lambda k: next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith(k)), "?")  # noqa: E731
    keep = sorted(f for f in cpu_features() if f.startswith(("avx2", "avx512", "amx", "avx_vnni")))
    return f"{field('vendor_id')} family {field('cpu family')} model {field('model')}: {' '.join(keep) or 'no AVX2'}"


def precision_section(embedded, work: Path, parts: tuple[str, ...] = ("dense", "cross_encoder"),
                      previous: dict | None = None, ce_only: tuple[str, ...] = ()) -> dict:
    """Dense encoding and cross-encoder scoring at every precision: speed, and the nDCG@10 change
    against fp32 on each dataset, all in this one run."""
    from stagebench.runtime.devices import cpu_has_bf16, place

    sets = quality_datasets(embedded)
    out: dict = {**(previous or {}), "datasets": {n: {"documents": len(d.doc_ids), "queries": len(d.queries)} for n, d in sets.items()}}
    if "cross_encoder" in parts:  # what the page's machine (its header) has, where the cross-encoder table was measured
        out.update({"bf16_native": cpu_has_bf16(), "auto": place("cpu", "auto", "torch", "perf").precision})
    if "dense" in parts:
        out["dense"] = dense_precision(sets, work)
        out["dense"]["machine"] = machine_here()
    if "cross_encoder" in parts:
        out["cross_encoder"] = cross_encoder_precision(sets, work, ce_only)
    return out


def dense_precision(sets: dict, work: Path) -> dict:
    """Each dense path: docs/s over each whole corpus (batch 32, the dense stage's default; and torch fp32
    at batch 128, the default until issue 51; onnxruntime fp32 at max_length 128, the length MiniLM-L6 was
    fine-tuned at), nDCG@10 and R@100 of the dense stage alone (k=1000) and
    their change against torch fp32, the largest change of an embedding between encoded alone and
    batched, and how many of 20 queries encoded in a batch of 128 rank exactly as encoded alone (the
    dense stage encodes each query alone, so a served query ranks as the run did on every path)."""
    from stagebench.models.encoders import load_bi_encoder
    from stagebench.models.resolve import resolve_model
    from stagebench.runtime.devices import Placement
    from stagebench.runs import ranked
    from stagebench.stages.dense import DenseParams, build_index, search_top_k

    name = "sentence-transformers/all-MiniLM-L6-v2"
    torch_fp32 = lambda: load_bi_encoder(resolve_model(name), Placement("cpu", "fp32", "reference"), 256)  # noqa: E731
    dense_paths = {
        "torch fp32 (the reference)": (torch_fp32, 32),
        "torch fp32, batch 128 (the default until issue 51 on a CPU without AMX)": (torch_fp32, 128),
        "torch bf16 in fixed shapes (precision: bf16)": (lambda: stagebench.api.bi_encoder(name, device="cpu", precision="bf16", max_length=256), 32),
        "onnxruntime fp32, exported (fp32 on a CPU)": (
            lambda: stagebench.api.bi_encoder(name, device="cpu", precision="fp32", max_length=256), 32),
        "onnxruntime fp32, max_length 128 (the length MiniLM-L6 was fine-tuned at)": (
            lambda: stagebench.api.bi_encoder(name, device="cpu", precision="fp32", max_length=128), 32),
        "onnxruntime per-channel INT8, per-token scales (int8-token)": (
            lambda: stagebench.api.bi_encoder(name, device="cpu", precision="int8-token", max_length=256), 32),
    }  # fmt: skip
    auto = stagebench.api.bi_encoder(name, device="cpu", max_length=256).placement
    dense: dict = {"auto": f"{auto.precision} ({auto.why})"}
    ref_path = "torch fp32 (the reference)"
    for path, (make, batch) in dense_paths.items():
        enc = make()
        row = dense[path] = {"batch": batch}
        enc.encode(["warm up"] * 64, batch)
        for cname, ds in sets.items():
            t0 = time.perf_counter()
            emb = enc.encode(ds.doc_texts, batch)
            dt = time.perf_counter() - t0
            qtexts = [ds.queries[q] for q in ds.query_ids]
            qe = np.concatenate([enc.encode([t], 1) for t in qtexts])  # as the dense stage encodes queries
            index = build_index(emb, DenseParams())
            run = search_top_k(index, qe, ds.query_ids, ds.doc_ids, min(1000, len(ds.doc_ids)))
            ev = stagebench.evaluate(ds.qrels, run, ["nDCG@10", "R@100"]).means
            row[cname] = {"docs_per_s": round(len(ds.doc_ids) / dt, 1), "ndcg10": round(ev["nDCG@10"], 4),
                          "r100": round(ev["R@100"], 4)}  # fmt: skip
            if cname == next(iter(sets)):  # batch invariance: 200 texts alone against batched as above
                alone = np.concatenate([enc.encode([t], 1) for t in ds.doc_texts[:200]])
                row[cname]["invariance_max_delta"] = float(np.abs(alone - emb[:200]).max())
                few = ds.query_ids[:20]
                batched = search_top_k(index, enc.encode(qtexts[:20], 128), few, ds.doc_ids, min(1000, len(ds.doc_ids)))
                row[cname]["batched_queries_rank_as_alone"] = sum(ranked(batched[q]) == ranked(run[q]) for q in few)
            if path != ref_path and ref_path in dense:
                ref = dense[ref_path][cname]
                row[cname]["ndcg10_change"] = round(ev["nDCG@10"] - ref["ndcg10"], 4)
                row[cname]["speedup"] = round(row[cname]["docs_per_s"] / ref["docs_per_s"], 2)
            log(f"precision dense {path} {cname}", row[cname])
    return dense


def cross_encoder_precision(sets: dict, work: Path, only: tuple[str, ...] = ()) -> dict:
    """Each cross-encoder path on 100 queries of each collection, BM25's top 20: pairs/s, nDCG@10 and its change
    against torch fp32, the invariance of 200 pairs. ``only``: the paths whose names hold one of these words (and
    the reference)."""
    from stagebench.models.encoders import STCrossEncoder
    from stagebench.models.onnx_weights import build_reference_folder
    from stagebench.models.resolve import resolve_model
    from stagebench.runtime.devices import Placement

    name = "cross-encoder/ms-marco-MiniLM-L-12-v2"
    ref = str(build_reference_folder(resolve_model(name).path, work / "ce-fp32-reference"))
    ce_paths = {
        "torch fp32 (dequantized weights)": lambda: STCrossEncoder(resolve_model(ref), 256, Placement("cpu", "fp32", "reference")),
        "onnxruntime fp32, exported (auto for a torch cross-encoder)": lambda: stagebench.api.cross_encoder(
            ref, device="cpu", max_length=256),
        "torch bf16 in fixed shapes (dequantized weights; precision: bf16)": lambda: stagebench.api.cross_encoder(
            ref, device="cpu", precision="bf16", max_length=256),
        "onnxruntime fp32 (fp32: the carrier dequantized)": lambda: stagebench.api.cross_encoder(
            name, device="cpu", precision="fp32", max_length=256),
        "INT8 carrier, per-token activation scales (int8-token, auto on a CPU)": lambda: stagebench.api.cross_encoder(
            name, device="cpu", precision="int8-token", max_length=256),
        "INT8 carrier as shipped, per-batch scales (int8)": lambda: stagebench.api.cross_encoder(
            name, device="cpu", precision="int8", max_length=256),
    }  # fmt: skip
    reference = next(iter(ce_paths))
    ce_paths = {k: make() for k, make in ce_paths.items() if k == reference or not only or any(w in k for w in only)}
    depth, max_q = 20, 100
    ce: dict = {"depth": depth, "max_queries": max_q}
    for name, ds in sets.items():
        qids = ds.query_ids[:max_q]
        qrels = {q: ds.qrels[q] for q in qids if q in ds.qrels}  # scored over these queries only
        first = stagebench.stage("bm25", top_k=depth).apply(ds.subset(qids), cache=False).run
        text = ds.doc_text
        pairs = [(q, d) for q in qids for d in first.get(q, {})]
        for path, model in ce_paths.items():
            t0 = time.perf_counter()
            scores = model.predict([(ds.queries[q], text[d]) for q, d in pairs], 32)
            dt = time.perf_counter() - t0
            run: dict = {}
            for (q, d), sc in zip(pairs, scores):
                run.setdefault(q, {})[d] = float(sc)
            ev = stagebench.evaluate(qrels, run, ["nDCG@10"]).means
            row = ce.setdefault(path, {})[name] = {"pairs_per_s": round(len(pairs) / dt, 1), "ndcg10": round(ev["nDCG@10"], 4)}
            if name == next(iter(sets)):  # batch invariance: the first 200 pairs alone against batched as above
                few = [(ds.queries[q], text[d]) for q, d in pairs[:200]]
                alone = np.array([model.predict([pr], 1)[0] for pr in few])
                row["invariance_max_delta"] = float(np.abs(alone - np.asarray(scores[:200])).max())
            ref = ce.get("torch fp32 (dequantized weights)", {}).get(name)
            if ref is not None and ref is not row:
                row["ndcg10_change"] = round(ev["nDCG@10"] - ref["ndcg10"], 4)
                row["speedup"] = round(row["pairs_per_s"] / ref["pairs_per_s"], 2)
            log(f"precision cross-encoder {path} {name}", row)
    return ce


#: the cross-encoder paths the default's rule weighs (docs/models.md#precision): reference, candidates
#: the cross-encoder's paths the rule weighs: fp32 (the reference), the batch-invariant int8-token (auto), the
#: carrier's own batch-dependent int8, and bf16 (its weights dequantized into torch, in fixed batch shapes)
RULE_PATHS = ("fp32", "int8-token", "int8", "bf16")


def precision_rule_section(embedded, depth: int = 20, only: tuple[str, ...] = (), paths: tuple[str, ...] = RULE_PATHS) -> dict:
    """The rule that picks the default cross-encoder path, on whole collections: every query,
    BM25's top ``depth`` reranked by the stage itself (cross-query batches, no cache) at each path
    of :data:`RULE_PATHS`; nDCG@10, its change against fp32 with a paired randomization test."""
    from stagebench.stats import randomization_test

    out: dict = {"depth": depth, "paths": list(paths), "collections": {}}
    for name, ds in quality_datasets(embedded).items():
        if only and name not in only:
            continue
        first = stagebench.stage("bm25", top_k=depth).apply(ds, cache=False).run
        qids = sorted(q for q in first if q in ds.qrels)
        col = out["collections"][name] = {"queries": len(qids), "pairs": sum(len(first[q]) for q in first)}
        per_query = {}
        for prec in paths:
            t0 = time.perf_counter()
            run = stagebench.stage("cross_encoder", top_n=depth, precision=prec).apply(ds, first, cache=False).run
            dt = time.perf_counter() - t0
            ev = stagebench.evaluate(ds.qrels, run, ["nDCG@10"])
            per_query[prec] = [ev.per_query["nDCG@10"].get(q, 0.0) for q in qids]
            row = col[prec] = {"pairs_per_s": round(col["pairs"] / dt, 1), "ndcg10": round(ev.means["nDCG@10"], 4)}
            if prec != paths[0]:
                ref = per_query[paths[0]]
                row["ndcg10_change"] = round(float(np.mean(per_query[prec]) - np.mean(ref)), 4)
                row["p"] = round(randomization_test(ref, per_query[prec]), 4)
                row["queries_changed"] = sum(abs(a - b) > 1e-12 for a, b in zip(ref, per_query[prec]))
            log(f"precision rule {name} {prec}", row)
    return out


def precision_rule_markdown(r: dict) -> list[str]:
    names = list(r["collections"])
    lines = ["", "## The default cross-encoder path: the 0.002 rule on whole collections", "",
             f"Every query of each collection, BM25's top {r['depth']} reranked by the cross_encoder stage "
             "(pairs of every query in length-sorted calls); each cell: pairs/s, nDCG@10 (change against fp32, "
             "paired randomization p, queries whose nDCG@10 changed). `precision: auto` on a CPU is the fastest "
             "batch-invariant path within 0.002 of fp32 on all three (docs/models.md#precision).", "",
             "| path | " + " | ".join(f"{n} ({r['collections'][n]['queries']} queries, {r['collections'][n]['pairs']:,} pairs)"
                                      for n in names) + " |", "|---|" + "---|" * len(names)]  # fmt: skip
    for prec in r["paths"]:
        cells = []
        for n in names:
            c = r["collections"][n][prec]
            extra = "" if "ndcg10_change" not in c else f" ({c['ndcg10_change']:+.4f}, p={c['p']:.2f}, {c['queries_changed']} changed)"
            cells.append(f"{c['pairs_per_s']:,.1f} pairs/s, {c['ndcg10']:.4f}{extra}")
        lines.append(f"| `{prec}` | " + " | ".join(cells) + " |")
    return lines


# --------------------------------------------------------------------------- 4. latency of the default cascade


def latency_section(config: Path, work: Path, queries: int) -> dict:
    """The default cascade run through the stage cache (cached stages are read back; latency is
    measured again for this sample), and the figures the report's cost tables show."""
    from stagebench.results.cost import quality_cost
    from stagebench.results.folder import RunFolder
    from stagebench.stats import latency_percentiles

    conf = stagebench.load_config(config).raw
    conf["evaluation"] = {**conf.get("evaluation", {}), "latency_queries": queries}
    res = stagebench.run(conf, output=work / "latency-default")
    rf = RunFolder.open(res.output)
    n_q = rf.table().rows[0].queries
    cum = {p.stage: p for p in quality_cost(rf.table(), rf.stages)}
    out = {"config": str(config), "queries_served": queries, "queries_scored": n_q, "stages": {}}
    for s in rf.stages:
        own = latency_percentiles(list(s.latency_ms.values())) if s.latency_ms else None
        c = cum[s.name].latency_ms
        out["stages"][s.name] = {
            "batch_s_per_query": round((s.computed_seconds or 0.0) / n_q, 5),
            "own_ms": None if own is None else dict(zip(("p50", "p95", "p99"), (round(v, 2) for v in own))),
            "cascade_ms": None if c is None else dict(zip(("p50", "p95", "p99"), (round(v, 2) for v in c))),
            "nDCG@10": round(cum[s.name].quality, 4)}  # fmt: skip
    log("latency", out)
    return out


def latency_markdown(lat: dict) -> list[str]:
    lines = ["", "## Latency of the default cascade: one query at a time", "",
             f"`{lat['config']}` through the stage cache; {lat['queries_served']} of its {lat['queries_scored']} queries "
             "served one at a time by each stage, warm (models, index and embeddings loaded once, one untimed query "
             "first). Batch s/query: the stage's compute seconds over all queries when it was computed. Cascade: each "
             "query's milliseconds summed over the stages up to this one, then the percentiles.", "",
             "| stage | nDCG@10 | batch s/query | own p50 / p95 / p99 (ms) | cascade p50 / p95 / p99 (ms) |",
             "|---|---|---|---|---|"]  # fmt: skip
    cell = lambda d: "-" if d is None else f"{d['p50']:.1f} / {d['p95']:.1f} / {d['p99']:.1f}"  # noqa: E731
    for name, s in lat["stages"].items():
        lines.append(f"| {name} | {s['nDCG@10']:.4f} | {s['batch_s_per_query']:.4f} | {cell(s['own_ms'])} | {cell(s['cascade_ms'])} |")
    return lines


# --------------------------------------------------------------------------- 5. scaling (one size per process)


def scale_one(path: Path, what: str, queries: int, encode_docs: int | None) -> dict:
    """Runs in its own process, so peak RSS belongs to this size alone."""
    from stagebench.runtime.system import peak_rss_mb, rss_mb

    import pandas  # noqa: F401  - the libraries a load imports, so that the baseline below holds them
    import pyarrow.parquet  # noqa: F401

    import stagebench.data.esci  # noqa: F401

    before = rss_mb()
    t0 = time.perf_counter()
    ds = load(path, max_queries=queries)
    texts = ds.doc_texts
    t_load = time.perf_counter() - t0
    base = rss_mb()
    out = {"documents": len(ds.doc_ids), "queries": len(ds.queries), "load_s": round(t_load, 2),
           "rss_before_load_mb": round(before, 1), "rss_after_load_mb": round(base, 1),
           "corpus_arrow_mb": round((ds.corpus.nbytes + texts.nbytes) / 2**20, 1)}  # fmt: skip
    if what == "bm25":
        from stagebench.analyzer import Tokenizer
        from stagebench.stages.bm25 import SparseBM25, top_k_run

        tok = Tokenizer()
        t0 = time.perf_counter()
        index = SparseBM25.build((tok(t) for t in texts), 1.2, 0.75, 0.25)
        out["index_build_s"] = round(time.perf_counter() - t0, 2)
        w = index.weights
        out["postings"] = int(w.nnz)
        out["terms"] = len(index.vocab)
        out["index_mb"] = round((w.data.nbytes + w.indices.nbytes + w.indptr.nbytes) / 2**20, 1)
        out["rss_after_index_mb"] = round(rss_mb(), 1)
        lat = []
        for q in ds.query_ids:
            t0 = time.perf_counter()
            top_k_run([q], ds.doc_ids, index.score_batch([tok(ds.queries[q])]), 1000, keep_zero=False)
            lat.append(time.perf_counter() - t0)
        out["single_query_latency"] = percentiles(lat)
        out["queries_per_s_single"] = round(len(lat) / sum(lat), 1)
    else:
        from stagebench.stages.dense import DenseParams, build_index

        enc = stagebench.api.bi_encoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu", precision="int8", max_length=256)
        n = len(texts) if encode_docs is None else min(encode_docs, len(texts))
        t0 = time.perf_counter()
        emb = enc.encode(texts[:n], 128, progress=True, desc=f"encode {n}")
        out["encoded_docs"] = n
        out["encode_s"] = round(time.perf_counter() - t0, 1)
        out["encode_docs_per_s"] = round(n / out["encode_s"], 1)
        if n < len(texts):  # the index itself is built at full size: repeat the real vectors
            reps = -(-len(texts) // n)
            emb = np.tile(emb, (reps, 1))[: len(texts)]
            out["index_vectors_note"] = f"faiss index holds {len(texts)} vectors ({n} encoded, tiled)"
        qemb = enc.encode([ds.queries[q] for q in ds.query_ids], 128)
        t0 = time.perf_counter()
        index = build_index(emb, DenseParams(index="flat", top_k=1000))
        out["faiss_flat_build_s"] = round(time.perf_counter() - t0, 3)
        lat = []
        for i in range(len(qemb)):
            t0 = time.perf_counter()
            index.search(qemb[i : i + 1], 1000)
            lat.append(time.perf_counter() - t0)
        out["faiss_flat_single_query_latency"] = percentiles(lat)
        out["embeddings_mb"] = round(emb.nbytes / 2**20, 1)
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out


def scaling_section(sizes: list[int], dense_sizes: list[int], root: Path, queries: int) -> dict:
    res: dict = {"bm25": {}, "dense": {}}
    for n in sorted(set(sizes) | set(dense_sizes)):
        path = ensure_catalog(n, root)
        jobs = (["bm25"] if n in sizes else []) + (["dense"] if n in dense_sizes else [])
        for what in jobs:
            cmd = [sys.executable, __file__, "--scale-one", str(path), "--what", what, "--queries", str(queries)]
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
            if r.returncode != 0:
                raise SystemExit(f"scaling run {what} {n} failed:\n{r.stderr[-3000:]}")
            res[what][str(n)] = json.loads(r.stdout.strip().splitlines()[-1])
            log(f"scaling {what} {n}", res[what][str(n)])
    b = res["bm25"]
    if "100000" in b and "1000000" in b:
        res["bm25_growth_100k_to_1m"] = {
            "documents": round(b["1000000"]["documents"] / b["100000"]["documents"], 2),
            "index_build_s": round(b["1000000"]["index_build_s"] / b["100000"]["index_build_s"], 2),
            "peak_rss": round(b["1000000"]["peak_rss_mb"] / b["100000"]["peak_rss_mb"], 2),
            "peak_rss_above_load": round((b["1000000"]["peak_rss_mb"] - b["1000000"]["rss_after_load_mb"])
                                         / (b["100000"]["peak_rss_mb"] - b["100000"]["rss_after_load_mb"]), 2),
            "postings": round(b["1000000"]["postings"] / b["100000"]["postings"], 2),
            "query_p50": round(b["1000000"]["single_query_latency"]["p50_ms"] / b["100000"]["single_query_latency"]["p50_ms"], 2),
        }  # fmt: skip
    return res


def catalog_section(sizes: list[int], root: Path, queries: int, before: dict | None) -> dict:
    """Peak RSS and time of loading and BM25-indexing generated catalogs, one fresh process per size,
    with the columnar (Arrow) corpus; ``before``: the same figures measured with the per-product
    dicts (commit c6aeba3, kept in perf.json), for the bytes-per-product comparison."""
    res: dict = {"after": {}, "before": (before or {}).get("before", {})}
    for n in sizes:
        path = ensure_catalog(n, root)
        cmd = [sys.executable, __file__, "--scale-one", str(path), "--what", "bm25", "--queries", str(queries)]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        if r.returncode != 0:
            raise SystemExit(f"catalog run {n} failed:\n{r.stderr[-3000:]}")
        res["after"][str(n)] = json.loads(r.stdout.strip().splitlines()[-1])
        log(f"catalog {n}", res["after"][str(n)])
    res["bytes_per_product"] = {k: per_product(v) for k, v in res.items() if k in ("before", "after") and v}
    return res


def per_product(by_size: dict) -> dict:
    """Bytes per product, from the growth between the two largest sizes (which cancels the
    interpreter and libraries): after loading, and at the peak of loading + BM25 indexing."""
    a, b = sorted(by_size, key=int)[-2:]
    dn = int(b) - int(a)
    return {"sizes": [int(a), int(b)],
            "loaded": round((by_size[b]["rss_after_load_mb"] - by_size[a]["rss_after_load_mb"]) * 2**20 / dn),
            "peak": round((by_size[b]["peak_rss_mb"] - by_size[a]["peak_rss_mb"]) * 2**20 / dn)}  # fmt: skip


def catalog_markdown(c: dict) -> list[str]:
    lines = ["", "## Catalog memory: columnar (Arrow) corpus", "",
             "Loading (`loader: esci`, whole catalog, the default text template) and BM25-indexing generated catalogs, "
             "one fresh process per size; peak RSS of the process. *Before*: the corpus as one Python dict per "
             "product (commit c6aeba3), measured by an earlier run and kept in perf.json (that code is gone), perhaps "
             "on another machine: its memory compares with this run's, its seconds do not; *after*: Arrow string "
             "columns read by position (stagebench.data.corpus).", "",
             "| products | corpus | load | index build | RSS after load | peak RSS | Arrow buffers |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for side in ("before", "after"):
        for n, b in sorted(c.get(side, {}).items(), key=lambda kv: int(kv[0])):
            arrow = f"{b['corpus_arrow_mb']:,.0f} MB" if "corpus_arrow_mb" in b else "-"
            lines.append(f"| {int(n):,} | {side} | {b['load_s']} s | {b['index_build_s']} s | "
                         f"{b['rss_after_load_mb']:,.0f} MB | {b['peak_rss_mb']:,.0f} MB | {arrow} |")  # fmt: skip
    bpp = c.get("bytes_per_product", {})
    if "before" in bpp and "after" in bpp:
        lo, hi = bpp["after"]["sizes"]
        lines += ["", f"Bytes per product (growth from {lo:,} to {hi:,} products): loaded catalog "
                      f"**{bpp['before']['loaded']:,} -> {bpp['after']['loaded']:,}**, peak of load + index "
                      f"**{bpp['before']['peak']:,} -> {bpp['after']['peak']:,}**."]  # fmt: skip
    return lines


def scaling_plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    b = res["bm25"]
    ns = sorted(int(k) for k in b)
    d = res["dense"]
    nd = sorted(int(k) for k in d)
    axes[0].loglog(ns, [b[str(n)]["index_build_s"] for n in ns], "o-", label="BM25 index build")
    if nd:
        axes[0].loglog(nd, [d[str(n)]["encode_s"] * d[str(n)]["documents"] / d[str(n)]["encoded_docs"] for n in nd],
                       "s-", label="dense encode (int8)")  # fmt: skip
    axes[0].set(xlabel="products", ylabel="seconds", title="Index / encode time")
    axes[1].loglog(ns, [b[str(n)]["single_query_latency"]["p50_ms"] for n in ns], "o-", label="BM25 p50")
    axes[1].loglog(ns, [b[str(n)]["single_query_latency"]["p95_ms"] for n in ns], "o--", label="BM25 p95")
    if nd:
        axes[1].loglog(nd, [d[str(n)]["faiss_flat_single_query_latency"]["p50_ms"] for n in nd], "s-", label="faiss flat p50")
    axes[1].set(xlabel="products", ylabel="ms per query (k=1000)", title="Query latency")
    axes[2].loglog(ns, [b[str(n)]["peak_rss_mb"] for n in ns], "o-", label="BM25 process peak")
    axes[2].loglog(ns, [b[str(n)]["rss_after_load_mb"] for n in ns], "o:", label="after loading the catalog")
    if nd:
        axes[2].loglog(nd, [d[str(n)]["peak_rss_mb"] for n in nd], "s-", label="dense process peak")
    axes[2].set(xlabel="products", ylabel="MB", title="Peak RSS")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- report


# --------------------------------------------------------------------------- 7. the dense index at catalog scale


def index_section(n_products: int, root: Path, queries: int, latency_queries: int, batch_size: int,
                  model: str = "sentence-transformers/all-MiniLM-L6-v2", precision: str = "auto",
                  max_length: int | None = None) -> dict:
    """``index: hnsw`` against ``index: flat`` on a generated catalog of ``n_products``, through the dense stage
    itself (one run, two stages, the stage cache under ``root``): the corpus is encoded once, by the first stage,
    on the device ``auto`` picks (a GPU when there is one) and read back by the second. Per index: recall@100 of
    its top 100 against flat's (the exact one), nDCG@10, the stage's compute seconds (flat: encoding the corpus
    and the queries, adding, searching; hnsw: building the graph from the cached embeddings, encoding the
    queries, searching), queries served one at a time (a query encoded and searched), peak RSS."""
    from stagebench.results.folder import RunFolder

    path = ensure_catalog(n_products, root)
    dense = {"model": model, "top_k": 100, "batch_size": batch_size, "precision": precision,
             **({"max_length": max_length} if max_length else {})}
    conf = {"name": f"index-{n_products}", "output": str(root / f"index-{n_products}"), "cache_dir": str(root / "index-cache"),
            "dataset": {"loader": "esci", "path": str(path), "split": "test", "max_queries": queries},
            "stages": [{"name": "flat", "type": "dense", "params": {**dense, "index": "flat"}},
                       {"name": "hnsw", "type": "dense", "params": {**dense, "index": "hnsw"}}],
            "evaluation": {"metrics": ["nDCG@10", "R@100"], "latency_queries": latency_queries}}  # fmt: skip
    t0 = time.perf_counter()
    res = stagebench.run(conf)
    wall = time.perf_counter() - t0
    rf = RunFolder.open(res.output)
    flat, hnsw = res.runs["flat"], res.runs["hnsw"]
    recall = [len(set(hnsw.get(q, {})) & set(docs)) / len(docs) for q, docs in flat.items() if docs]
    rows = {r.stage: r for r in res.stage_table.rows}
    p = {s["name"]: s for s in rf.manifest.raw["resolved"]["stages"]}["hnsw"]["params"]
    out = {"products": n_products, "model": model, "precision": precision, "max_length": p["max_length"], "queries": len(flat),
           "latency_queries": latency_queries, "wall_s": round(wall, 1),
           "hnsw": {k: p[k] for k in ("hnsw_m", "hnsw_ef_construction", "hnsw_ef_search")},
           "recall_at_100": {"mean": round(float(np.mean(recall)), 4), "min": round(float(np.min(recall)), 4),
                             "queries_at_1": int(sum(r == 1.0 for r in recall))},
           "stages": {}}  # fmt: skip
    for s in rf.stages:
        lat = percentiles([v / 1000 for v in s.latency_ms.values()]) if s.latency_ms else None
        out["stages"][s.name] = {"computed_s": s.computed_seconds, "peak_rss_mb": s.computed_peak_rss_mb,
                                 "served": lat, "nDCG@10": round(rows[s.name].metrics["nDCG@10"], 4),
                                 "R@100": round(rows[s.name].metrics["R@100"], 4)}  # fmt: skip
    log(f"index {n_products}", out)
    return out


def index_markdown(x: dict) -> list[str]:
    h = x["hnsw"]
    r = x["recall_at_100"]
    lines = ["", f"## The dense index at {x['products']:,} products: `index: hnsw` against `flat`", "",
             f"The dense stage itself, `{x['model']}` (`precision: {x.get('precision', 'auto')}`"
             + (f", `max_length: {x['max_length']}`" if x.get("max_length") else "") + "), top 100, on a generated catalog (seed 101), "
             f"{x['queries']} test queries; one run of two stages sharing the corpus embeddings (encoded once, by "
             f"`flat`). HNSW: M {h['hnsw_m']}, efConstruction {h['hnsw_ef_construction']}, efSearch {h['hnsw_ef_search']} "
             f"(faiss `IndexHNSWFlat`). Recall@100: the share of flat's exact top 100 that HNSW returns, mean "
             f"**{r['mean']:.4f}** (lowest query {r['min']:.4f}; {r['queries_at_1']} of {x['queries']} queries complete). "
             f"Served: {x['latency_queries']} queries one at a time, a query encoded and searched. Compute s: flat "
             "encodes the corpus; hnsw builds its graph from the cached embeddings.", "",
             "| index | nDCG@10 | R@100 | compute s | served p50 / p95 / p99 (ms) | peak RSS |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in x["stages"].items():
        lat = s["served"]
        cell = "-" if not lat else f"{lat['p50_ms']:.1f} / {lat['p95_ms']:.1f} / {lat['p99_ms']:.1f}"
        lines.append(f"| {name} | {s['nDCG@10']:.4f} | {s['R@100']:.4f} | {s['computed_s']:.1f} | {cell} | {s['peak_rss_mb']:,.0f} MB |")
    if "ef_sweep" in x:  # benchmarks/hnsw_ef_sweep.py over the same cached embeddings, one graph
        w = x["ef_sweep"]
        lines += ["", f"efSearch against recall@100 (`benchmarks/hnsw_ef_sweep.py`: one graph built as the stage builds it, "
                      f"in {w['build_s']} s, over the same cached vectors and queries; search alone, one query at a time):", "",
                  "| hnsw_ef_search | recall@100 mean | lowest query | queries at 0 | queries complete | search ms a query |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for ef, r in w["ef_search"].items():
            lines.append(f"| {ef} | {r['recall_mean']:.4f} | {r['recall_min']:.2f} | {r['queries_at_0']} | "
                         f"{r['queries_complete']} of {w['queries']} | {r['search_ms_per_query']} |")  # fmt: skip
    if "machine" in x:
        m = x["machine"]
        lines += ["", f"Measured{when(m)} on {m['cpu']}, {m['usable_cores']} usable cores, {m['ram_gb']} GB RAM"
                      + (f", {m['gpu']}" if m.get("gpu") else "") + f"; CPU flags: {m.get('flags', '-')}."]  # fmt: skip
    return lines


def precision_markdown(p: dict) -> list[str]:
    names = list(p["datasets"])
    head = "| path | " + " | ".join(f"{n} ({p['datasets'][n]['documents']:,} docs)" for n in names) + " |"
    lines = ["", "## Precision: speed and nDCG@10 against fp32, on three collections", "",
             f"Native bf16 on the CPU of this page's header: {p['bf16_native']}; `precision: auto` chooses **{p['auto']}** for torch "
             "cross-encoders there. Each cell: throughput (speed-up over fp32), nDCG@10 (change against fp32); "
             "each table measured in one run.", "", "Dense encoding, sentence-transformers/all-MiniLM-L6-v2 (max_length 256 "
             "and batch 32 unless named; docs/s over each whole corpus; nDCG@10 of the dense stage alone, k=1000, each "
             "query encoded alone as the dense stage encodes it). `precision: auto` for the dense stage here: "
             f"{p['dense'].get('auto', '-')}. The last column: of 20 queries encoded in one batch of 128, how many "
             "rank exactly as encoded alone (what a batch-encoded run would have served):", "",
             head + " max change alone vs batched | batched queries ranked as alone |",
             "|---|" + "---|" * (len(names) + 2)]  # fmt: skip
    dm = p["dense"].get("machine")
    if dm:
        lines[-2:-2] = [f"Measured{when(dm)} on {dm['cpu']} ({dm['flags']}), {dm['usable_cores']} usable cores, {dm['ram_gb']} GB, "
                        f"Python {dm['python']} (`make perf` or `benchmarks/run_perf.py --sections dense`).", ""]
    lines += precision_rows({k: v for k, v in p["dense"].items() if isinstance(v, dict) and k != "machine"}, names,
                            "docs_per_s", "docs/s", "batched_queries_rank_as_alone")  # fmt: skip
    ce = p["cross_encoder"]
    lines += ["", f"Cross-encoder, ms-marco-MiniLM-L-12-v2 (max_length 256, batch 32), reranking BM25's top {ce['depth']} "
                  f"of the first {ce['max_queries']} queries; pairs/s over all those pairs (on the machine of this page's header):", "",
              head + " max change alone vs batched |", "|---|" + "---|" * (len(names) + 1)]  # fmt: skip
    lines += precision_rows({k: v for k, v in ce.items() if isinstance(v, dict)}, names, "pairs_per_s", "pairs/s")
    return lines


def precision_rows(table: dict, names: list[str], rate: str, unit: str, also: str = "") -> list[str]:
    """One Markdown row per path: throughput (speed-up over fp32), nDCG@10 (change against fp32),
    and the largest change of an output between computed alone and batched (the first collection)."""
    out = []
    for path, row in table.items():
        inv = row[names[0]].get("invariance_max_delta")
        cells = []
        for n in names:
            c = row[n]
            extra = f" ({c['speedup']}x)" if "speedup" in c else ""
            change = f" ({c['ndcg10_change']:+.4f})" if "ndcg10_change" in c else ""
            cells.append(f"{c[rate]:,.0f} {unit}{extra}, {c['ndcg10']:.4f}{change}")
        more = f" {row[names[0]].get(also, '-')}/20 |" if also else ""
        out.append(f"| {path} | " + " | ".join(cells) + f" | {'-' if inv is None else f'{inv:.2g}'} |" + more)
    return out


def when(machine: dict) -> str:
    """``" <date>"`` where a section recorded when it was measured (runs before 2026-11-26 did not)."""
    return f" {machine['date']}" if machine.get("date") else ""


def markdown(f: dict) -> str:
    m = f["machine"]
    lines = ["# stagebench performance", "",
             f"Written by `make perf` (benchmarks/run_perf.py){when(m)} on {m['cpu']} ({m.get('flags', 'CPU flags not recorded')}), "
             f"{m['usable_cores']} usable cores, "
             f"{m['ram_gb']} GB RAM, {m['os']}, Python {m['python']}. Timings are medians of {f['repeats']} runs "
             f"unless noted; latencies are single-query (one query per call).", ""]  # fmt: skip
    lines += ["## BM25: sparse backend vs rank-bm25", "",
              "| catalog | postings | sparse index build | sparse queries/s | sparse p50 / p95 | rank-bm25 queries/s | "
              "rank-bm25 p50 / p95 | speedup (q/s) | identical top-100 |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, b in f["bm25"].items():
        s, r = b["sparse"], b["rank_bm25"]
        lines.append(f"| {name}: {b['documents']:,} docs | {b['postings']:,} | {s['index_build_s']:.2f} s | {s['queries_per_s']:,.0f} | "
                     f"{s['single_query_latency']['p50_ms']:.2f} / {s['single_query_latency']['p95_ms']:.2f} ms | "
                     f"{r['queries_per_s']:.2f} | {r['single_query_latency']['p50_ms']:.0f} / {r['single_query_latency']['p95_ms']:.0f} ms | "
                     f"**{b['speedup_queries_per_s']:,.0f}x** | {b['parity']['identical_top100']}/{b['parity']['queries']} "
                     f"(max score diff {b['parity']['max_abs_score_diff']:.1e}) |")  # fmt: skip
    c = f["cross_encoder"]
    lines += ["", "## Cross-encoder: INT8 ONNX batched vs fp32 per-query sentence-transformers", "",
              f"{c['pairs']} pairs ({c['queries']} queries x top {c['top_n']} of BM25), max_length {c['max_length']}.", "",
              "| path | pairs/s | per-query p50 / p95 |", "|---|---|---|",
              f"| {c['fast']['what']} | {c['fast']['pairs_per_s']} | {c['fast']['per_query_latency']['p50_ms']:.0f} / {c['fast']['per_query_latency']['p95_ms']:.0f} ms |",
              f"| {c['reference']['what']} | {c['reference']['pairs_per_s']} | {c['reference']['per_query_latency']['p50_ms']:.0f} / {c['reference']['per_query_latency']['p95_ms']:.0f} ms |",
              "", f"Speedup **{c['speedup_pairs_per_s']}x**; Spearman of the two score lists: {c['spearman_all_pairs']} over all pairs, "
              f"{c['spearman_within_query_mean']} within a query (mean)."]  # fmt: skip
    if "precision" in f:
        lines += precision_markdown(f["precision"])
    if "precision_rule" in f:
        lines += precision_rule_markdown(f["precision_rule"])
    if "latency" in f:
        lines += latency_markdown(f["latency"])
    if "catalog" in f:
        lines += catalog_markdown(f["catalog"])
    for x in f.get("index", {}).values():  # by catalog size
        lines += index_markdown(x)
    if "limits" in f:
        lines += ["", "## The neural stages against this machine's limit", "", perf_limits.__doc__.split("\n\n")[1], "",
                  *perf_limits.limits_markdown(f["limits"])]  # fmt: skip
    s = f["scaling"]
    lines += ["", "## Scaling with catalog size", "", "![scaling](perf_scaling.png)", "",
              "One fresh process and one run per size (so peak RSS is that size's alone); generated catalogs "
              "(`stagebench generate-data`-style, seed 101), 200 test queries each.", "",
              "BM25 (sparse backend, k=1000, single-query latency):", "",
              "| products | load | index build | postings | index MB | RSS after load | peak RSS | p50 / p95 query |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for n, b in sorted(s["bm25"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {int(n):,} | {b['load_s']} s | {b['index_build_s']} s | {b['postings']:,} | {b['index_mb']} | "
                     f"{b['rss_after_load_mb']:,.0f} MB | {b['peak_rss_mb']:,.0f} MB | "
                     f"{b['single_query_latency']['p50_ms']:.1f} / {b['single_query_latency']['p95_ms']:.1f} ms |")  # fmt: skip
    if "bm25_growth_100k_to_1m" in s:
        g = s["bm25_growth_100k_to_1m"]
        lines += ["", f"100K -> 1M products ({g['documents']}x documents): index build {g['index_build_s']}x, postings "
                      f"{g['postings']}x, peak RSS {g['peak_rss']}x (above the loaded catalog: {g['peak_rss_above_load']}x), "
                      f"p50 query latency {g['query_p50']}x."]  # fmt: skip
    if s["dense"]:
        lines += ["", "Dense (MiniLM-L6 dynamic INT8, faiss flat, k=1000):", "",
                  "| products | encoded | encode | docs/s | faiss build | p50 / p95 query | embeddings MB | peak RSS |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for n, b in sorted(s["dense"].items(), key=lambda kv: int(kv[0])):
            lat = b["faiss_flat_single_query_latency"]
            lines.append(f"| {int(n):,} | {b['encoded_docs']:,} | {b['encode_s']} s | {b['encode_docs_per_s']} | "
                         f"{b['faiss_flat_build_s']} s | {lat['p50_ms']:.1f} / {lat['p95_ms']:.1f} ms | {b['embeddings_mb']} | "
                         f"{b['peak_rss_mb']:,.0f} MB |")  # fmt: skip
    lines += ["", "Raw figures: [perf.json](perf.json).", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", default="results", help="folder for perf.md, perf.json, perf_scaling.png")
    ap.add_argument("--data", default="data/synthetic-esci")
    ap.add_argument("--scale-root", default="data/perf-scale", help="where generated catalogs are kept")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bm25-big", type=int, default=100000, help="the generated catalog of the BM25 section")
    ap.add_argument("--bm25-sizes", default="10000,100000,1000000")
    ap.add_argument("--dense-sizes", default="10000,100000")
    ap.add_argument("--ce-queries", type=int, default=20)
    ap.add_argument("--encode-docs", type=int, default=2000)
    ap.add_argument("--sections", default="bm25,cross_encoder,precision,precision-rule,latency,scaling,catalog,index,limits")
    ap.add_argument("--rule-collections", default="", help="precision-rule: only these collections (comma-separated)")
    ap.add_argument("--rule-depth", type=int, default=20, help="precision-rule: BM25's top N reranked per query")
    ap.add_argument("--rule-paths", default=",".join(RULE_PATHS), help="precision-rule: the paths weighed (the first is the reference)")
    ap.add_argument("--precision-ce-paths", default="", help="precision-ce: only the cross-encoder paths whose names hold "
                                                             "one of these comma-separated words (and torch fp32)")
    ap.add_argument("--latency-config", default="configs/default.yaml")
    ap.add_argument("--latency-queries", type=int, default=100)
    ap.add_argument("--catalog-sizes", default="1000000,2000000")
    ap.add_argument("--index-size", type=int, default=1000000, help="index: the generated catalog (products)")
    ap.add_argument("--index-queries", type=int, default=200, help="index: test queries searched")
    ap.add_argument("--index-latency-queries", type=int, default=100, help="index: queries served one at a time")
    ap.add_argument("--index-batch", type=int, default=32, help="index: the dense stage's batch_size (a GPU takes more)")
    ap.add_argument("--index-model", default="sentence-transformers/all-MiniLM-L6-v2", help="index: the dense model")
    ap.add_argument("--index-precision", default="auto", help="index: the dense stage's precision (int8-token: a CPU's hours)")
    ap.add_argument("--index-max-length", type=int, help="index: the dense stage's max_length (tokens a text; its default unless set)")
    ap.add_argument("--render-only", action="store_true", help="rewrite perf.md and the plot from perf.json")
    ap.add_argument("--scale-one", help=argparse.SUPPRESS)
    ap.add_argument("--what", help=argparse.SUPPRESS)
    ap.add_argument("--queries", type=int, default=200, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.scale_one:
        print(json.dumps(scale_one(Path(args.scale_one), args.what, args.queries, None)))
        return

    from stagebench.execute import package_versions

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    jpath = out / "perf.json"
    figures = json.loads(jpath.read_text()) if jpath.is_file() else {}
    if args.render_only:
        scaling_plot(figures["scaling"], out / "perf_scaling.png")
        (out / "perf.md").write_text(markdown(figures))
        print(f"rewrote {out}/perf.md and perf_scaling.png from perf.json")
        return
    sections = args.sections.split(",")
    here = machine_here()
    if set(ap.get_default("sections").split(",")) <= set(sections):
        figures.update({"machine": here, "packages": package_versions(), "repeats": args.repeats})
    else:  # some sections re-measured: the page's machine stays the one of the whole run; these name their own
        log("sections re-measured on", here)
    embedded = {"bm25", "cross_encoder", "precision", "precision-ce", "dense", "precision-rule", "limits"}
    ds = load(args.data) if embedded & set(sections) else None  # the sections that read the embedded catalog
    root = Path(args.scale_root)
    if "bm25" in sections:
        figures["bm25"] = {"embedded": bm25_section(ds, args.repeats, 50)}
        log("bm25 embedded", figures["bm25"]["embedded"])
        big = load(ensure_catalog(args.bm25_big, root), max_queries=200)
        figures["bm25"][f"generated_{args.bm25_big // 1000}k"] = bm25_section(big, args.repeats, 20)
        log(f"bm25 {args.bm25_big // 1000}k", figures["bm25"][f"generated_{args.bm25_big // 1000}k"])
        del big
    if "cross_encoder" in sections:
        figures["cross_encoder"] = cross_encoder_section(ds, args.repeats, args.ce_queries, 50, root / "ce-fp32-reference")
        log("cross_encoder", figures["cross_encoder"])
    if "precision" in sections or "precision-ce" in sections or "dense" in sections:
        parts = (("dense", "cross_encoder") if "precision" in sections else
                 tuple(p for p, sec in (("dense", "dense"), ("cross_encoder", "precision-ce")) if sec in sections))  # fmt: skip
        figures["precision"] = precision_section(ds, root, parts, figures.get("precision"),
                                                 tuple(w for w in args.precision_ce_paths.split(",") if w))  # fmt: skip
    if "precision-rule" in sections:
        figures["precision_rule"] = precision_rule_section(ds, depth=args.rule_depth, only=tuple(x for x in args.rule_collections.split(",") if x),
                                                           paths=tuple(args.rule_paths.split(",")))  # fmt: skip
    if "limits" in sections:
        figures["limits"] = perf_limits.limits_section(ds, root)
        log("limits", figures["limits"])
    if "latency" in sections:
        figures["latency"] = latency_section(Path(args.latency_config), root, args.latency_queries)
    if "scaling" in sections:
        sizes = [int(x) for x in args.bm25_sizes.split(",") if x]
        dsz = [int(x) for x in args.dense_sizes.split(",") if x]
        figures["scaling"] = scaling_section(sizes, dsz, root, args.queries)
        scaling_plot(figures["scaling"], out / "perf_scaling.png")
    if "catalog" in sections:
        cs = [int(x) for x in args.catalog_sizes.split(",") if x]
        figures["catalog"] = catalog_section(cs, root, args.queries, figures.get("catalog"))
    if "index" in sections:
        figures.setdefault("index", {})[str(args.index_size)] = {
            **index_section(args.index_size, root, args.index_queries, args.index_latency_queries, args.index_batch,
                            args.index_model, args.index_precision, args.index_max_length), "machine": {**here, "gpu": gpu_name()}}  # fmt: skip
    jpath.write_text(json.dumps(figures, indent=2) + "\n")
    if all(k in figures for k in ("bm25", "cross_encoder", "precision", "scaling")):
        (out / "perf.md").write_text(markdown(figures))
    print(f"written to {out}/perf.json" + (" and perf.md" if (out / "perf.md").is_file() else ""))


if __name__ == "__main__":
    main()
