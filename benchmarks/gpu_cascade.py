"""The default benchmark end to end on a GPU, against the same cascade on the CPU (issue 83, item 3).

A device machine (the ``device`` tool) reaches no network and takes at most 64 MiB of working tree a
call, so ``pack`` writes, here, a kit of what it lacks into ``--kit`` (git-ignored), in two parts of
under 44 MiB each (the tracked tree takes the other 20):

* ``part1``: the dense model, all-MiniLM-L6-v2 from its carrier, its weights rounded to fp16 to travel
  (xz) and restored to fp32 where it runs - the same rounded weights on both sides of the comparison;
* ``part2``: the cross-encoder (the bundled INT8 ONNX carrier, xz), the Python 3.12 wheels the device's
  image lacks (faiss-cpu, PyStemmer, rank-bm25), and ``cpu_reference``: the cascade run here on the CPU
  by ``run --device cpu`` with the same kit (its stage table, per-query figures, seconds and placements).

``run`` unpacks the kit, generates the embedded dataset, and runs ``configs/default.yaml`` with the kit's
models and ``device`` on the two model stages: each stage's seconds and placement (device, precision,
variant, runtime) from the manifest, how many of the 20 served queries ranked exactly as the batch run
(``latency_queries``), each neural model's throughput at several batch sizes, and the stage table and
per-query nDCG@10 against the CPU reference. It writes ``gpu_cascade.json`` and ``gpu_cascade.md``.

Here (about 6 minutes on 2 cores, most of it the CPU reference)::

    python benchmarks/gpu_cascade.py pack --kit .devkit

On the device (two calls within its 30 s warm window: the first leaves part1 in place)::

    run(command="cp -r .devkit/part1 /tmp/part1 && ls /tmp/part1", carry=[".devkit/part1"])
    run(command="python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "
                ".devkit/part2/wheels/*.whl && export PYTHONPATH=/tmp/site:src && "
                "python3 benchmarks/gpu_cascade.py run --kit .devkit --part1 /tmp/part1 --device cuda "
                "--output $OUT", carry=[".devkit/part2"])
"""

from __future__ import annotations

import argparse
import json
import logging
import lzma
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import stagebench  # noqa: E402
from stagebench.models.resolve import resolve_model  # noqa: E402
from stagebench.runtime.system import machine_info  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_perf import gpu_name  # noqa: E402 - beside this script

CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BI = "sentence-transformers/all-MiniLM-L6-v2"
WHEELS = ("faiss-cpu==1.15.1", "PyStemmer==3.1.0", "rank-bm25==0.2.2")
#: the device image's Python (KINDS.md: 3.12)
WHEEL_PYTHON = "3.12"
SERVED = re.compile(r"stage (\S+): (\d+) queries served one at a time, (\d+) ranked exactly as in the batch run")


def _xz(src: Path, dst: Path) -> None:
    with open(src, "rb") as f, lzma.open(dst, "wb", preset=6) as out:
        shutil.copyfileobj(f, out, 1 << 24)


def _unxz(src: Path, dst: Path) -> None:
    with lzma.open(src, "rb") as f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out, 1 << 24)


def pack(kit: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    part1, part2 = kit / "part1", kit / "part2"
    for p in (part1, part2):
        shutil.rmtree(p, ignore_errors=True)
    bi, ce = Path(resolve_model(BI).path), Path(resolve_model(CE).path)
    shutil.copytree(bi, part1 / "bi", ignore=shutil.ignore_patterns("*.safetensors", "README.md", ".gitattributes"))
    half = {k: v.to(torch.float16) for k, v in load_file(str(bi / "model.safetensors")).items()}
    save_file(half, str(part1 / "bi.fp16.safetensors"))
    _xz(part1 / "bi.fp16.safetensors", part1 / "bi.fp16.safetensors.xz")
    (part1 / "bi.fp16.safetensors").unlink()
    shutil.copytree(ce, part2 / "ce", ignore=shutil.ignore_patterns("model.onnx"))
    _xz(ce / "model.onnx", part2 / "ce.model.onnx.xz")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", WHEEL_PYTHON, "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                    "--platform", "manylinux1_x86_64", "-d", str(part2 / "wheels"), *WHEELS], check=True)  # fmt: skip
    reference = part2 / "cpu_reference"
    run_kit(kit, part1, "cpu", reference, work=kit / "work")
    shutil.rmtree(kit / "work", ignore_errors=True)
    for p in (part1, part2):
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        print(f"{p}: {size / 2**20:.1f} MiB")


