"""Issue 96: bf16 a batch cannot move - MiniLM-L6 (the dense stage's model) on this CPU at fp32 (the ONNX
export, what ``precision: auto`` runs), torch bf16 autocast (``precision: bf16``, padded to each batch's
longest) and **fixed-shape bf16**: every batch padded to one of a few shapes, ``rows`` texts (dummy rows of
one token fill the last batch of a shape) by a token bucket chosen from each text's own length alone, so a
text's kernels, blocking and reduction order never depend on its batch mates.

For each path and collection (the embedded corpus, Cranfield, the real ESCI rows; the last two skipped when
``../shared/data`` is absent): docs/s over the whole corpus (batch 32, the stage's default), nDCG@10 of the
dense stage alone (queries encoded one at a time, exact search, top 1000) and its change against the fp32
export, and batch invariance by the suite's protocol (30 texts encoded alone, in the whole corpus's batches,
and in the batches of a shuffled corpus: the largest move of an embedding component); for the fixed shapes,
the tokens and rows padded over the texts' own.

Usage (after ``make install`` and ``make data``; a quiet machine: about 10 minutes on 2 cores)::

    .venv/bin/python benchmarks/fixed_shape_bf16.py [--buckets 16,32,48,64,96,128,160,192,256] [--rows 32]
        [--json results/fixed_shape_bf16.json]
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


class FixedShapeBF16:
    """MiniLM-L6 in torch under bf16 autocast, every batch ``rows`` x a token bucket of its texts' own lengths."""

    def __init__(self, buckets: list[int], rows: int, max_length: int = 256) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from stagebench.models.resolve import resolve_model

        path = resolve_model(NAME).path
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.buckets, self.rows, self.max_length = sorted(buckets), rows, max_length
        if self.buckets[-1] < max_length:
            self.buckets.append(max_length)
        self.padded_tokens = self.own_tokens = self.padded_rows = 0

    def bucket(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        torch = self.torch
        ids = self.tok(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        by: dict[int, list[int]] = {}
        for i, x in enumerate(ids):
            by.setdefault(self.bucket(len(x)), []).append(i)
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            for b, members in by.items():
                for s in range(0, len(members), self.rows):
                    part = members[s : s + self.rows]
                    x = np.zeros((self.rows, b), dtype=np.int64)
                    m = np.zeros((self.rows, b), dtype=np.int64)
                    m[:, 0] = 1  # a dummy row holds one token
                    for r, i in enumerate(part):
                        x[r, : len(ids[i])] = ids[i]
                        m[r, : len(ids[i])] = 1
                    self.padded_tokens += self.rows * b
                    self.own_tokens += sum(len(ids[i]) for i in part)
                    self.padded_rows += self.rows - len(part)
                    h = self.model(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(m)).last_hidden_state.float()
                    mk = torch.from_numpy(m).unsqueeze(-1).float()
                    e = torch.nn.functional.normalize((h * mk).sum(1) / mk.sum(1), dim=1).numpy()
                    out[part] = e[: len(part)]
        return out


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buckets", default="16,32,48,64,96,128,160,192,256")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    from stagebench.stages.dense import DenseParams, build_index, search_top_k

    sets = datasets()
    paths = {
        "fp32 (ONNX export; auto)": lambda: stagebench.api.bi_encoder(NAME, device="cpu", precision="fp32", max_length=256),
        "bf16 autocast (torch)": lambda: stagebench.api.bi_encoder(NAME, device="cpu", precision="bf16", max_length=256),
        "fixed-shape bf16 (torch)": lambda: FixedShapeBF16([int(x) for x in args.buckets.split(",")], args.rows),
    }  # fmt: skip
    res: dict = {"cpu_class": cpu_class(), "buckets": args.buckets, "rows": args.rows, "paths": {}}
    for path, make in paths.items():
        enc = make()
        enc.encode(["warm up"] * 64, 32)
        row = res["paths"][path] = {}
        for cname, ds in sets.items():
            if hasattr(enc, "padded_tokens"):
                enc.padded_tokens = enc.own_tokens = enc.padded_rows = 0
            t0 = time.perf_counter()
            emb = enc.encode(ds.doc_texts, 32)
            dt = time.perf_counter() - t0
            cell = row[cname] = {"docs_per_s": round(len(ds.doc_ids) / dt, 1)}
            if hasattr(enc, "padded_tokens"):
                cell["tokens_padded_over_own"] = round(enc.padded_tokens / enc.own_tokens, 3)
                cell["dummy_rows"] = enc.padded_rows
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
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
