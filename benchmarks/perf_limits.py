"""`make perf`'s limits section (issue 83): how close the neural stages run to this machine's limit.

The limit: this machine's measured peak of the one kernel that does nearly all of an encoder's work,
a square GEMM (n = 1024, the best of ``repeats``, every core): fp32 and bf16 in torch, fp32 and
u8 x s8 -> s32 (``MatMulInteger``, the kernel of the per-token INT8 path, VNNI where the CPU has it)
in onnxruntime. The work: a BERT-style encoder's operations on a sequence of T tokens,
L x (8 T H^2 + 4 T H I + 4 T^2 H) (the four projections, the feed-forward pair, the attention's
two products; 2 operations per multiply-add), counted on each text's own tokens - padding to a
batch's longest text is overhead, not work. Achieved = work / seconds; beside it the
seed-equivalent path (fp32 torch through sentence-transformers at its defaults: what a project
without stagebench runs), in the same run on the same texts.

Where the cross-encoder's time goes: onnxruntime's own profile of the stagebench path on the same pairs,
each kernel's time summed by op type and grouped (the INT8 GEMMs, the attention's fp32 products, the
per-token quantisation, layer norms, GELU, softmax, the element-wise rest); from it the INT8 GEMMs'
own rate against the INT8 peak, and the bound Amdahl's law puts on any speed-up of the GEMMs alone.

Run alone: ``python benchmarks/perf_limits.py --output results`` (writes perf_limits.json and
perf_limits.md), or as ``run_perf.py --sections limits``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import stagebench
from stagebench.runtime.devices import cpu_class
from stagebench.runtime.system import machine_info

REPO = Path(__file__).resolve().parents[1]
CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BI = "sentence-transformers/all-MiniLM-L6-v2"


def _best(fn, repeats: int) -> float:
    fn()  # warm: thread pools, packing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def gemm_peaks(n: int = 1024, repeats: int = 10) -> dict:
    """GOP/s of an n x n x n GEMM in each arithmetic the encoders can run."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper

    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    ops = 2.0 * n**3
    out = {}
    try:
        for name, dtype in (("fp32_torch", torch.float32), ("bf16_torch", torch.bfloat16)):
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            out[name] = round(ops / _best(lambda: torch.matmul(a, b), repeats) / 1e9, 3)
    finally:
        torch.set_num_threads(threads)  # the caller's setting back (a test process shares it)

    def session(node, inputs, output_type):
        graph = helper.make_graph([node], "gemm", inputs, [helper.make_tensor_value_info("y", output_type, [n, n])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    f = session(helper.make_node("MatMul", ["a", "b"], ["y"]),
                [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "ab"], TensorProto.FLOAT)  # fmt: skip
    fa, fb = np.random.randn(n, n).astype(np.float32), np.random.randn(n, n).astype(np.float32)
    out["fp32_onnxruntime"] = round(ops / _best(lambda: f.run(None, {"a": fa, "b": fb}), repeats) / 1e9, 3)
    q = session(helper.make_node("MatMulInteger", ["a", "b"], ["y"]),
                [helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n]),
                 helper.make_tensor_value_info("b", TensorProto.INT8, [n, n])], TensorProto.INT32)  # fmt: skip
    qa = np.random.randint(0, 255, (n, n), dtype=np.uint8)
    qb = np.random.randint(-127, 127, (n, n), dtype=np.int8)
    out["int8_onnxruntime"] = round(ops / _best(lambda: q.run(None, {"a": qa, "b": qb}), repeats) / 1e9, 3)
    return {"n": n, "gop_per_s": out}


def encoder_ops(tokens: np.ndarray, layers: int, hidden: int, intermediate: int) -> float:
    """Operations of a BERT-style encoder over sequences of ``tokens`` tokens each (module docstring)."""
    t = tokens.astype(np.float64)
    return float(layers * (8 * t * hidden**2 + 4 * t * hidden * intermediate + 4 * t**2 * hidden).sum())


def _token_counts(tokenizer_json: Path, texts, max_length: int) -> np.ndarray:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_padding()  # the file may pad every text to a fixed length: work is counted on the text's own tokens
    tok.enable_truncation(max_length)
    enc = tok.encode_batch(texts)
    return np.array([len(e.ids) for e in enc])


def _row(path: str, unit: str, n: int, ops: float, seconds: float, peak: str, peaks: dict) -> dict:
    """One path's rate, its operations per second, and their share of the peak of the kernel it runs on."""
    rate = ops / seconds / 1e9
    return {"path": path, f"{unit}_per_s": round(n / seconds, 1), "gop_per_s": round(rate, 1), "peak": peak,
            "of_peak": round(rate / peaks["gop_per_s"][peak], 3)}