def unpack(kit: Path, part1: Path, into: Path) -> tuple[Path, Path]:
    """The kit's two models as folders under ``into``: the dense model's fp16 weights restored to fp32."""
    import torch
    from safetensors.torch import load_file, save_file

    bi, ce = into / "all-MiniLM-L6-v2", into / "ms-marco-MiniLM-L-12-v2"
    for p in (bi, ce):
        shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(part1 / "bi", bi)
    _unxz(part1 / "bi.fp16.safetensors.xz", into / "bi.fp16.safetensors")
    save_file({k: v.to(torch.float32) for k, v in load_file(str(into / "bi.fp16.safetensors")).items()},
              str(bi / "model.safetensors"))  # fmt: skip
    (into / "bi.fp16.safetensors").unlink()
    shutil.copytree(kit / "part2" / "ce", ce)
    _unxz(kit / "part2" / "ce.model.onnx.xz", ce / "model.onnx")
    return bi, ce


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _rate(fn, n: int) -> float:
    fn()  # warm: first-call allocations, kernels chosen
    t0 = time.perf_counter()
    fn()
    return round(n / (time.perf_counter() - t0), 1)


def throughput(ds, run, bi: Path, ce: Path, device: str) -> dict:
    """Each neural model alone, warm: docs/s of the bi-encoder over 4,000 products, pairs/s of the
    cross-encoder over the fused run's top 50 of 100 queries, at a few batch sizes (on a CPU: 500
    products, 10 queries, batch 32 - ``make perf`` measures the CPU at length)."""
    gpu = device != "cpu"
    batches = (32, 128, 512) if gpu else (32,)
    docs = [ds.doc_text[d] for d in ds.doc_ids[: 4000 if gpu else 500]]
    qids = [q for q in ds.query_ids if run.get(q)][: 100 if gpu else 10]
    pairs = [(ds.queries[q], ds.doc_text[d]) for q in qids for d in sorted(run[q], key=lambda d: -run[q][d])[:50]]
    out: dict = {"docs": len(docs), "pairs": len(pairs), "bi_encoder_docs_per_s": {}, "cross_encoder_pairs_per_s": {}}
    enc = stagebench.api.bi_encoder(str(bi), device=device, max_length=256)
    out["bi_encoder_path"] = f"{enc.placement.device}, {enc.placement.precision}"
    for b in batches:
        out["bi_encoder_docs_per_s"][b] = _rate(lambda: enc.encode(docs, b), len(docs))
    rer = stagebench.api.cross_encoder(str(ce), device=device, max_length=256)
    out["cross_encoder_path"] = f"{rer.placement.device}, {rer.placement.precision}"
    for b in batches:
        out["cross_encoder_pairs_per_s"][b] = _rate(lambda: rer.predict(pairs, b), len(pairs))
    return out


