"""Issue 96: bf16 a batch cannot move - MiniLM-L6 (the dense stage's model) on this CPU at fp32 (the ONNX
export, what ``precision: auto`` runs), torch bf16 autocast padded to each batch's longest (what
``precision: bf16`` ran before) and **fixed-shape bf16** (``precision: bf16`` now, :mod:`stagebench.models.shapes`):
every batch padded to one of a few shapes, 32 texts (dummy rows of one token fill a batch) by a token bucket
chosen from each text's own length alone, so a text's kernels, blocking and reduction order never depend on
its batch mates.

For each path and collection (the embedded corpus, Cranfield, the real ESCI rows; the last two skipped when
``../shared/data`` is absent): docs/s over the whole corpus (batch 32, the stage's default), nDCG@10 of the
dense stage alone (queries encoded one at a time, exact search, top 1000) and its change against the fp32
export, and batch invariance by the suite's protocol (30 texts encoded alone, in the whole corpus's batches,
and in the batches of a shuffled corpus: the largest move of an embedding component); for the fixed shapes,
the tokens and rows padded over the texts' own.

The cross-encoder (``--models cross``): the bundled INT8 ms-marco-MiniLM-L-12-v2 at fp32 (its weights
dequantized, onnxruntime), ``int8-token`` (what ``auto`` runs), its dequantized weights in torch at fp32 (what
``auto`` ran for a torch cross-encoder before issue 96), the same torch folder at ``auto`` (exported to ONNX, fp32:
what a torch cross-encoder runs now), under bf16 autocast padded to each batch's longest pair, and at
``precision: bf16`` (the same weights in fixed shapes): pairs/s over pairs sampled from BM25's top 20 of each
collection, the invariance of 30 of them and their logits' largest change against fp32. nDCG@10 of each
path on whole collections is ``make perf``'s precision rule (``benchmarks/run_perf.py --sections precision-rule``).

Usage (after ``make install`` and ``make data``; a quiet machine: about 10 minutes on 2 cores for each
model)::

    .venv/bin/python benchmarks/fixed_shape_bf16.py [--models bi,cross] [--pairs 800] [--cross-paths torch,export] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import stagebench
from stagebench.runtime.devices import cpu_class

REPO = Path(__file__).resolve().parents[1]
NAME = "sentence-transformers/all-MiniLM-L6-v2"


class AutocastLongest:
    """bf16 autocast with every batch padded to its longest text (sentence-transformers' own batching): what
    ``precision: bf16`` ran before the fixed shapes, kept here as the reference it is measured against."""

    def __init__(self, max_length: int = 256) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        from stagebench.models.resolve import resolve_model

        self.torch = torch
        self.st = SentenceTransformer(resolve_model(NAME).path, device="cpu")
        self.st.max_seq_length = max_length

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            emb = self.st.encode(list(texts), batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True)
        e = emb.float().numpy()
        return e / np.linalg.norm(e, axis=1, keepdims=True)


def padding(texts: list[str], max_length: int = 256) -> dict:
    """The fixed shapes' cost: tokens run over the texts' own, and the dummy rows."""
    from transformers import AutoTokenizer

    from stagebench.models.resolve import resolve_model
    from stagebench.models.shapes import ROWS, fixed_batches

    lengths = [len(x) for x in AutoTokenizer.from_pretrained(resolve_model(NAME).path)(list(texts), truncation=True, max_length=max_length)["input_ids"]]
    batches = fixed_batches(lengths, max_length)
    return {"tokens_padded_over_own": round(sum(ROWS * b for b, _ in batches) / sum(lengths), 3),
            "dummy_rows": sum(ROWS - len(part) for _, part in batches)}  # fmt: skip


def datasets() -> dict:
    out = {"embedded": stagebench.load_dataset({"loader": "esci", "path": str(REPO / "data" / "synthetic-esci")})}
    shared = REPO.parent / "shared" / "data"
    for name, spec in (("Cranfield", {"loader": "beir", "path": str(shared / "cranfield")}),
                       ("ESCI rows", {"loader": "esci", "path": str(shared / "esci-real-rows"), "split": None})):  # fmt: skip
        if Path(spec["path"]).exists():
            out[name] = stagebench.load_dataset(spec)
    return out


def invariance(enc, texts: list[str], batch: int) -> float:
    """The largest move of 30 texts' embeddings: alone, in the corpus's batches, in a shuffled corpus's."""
    few = texts[:30]
    alone = np.concatenate([enc.encode([t], 1) for t in few])
    sample = texts[:600]
    together = enc.encode(sample, batch)[:30]
    perm = np.random.default_rng(0).permutation(len(sample))
    shuffled = enc.encode([sample[i] for i in perm], batch)
    back = shuffled[np.argsort(perm)][:30]
    return float(max(np.abs(alone - together).max(), np.abs(back - together).max()))


CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"


class CrossAutocastLongest:
    """The cross-encoder's dequantized weights in torch under bf16 autocast, each batch padded to its longest
    pair (sentence-transformers' own batching): what fixed shapes are measured against."""

    def __init__(self, max_length: int = 256) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        from stagebench.models.resolve import resolve_model
        from stagebench.models.variants import transformers_folder

        self.torch = torch
        folder = transformers_folder(resolve_model(CE), None, "benchmark")
        self.ce = CrossEncoder(folder.path, device="cpu", max_length=max_length, activation_fn=torch.nn.Identity())

    def predict(self, pairs, batch_size: int) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            s = self.ce.predict([list(p) for p in pairs], batch_size=batch_size, activation_fn=torch.nn.Identity(),
                                convert_to_tensor=True, show_progress_bar=False)  # fmt: skip
        return s.float().numpy().astype(np.float64).reshape(len(pairs), -1)[:, 0]


def cross_torch_fp32():
    """The cross-encoder's dequantized weights in torch at fp32, as a torch cross-encoder's ``auto`` ran before issue 96."""
    from stagebench.models.encoders import STCrossEncoder
    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import transformers_folder
    from stagebench.runtime.devices import Placement

    folder = transformers_folder(resolve_model(CE), None, "benchmark")
    return STCrossEncoder(folder, 256, Placement("cpu", "fp32", "benchmark"))


def cross_invariance(model, pairs: list[tuple[str, str]]) -> float:
    """The largest move of 30 pairs' logits: alone, in the sample's batches of 32, in a shuffled sample's."""
    few = pairs[:30]
    alone = np.array([model.predict([p], 1)[0] for p in few])
    together = model.predict(pairs, 32)[:30]
    perm = np.random.default_rng(0).permutation(len(pairs))
    back = model.predict([pairs[i] for i in perm], 32)[np.argsort(perm)][:30]
    return float(max(np.abs(alone - together).max(), np.abs(back - together).max()))


def cross_export():
    """The cross-encoder's dequantized weights as a torch folder at ``precision: auto``: exported to ONNX, fp32."""
    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import transformers_folder

    return stagebench.api.cross_encoder(transformers_folder(resolve_model(CE), None, "benchmark").path, device="cpu", max_length=256)


def cross(sets: dict, sample: int, depth: int, only: tuple[str, ...] = ()) -> dict:
    """The cross-encoder's paths on each collection: pairs/s over ``sample`` (query, BM25 top-``depth``)
    pairs, the invariance of 30 of them (alone, batched, shuffled) and their logits' largest change
    against the fp32 path (the INT8 weights dequantized, onnxruntime). nDCG@10 on whole collections is
    ``make perf``'s precision rule (``benchmarks/run_perf.py --sections precision-rule``). ``only``: the paths whose
    names hold one of these words (the first path, the reference, always runs)."""
    paths = {
        "fp32 (INT8 weights dequantized, onnxruntime)": lambda: stagebench.api.cross_encoder(CE, device="cpu", precision="fp32", max_length=256),
        "int8-token (auto)": lambda: stagebench.api.cross_encoder(CE, device="cpu", precision="int8-token", max_length=256),
        "fp32 in torch (the dequantized weights; a torch cross-encoder's auto before issue 96)": cross_torch_fp32,
        "fp32 export of the torch weights (onnxruntime; a torch cross-encoder's auto)": cross_export,
        "bf16 autocast, padded to the batch's longest": CrossAutocastLongest,
        "bf16 in fixed shapes (precision: bf16)": lambda: stagebench.api.cross_encoder(CE, device="cpu", precision="bf16", max_length=256),
    }  # fmt: skip
    first_path = next(iter(paths))
    paths = {k: v for k, v in paths.items() if k == first_path or not only or any(w in k for w in only)}
    pairs_of = {}
    for cname, ds in sets.items():
        first = stagebench.stage("bm25", top_k=depth).apply(ds, cache=False).run
        texts = dict(zip(ds.doc_ids, ds.doc_texts))
        every = [(ds.queries[q], texts[d]) for q in sorted(first) for d in first[q]]
        pick = np.random.default_rng(1).permutation(len(every))[:sample]
        pairs_of[cname] = [every[i] for i in sorted(pick)]
    out: dict = {}
    ref: dict = {}
    for path, make in paths.items():
        model = make()
        model.predict([("warm up", "a warm-up pair")] * 32, 32)
        row = out[path] = {}
        for cname, pairs in pairs_of.items():
            t0 = time.perf_counter()
            scores = model.predict(pairs, 32)
            dt = time.perf_counter() - t0
            cell = row[cname] = {"pairs_per_s": round(len(pairs) / dt, 1)}
            if path == next(iter(paths)):
                ref[cname] = scores
            else:
                cell["speedup_over_fp32"] = round(cell["pairs_per_s"] / out[next(iter(paths))][cname]["pairs_per_s"], 2)
                cell["max_logit_change"] = round(float(np.abs(scores - ref[cname]).max()), 4)
            if cname == "embedded":
                cell["inv"] = cross_invariance(model, pairs[:600])
            print("cross-encoder", path, cname, cell, flush=True)
    return out


def bi(sets: dict, res: dict) -> None:
    from stagebench.stages.dense import DenseParams, build_index, search_top_k

    paths = {
        "fp32 (ONNX export; auto)": lambda: stagebench.api.bi_encoder(NAME, device="cpu", precision="fp32", max_length=256),
        "bf16 autocast, padded to the batch's longest (bf16 before)": AutocastLongest,
        "bf16 in fixed shapes (precision: bf16)": lambda: stagebench.api.bi_encoder(NAME, device="cpu", precision="bf16", max_length=256),
    }  # fmt: skip
    for path, make in paths.items():
        enc = make()
        enc.encode(["warm up"] * 64, 32)
        row = res["paths"][path] = {}
        for cname, ds in sets.items():
            t0 = time.perf_counter()
            emb = enc.encode(ds.doc_texts, 32)
            dt = time.perf_counter() - t0
            cell = row[cname] = {"docs_per_s": round(len(ds.doc_ids) / dt, 1)}
            if "fixed" in path:
                cell.update(padding(ds.doc_texts))
            qe = np.concatenate([enc.encode([ds.queries[q]], 1) for q in ds.query_ids])
            run = search_top_k(build_index(emb, DenseParams()), qe, ds.query_ids, ds.doc_ids, min(1000, len(ds.doc_ids)))
            cell["ndcg10"] = round(stagebench.evaluate(ds.qrels, run, ["nDCG@10"]).means["nDCG@10"], 4)
            first = res["paths"][next(iter(paths))].get(cname)
            if first is not None and first is not cell:
                cell["ndcg10_change"] = round(cell["ndcg10"] - first["ndcg10"], 4)
                cell["speedup_over_fp32"] = round(cell["docs_per_s"] / first["docs_per_s"], 2)
            if cname == "embedded":
                cell["inv"] = invariance(enc, ds.doc_texts, 32)
            print(path, cname, cell, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--models", default="bi,cross", help="bi (MiniLM-L6, the dense stage's), cross (the cross-encoder's)")
    ap.add_argument("--pairs", type=int, default=800, help="cross: pairs timed a collection (BM25's top 20, sampled)")
    ap.add_argument("--cross-paths", default="", help="cross: only the paths whose names hold one of these comma-separated "
                                                      "words (and the fp32 reference)")
    args = ap.parse_args(argv)
    sets = datasets()
    res: dict = {"cpu_class": cpu_class(), "paths": {}}
    if "bi" in args.models:
        bi(sets, res)
    if "cross" in args.models:
        res["cross_encoder"] = cross(sets, args.pairs, 20, tuple(w for w in args.cross_paths.split(",") if w))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