#: onnxruntime op types by what they do in the per-token INT8 encoder (the rest: "other")
OP_GROUPS = {
    "INT8 GEMMs": ("MatMulIntegerToFloat", "MatMulInteger", "DynamicQuantizeMatMul"),
    "attention's fp32 products": ("MatMul",),
    "per-token quantisation": ("QuantizeLinear", "DynamicQuantizeLinear", "ReduceMin", "ReduceMax", "Max", "Min",
                               "DequantizeLinear"),
    "layer norms": ("SkipLayerNormalization", "LayerNormalization"),
    "GELU": ("BiasGelu", "Gelu", "FastGelu"),
    "softmax": ("Softmax",),
    "element-wise Mul, Add, Div, Sub": ("Mul", "Add", "Div", "Sub"),
    "layout (Transpose, Reshape, ...)": ("Transpose", "Reshape", "Slice", "Concat", "Gather", "Expand", "Shape",
                                         "Unsqueeze", "Squeeze", "Cast", "Where"),
}  # fmt: skip


def op_time(model, pairs, batch_size: int = 32) -> dict:
    """The cross-encoder ``model`` (an ``OnnxCrossEncoder``) run once over ``pairs`` in a profiling session
    like its own: each op group's share of the kernels' time (:data:`OP_GROUPS`)."""
    import onnxruntime as ort

    sess = model.sess
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = sess.threads, 1
    opts.enable_profiling, opts.profile_file_prefix = True, str(Path(os.environ.get("TMPDIR", "/tmp")) / "stagebench-ort")
    profiled = ort.InferenceSession(str(Path(model.model.path) / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    with sess.running(profiled):  # every stream on the one profiling session (each on one thread, as its own)
        model.predict(pairs, batch_size)
    path = Path(profiled.end_profiling())
    events = json.loads(path.read_text())
    path.unlink()
    by_op: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] = by_op.get(e["args"]["op_name"], 0.0) + e["dur"] / 1e6
    total = sum(by_op.values())
    group_of = {op: g for g, ops in OP_GROUPS.items() for op in ops}
    groups: dict[str, float] = {}
    for op, sec in by_op.items():
        groups[group_of.get(op, "other")] = groups.get(group_of.get(op, "other"), 0.0) + sec
    return {"kernel_seconds": round(total, 3), "streams": f"{sess.streams} x {sess.threads}",
            "shares": {g: round(t / total, 3) for g, t in sorted(groups.items(), key=lambda x: -x[1])}}  # fmt: skip


def limits_section(ds, work: Path, n_queries: int = 40, top_n: int = 20, n_docs: int = 2000, repeats: int = 2) -> dict:
    """The cross-encoder (pairs of BM25's top ``top_n`` for ``n_queries`` queries) and the bi-encoder
    (``n_docs`` products) at ``precision: auto`` against the peaks, and the seed-equivalent paths."""
    import torch
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from stagebench.models.onnx_weights import build_reference_folder
    from stagebench.models.resolve import resolve_model

    torch.set_num_threads(os.cpu_count() or 1)
    peaks = gemm_peaks()
    run = stagebench.stage("bm25", top_k=top_n).apply(ds, cache=False).run
    qids = [q for q in ds.query_ids if run.get(q)][:n_queries]
    pairs = [(ds.queries[q], ds.doc_text[d]) for q in qids for d in run[q]]
    docs = [ds.doc_text[d] for d in ds.doc_ids[:n_docs]]
    out: dict = {"machine": {**machine_info(), "cpu_class": cpu_class()}, "peaks": peaks, "pairs": len(pairs),
                 "docs": len(docs), "max_length": 256}  # fmt: skip

    ce_src = resolve_model(CE)
    ref = build_reference_folder(ce_src.path, work / "ce-fp32-reference")
    cfg = json.loads((Path(ref) / "config.json").read_text())
    toks = _token_counts(Path(ce_src.path) / "tokenizer.json", list(pairs), 256)
    ce_ops = encoder_ops(toks, cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"])
    ours = stagebench.api.cross_encoder(CE, max_length=256)
    t_ours = _best(lambda: ours.predict(pairs, 32), repeats)
    seed = CrossEncoder(str(ref), device="cpu", max_length=256, activation_fn=torch.nn.Identity())
    t_seed = _best(lambda: seed.predict([list(p) for p in pairs], batch_size=32, show_progress_bar=False), repeats)
    ops = op_time(ours, pairs) if hasattr(ours, "sess") else None
    if ops is not None:  # the INT8 GEMMs' own rate: their operations over their own kernel time, the machine's
        gemm = 8 * toks * cfg["hidden_size"] ** 2 + 4 * toks * cfg["hidden_size"] * cfg["intermediate_size"]
        gemm_ops = float(gemm.sum()) * cfg["num_hidden_layers"]
        share = ops["shares"].get("INT8 GEMMs", 0.0)
        # streams run their kernels side by side: the kernels' summed seconds over the streams is the machine's time
        seconds = share * ops["kernel_seconds"] / ours.sess.streams
        rate = gemm_ops / seconds / 1e9 if share else 0.0
        ops.update(gemm_gop_per_s=round(rate, 1), gemm_of_peak=round(rate / peaks["gop_per_s"]["int8_onnxruntime"], 3),
                   bound_if_gemms_free=round(1 / (1 - share), 2) if share < 1 else None)  # fmt: skip
    out["cross_encoder"] = {
        "tokens_mean": round(float(toks.mean()), 1), "gop_per_pair": round(ce_ops / len(pairs) / 1e9, 3), "op_time": ops,
        "stagebench": _row(f"{ours.placement.precision} ({ours.placement.why})", "pairs", len(pairs), ce_ops, t_ours,
                           "int8_onnxruntime", peaks),
        "seed_equivalent": _row("fp32 torch, sentence-transformers CrossEncoder, batch 32", "pairs", len(pairs), ce_ops,
                                t_seed, "fp32_torch", peaks),
    }  # fmt: skip

    bi_src = resolve_model(BI)
    cfg = json.loads((Path(bi_src.path) / "config.json").read_text())
    toks = _token_counts(Path(bi_src.path) / "tokenizer.json", docs, 256)
    bi_ops = encoder_ops(toks, cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"])
    enc = stagebench.api.bi_encoder(BI, max_length=256)
    t_ours = _best(lambda: enc.encode(docs, 32), repeats)
    st = SentenceTransformer(str(bi_src.path), device="cpu")
    st.max_seq_length = 256
    t_seed = _best(lambda: st.encode(docs, batch_size=32, show_progress_bar=False), repeats)
    out["bi_encoder"] = {
        "tokens_mean": round(float(toks.mean()), 1), "gop_per_doc": round(bi_ops / len(docs) / 1e9, 3),
        "stagebench": _row(f"{enc.placement.precision} ({enc.placement.why})", "docs", len(docs), bi_ops, t_ours,
                           "fp32_onnxruntime", peaks),
        "seed_equivalent": _row("fp32 torch, sentence-transformers SentenceTransformer, batch 32", "docs", len(docs),
                                bi_ops, t_seed, "fp32_torch", peaks),
    }  # fmt: skip
    return out


def limits_markdown(x: dict) -> list[str]:
    m, p = x["machine"], x["peaks"]["gop_per_s"]
    lines = [f"Machine: {m.get('cpu')} ({x['machine']['cpu_class']}), {m.get('usable_cores')} cores. "
             f"Peaks, {x['peaks']['n']}^3 GEMM, GOP/s: " + ", ".join(f"{k} {v}" for k, v in p.items()) + ".", "",
             "| model | path | rate | GOP/s | share of its kernel's peak |", "|---|---|---|---|---|"]  # fmt: skip
    for name, unit in (("cross_encoder", "pairs"), ("bi_encoder", "docs")):
        r = x[name]
        for who in ("stagebench", "seed_equivalent"):
            s = r[who]
            lines.append(f"| {name} ({r['tokens_mean']} tokens) | {who}: {s['path']} | {s[f'{unit}_per_s']} {unit}/s | "
                         f"{s['gop_per_s']} | {s['of_peak']:.1%} of {s['peak']} |")  # fmt: skip
    ops = x["cross_encoder"].get("op_time")
    if ops:
        lines += ["", f"Where the stagebench cross-encoder's time goes (onnxruntime's profile, {ops['kernel_seconds']} s of "
                  f"kernels summed over {ops.get('streams', '1 x all')} stream(s) x threads): " + ", ".join(f"{g} {v:.1%}" for g, v in ops["shares"].items()) + f". The INT8 GEMMs alone "
                  f"run at {ops['gemm_gop_per_s']} GOP/s, {ops['gemm_of_peak']:.1%} of the INT8 peak; the rest of the "
                  "graph takes the other share, so even GEMMs taking no time at all would speed the model up at most "
                  f"{ops['bound_if_gemms_free']}x."]  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", default="results")
    ap.add_argument("--data", default="data/synthetic-esci")
    ap.add_argument("--work", default="data/perf-scale")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--docs", type=int, default=2000)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = stagebench.load_config(REPO / "configs/default.yaml").raw["dataset"]
    ds = stagebench.load_dataset({**spec, "path": args.data})
    x = limits_section(ds, Path(args.work), args.queries, n_docs=args.docs)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf_limits.json").write_text(json.dumps(x, indent=2) + "\n")
    (out / "perf_limits.md").write_text("# The neural stages against this machine's limit (make perf)\n\n"
                                        + __doc__.split("\n\n")[1] + "\n\n" + "\n".join(limits_markdown(x)) + "\n")
    print("\n".join(limits_markdown(x)))


if __name__ == "__main__":
    main()
