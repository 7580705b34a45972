"""Run a config: load the dataset, run the stages in order, score them, write results.

Results are written into a hidden sibling folder (``.<name>.partial-<pid>``) that is
renamed to the output folder only once everything (runs, tables, manifest) is written,
so a failed run never leaves a results folder that looks complete.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from stagebench import __version__
from stagebench.config import Config
from stagebench.data import LOADERS, Dataset
from stagebench.errors import StagebenchError
from stagebench.results import render
from stagebench.run import Run, write_trec_qrels, write_trec_run
from stagebench.stages import StageContext, stage_class

log = logging.getLogger("stagebench")

REPORTED_PACKAGES = (
    "stagebench", "numpy", "scipy", "pandas", "pyarrow", "rank-bm25", "pytrec-eval-terrier", "torch",
    "sentence-transformers", "transformers", "faiss-cpu", "onnxruntime", "tokenizers", "datasets",
)  # fmt: skip


@dataclass
class RunResult:
    output: Path
    rows: list[dict]
    runs: dict[str, Run]
    dataset: Dataset
    table_text: str


def load_dataset(config: Config) -> Dataset:
    loader = LOADERS[config.dataset.loader]
    t0 = time.perf_counter()
    ds = loader.load(config.dataset.options)
    for w in ds.warnings:
        log.warning(w)
    log.info(
        "dataset %s: %d documents (corpus scope: %s%s), %d queries, %d judgments [%.1fs]",
        ds.name, len(ds.corpus), ds.corpus_scope,
        " - only judged documents are indexed, which inflates recall" if ds.corpus_scope == "judged" else
        " - the whole catalog is indexed",
        len(ds.queries), sum(len(v) for v in ds.qrels.values()), time.perf_counter() - t0,
    )  # fmt: skip
    return ds


def check_run(run: Run, stage: str, dataset: Dataset) -> None:
    import math

    for qid, docs in run.items():
        if qid not in dataset.queries:
            raise StagebenchError(f"stage {stage}: returned unknown query id {qid!r}")
        for d, s in docs.items():
            if not isinstance(s, float) or math.isnan(s):
                raise StagebenchError(f"stage {stage}: score for query {qid!r} doc {d!r} is {s!r}, not a number")


def package_versions() -> dict[str, str]:
    out = {}
    for p in REPORTED_PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def run_config(config: Config, output: str | Path | None = None) -> RunResult:
    out = Path(output or config.output)
    ds = load_dataset(config)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    if partial.exists():
        shutil.rmtree(partial)
    (partial / "runs").mkdir(parents=True)
    try:
        result = _run_into(config, ds, partial)
        if out.exists():
            shutil.rmtree(out)
        os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    result.output = out
    return result


def _run_into(config: Config, ds: Dataset, folder: Path) -> RunResult:
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    ctx = StageContext(dataset=ds, cache_dir=Path(config.cache_dir))
    runs: dict[str, Run] = {}
    timings = []
    for sc in config.stages:
        cls = stage_class(sc.type, sc.target, sc.name)
        stage = cls(sc.name, sc.params)
        log.info("stage %s (%s%s): running", sc.name, sc.type, f" <- {', '.join(sc.inputs)}" if sc.inputs else "")
        t0 = time.perf_counter()
        run = stage(ctx, [runs[i] for i in sc.inputs])
        dt = time.perf_counter() - t0
        check_run(run, sc.name, ds)
        runs[sc.name] = run
        write_trec_run(run, folder / "runs" / f"{sc.name}.trec", tag=f"{config.name}.{sc.name}")
        depth = max((len(v) for v in run.values()), default=0)
        log.info("stage %s: %d queries, up to %d docs each [%.1fs]", sc.name, len(run), depth, dt)
        timings.append({"name": sc.name, "type": sc.type, "inputs": sc.inputs, "seconds": dt,
                        "reorders_input": cls.reorders_input,
                        "candidate_depth": getattr(sc.params, "top_n", None) if cls.reorders_input else None})  # fmt: skip

    write_trec_qrels(ds.qrels, folder / "qrels.trec")
    manifest = {
        "complete": True,
        "stagebench_version": __version__,
        "config_path": config.path,
        "config": config.raw,
        "evaluation": asdict(config.evaluation),
        "started": started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "dataset": ds.stats(),
        "stages": [{**t, "seconds": round(t["seconds"], 3)} for t in timings],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    rendered = render(folder)
    first = rendered.rows[0]
    log.info("scored %d queries (%d without results in the first stage); tables, plots and report.html written",
             first["queries"], first["queries_without_results"])  # fmt: skip
    return RunResult(output=folder, rows=rendered.rows, runs=runs, dataset=ds, table_text=rendered.text)