def run_kit(kit: Path, part1: Path, device: str, output: Path, work: Path) -> dict:
    """The default cascade with the kit's models on ``device`` into ``output`` (see the module docstring)."""
    work.mkdir(parents=True, exist_ok=True)
    output.mkdir(parents=True, exist_ok=True)
    bi, ce = unpack(kit, part1, work / "models")
    data = work / "synthetic-esci"
    if not (data / "shopping_queries_dataset_products.parquet").is_file():
        subprocess.run([sys.executable, "-m", "stagebench", "generate-data", "--output", str(data)], check=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"),
                                                                                       os.environ.get("PYTHONPATH")]))})  # fmt: skip
    config = stagebench.load_config(REPO / "configs" / "default.yaml").raw
    config["dataset"]["path"] = str(data)
    for stage in config["stages"]:
        if stage["type"] in ("dense", "cross_encoder"):
            stage["params"].update(model=str(bi if stage["type"] == "dense" else ce), device=device)
    lines = _Lines()
    logging.getLogger("stagebench").addHandler(lines)
    logging.getLogger("stagebench").setLevel(logging.INFO)
    t0 = time.perf_counter()
    result = stagebench.api.run(config, output=work / "out", cache_dir=str(work / "cache"))
    wall = time.perf_counter() - t0
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    table = json.loads((work / "out" / "stage_table.json").read_text())
    served = {m.group(1): f"{m.group(3)} of {m.group(2)}" for m in map(SERVED.search, lines.lines) if m}
    ds = stagebench.load_dataset(config["dataset"])
    out = {
        "device": device, "machine": {**machine_info(), "gpu": gpu_name()}, "wall_seconds": round(wall, 1),
        "packages": manifest.get("packages", {}),
        "stages": {s["name"]: {"seconds": s["seconds"], "placement": s.get("placement"),
                               "served_exactly": served.get(s["name"])} for s in manifest["stages"]},
        "table": table,
        "throughput": throughput(ds, result.runs["rrf"], bi, ce, device),
    }  # fmt: skip
    shutil.copy(work / "out" / "per_query.csv", output / "per_query.csv")
    (output / "gpu_cascade.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


def compare(out: dict, reference: Path, output: Path) -> dict:
    """The run's stage table and per-query nDCG@10 against the CPU reference's."""
    import pandas as pd

    ref = json.loads((reference / "gpu_cascade.json").read_text())
    rows, ref_rows = ({r["stage"]: r for r in t["table"]} for t in (out, ref))
    metrics = [k for k in next(iter(rows.values())) if isinstance(next(iter(rows.values()))[k], float)]
    diff = {s: {m: round(rows[s][m] - ref_rows[s][m], 6) for m in metrics if m in ref_rows[s]} for s in rows}
    cols = ["stage", "qid", "nDCG@10"]
    a, b = (pd.read_csv(p / "per_query.csv", usecols=cols, dtype={"qid": str}) for p in (output, reference))
    merged = a.merge(b, on=["stage", "qid"], suffixes=("", "_cpu"))
    moved = merged[(merged["nDCG@10"] - merged["nDCG@10_cpu"]).abs() > 1e-9]
    per_stage = {s: int((moved["stage"] == s).sum()) for s in rows}
    return {"table_minus_cpu": diff, "queries_whose_ndcg10_moved": per_stage, "queries": int(len(merged) / max(1, len(rows)))}


def markdown(out: dict, ref: dict, cmp: dict) -> str:
    def where(s: dict) -> str:
        p = s.get("placement") or {}
        return f"{p.get('device')}, {p.get('precision')}, {p.get('variant')}, {p.get('runtime')}" if p else "-"

    here = out["machine"].get("gpu") or f"{out['machine'].get('cpu')} ({out['device']})"
    lines = [f"# The default cascade on {here}, against the CPU reference (issue 83)", "",
             f"This run: {out['wall_seconds']} s wall on {here}; the CPU reference (`pack`, the same kit): "
             f"{ref['wall_seconds']} s on {ref['machine'].get('cpu')}, {ref['machine'].get('usable_cores')} cores.", "",
             "| stage | seconds | CPU seconds | placement | CPU placement | served = batch | nDCG@10 | CPU nDCG@10 | "
             "most any measure moved | queries whose nDCG@10 moved |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    rows, ref_rows = ({r["stage"]: r for r in t["table"]} for t in (out, ref))
    for name, s in out["stages"].items():
        moved = max((abs(v) for v in cmp["table_minus_cpu"].get(name, {}).values()), default=0.0)
        lines.append(f"| {name} | {s['seconds']} | {ref['stages'][name]['seconds']} | {where(s)} | "
                     f"{where(ref['stages'][name])} | {s['served_exactly'] or '-'} | {rows[name]['nDCG@10']:.4f} | "
                     f"{ref_rows[name]['nDCG@10']:.4f} | {moved:.6f} | "
                     f"{cmp['queries_whose_ndcg10_moved'].get(name, '-')} of {cmp['queries']} |")  # fmt: skip
    t = out["throughput"]
    lines += ["", f"Each model alone, warm ({t['docs']} products; {t['pairs']} pairs of the fused run's top 50): "
              f"bi-encoder ({t['bi_encoder_path']}) "
              + ", ".join(f"batch {b}: {v} docs/s" for b, v in t["bi_encoder_docs_per_s"].items())
              + f"; cross-encoder ({t['cross_encoder_path']}) "
              + ", ".join(f"batch {b}: {v} pairs/s" for b, v in t["cross_encoder_pairs_per_s"].items()) + ".", "",
              "A stage whose placement differs from the CPU's (the cross-encoder: int8-token on a CPU, its weights "
              "dequantized at fp32 on a GPU) moves by that precision's change, not by the device's.", "",
              f"Packages: {json.dumps(out.get('packages', {}))}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pack", help="write the kit here: models, wheels and the CPU reference run")
    p.add_argument("--kit", default=".devkit")
    r = sub.add_parser("run", help="run the cascade with the kit on --device and compare it with the CPU reference")
    r.add_argument("--kit", default=".devkit")
    r.add_argument("--part1", default=None, help="where part1 is (default: KIT/part1, else /tmp/part1)")
    r.add_argument("--device", default="cuda")
    r.add_argument("--output", required=True)
    r.add_argument("--work", default="/tmp/stagebench-gpu-cascade")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    kit = Path(args.kit)
    if args.verb == "pack":
        pack(kit)
        return
    output = Path(args.output)
    part1 = next((p for p in (args.part1, kit / "part1", "/tmp/part1") if p and (Path(p) / "bi").is_dir()), None)
    if part1 is None:
        sys.exit(f"no part1 of the kit at {args.part1 or kit / 'part1'} or /tmp/part1 (see --help)")
    out = run_kit(kit, Path(part1), args.device, output, Path(args.work))
    reference = kit / "part2" / "cpu_reference"
    ref = json.loads((reference / "gpu_cascade.json").read_text())
    cmp = compare(out, reference, output)
    (output / "gpu_cascade.json").write_text(json.dumps({**out, "against_cpu": cmp}, indent=2, default=str) + "\n")
    (output / "gpu_cascade.md").write_text(markdown(out, ref, cmp))
    print((output / "gpu_cascade.md").read_text())


if __name__ == "__main__":
    main()
