"""The LLM judge on a run: grade the holes in every stage's top ``depth`` and a sample of judged
pairs (:mod:`stagebench.judge`), inside ``stagebench run`` (a config's ``judge:`` section) or on a
finished results folder (``stagebench judge RUN_DIR``) without running a stage again.

The judge's grades are a file of the folder (``judge/judgments.tsv``, in the manifest with its
digest), and its record - identity, settings, pairs, parse health, tokens, seconds - is the
manifest's ``judge``; everything else (the filled qrels, the judge-filled stage table, the
agreement) is computed from those by :func:`stagebench.report.write.render`, like every table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

from stagebench.cache import Cache, cache_root
from stagebench.config import parse_dataset, parse_judge
from stagebench.data import LOADERS, Dataset
from stagebench.runtime.engine import LocalEngine
from stagebench.errors import StagebenchError
from stagebench.files import atomic_write, check_destination
from stagebench.judge.ask import Judge, JudgeParams
from stagebench.judge.scale import scale_for
from stagebench.metrics import scored_query_ids
from stagebench.params import read_yaml
from stagebench.record import DatasetRecord, JudgeRecord
from stagebench.report.write import Rendered, render
from stagebench.results.folder import RESULTS, RunFolder, write_manifest
from stagebench.results.judged import HOLE, JUDGMENTS, SAMPLE, Judgment, judgments_tsv, pool, sample
from stagebench.runs import Run

log = logging.getLogger("stagebench")


def judge_runs(params: JudgeParams, judge: Judge, ds: Dataset, runs: dict[str, Run], stages: list[str],
               label_names: dict[int, str], cache: Cache | None) -> tuple[JudgeRecord, str]:  # fmt: skip
    """Ask the judge for every pooled hole and the agreement sample: its record and the judgments file."""
    qrels = ds.qrels
    chosen = params.stages or stages
    holes, judged = pool(runs, chosen, qrels, scored_query_ids(qrels), params.depth)
    picked = sample(judged, params.sample, params.sample_seed)
    scale = scale_for(label_names, {g for docs in qrels.values() for g in docs.values()})
    pairs = [(q, d, HOLE) for q, d in holes] + [(q, d, SAMPLE) for q, d in picked]
    log.info("%s: %d unjudged pairs in the top %d of %s (pooled), and %d judged pairs for the agreement (seed %d)",
             judge.label, len(holes), params.depth, ", ".join(chosen), len(picked), params.sample_seed)  # fmt: skip
    asked = judge.ask([(ds.queries[q], ds.doc_text.get(d, "")) for q, d, _ in pairs], scale, cache, LocalEngine())
    judgments = [Judgment(q, d, purpose, a.grade, a.status) for (q, d, purpose), a in zip(pairs, asked.answers)]
    o = asked.outcomes
    log.info("%s: %d pairs: %d from the cache, %d asked; ok %d, repaired %d, unusable %d, failed %d; %d prompt + %d "
             "completion tokens [%.1fs]", judge.label, len(pairs), asked.from_cache, len(pairs) - asked.from_cache,
             o["ok"], o["repaired"], o["unusable"], o["failed"], asked.prompt_tokens, asked.completion_tokens,
             asked.seconds)  # fmt: skip
    backend = judge.backend()
    tokens = asked.prompt_tokens + asked.completion_tokens
    record = JudgeRecord(
        params=asdict(params), identity=judge.identity(),
        scale={g: label for g, label, _ in scale.labels}, depth=params.depth, stages=list(chosen), holes=len(holes),
        sample=len(picked), outcomes=dict(o), from_cache=asked.from_cache, prompt_tokens=asked.prompt_tokens,
        completion_tokens=asked.completion_tokens, retries=asked.retries, model_seconds=round(asked.model_seconds, 3),
        seconds=round(asked.seconds, 3),
        cost=None if params.price_per_1k_tokens is None else round(tokens / 1000 * params.price_per_1k_tokens, 6),
        reproducibility=getattr(backend, "reproducibility", ""),
    )  # fmt: skip
    return record, judgments_tsv(judgments)


def judge_folder(folder: str | Path, config: str | None = None, cache_dir: str | None = None) -> Rendered:
    """``stagebench judge RUN_DIR``: the judge of ``config``'s ``judge:`` section (else of the config
    recorded in the folder) on a finished folder; its stages are not run again. The dataset is
    read as the folder's config names it and must be the one the runs were scored on."""
    rf = RunFolder.open(folder)
    check_destination(rf.path, RESULTS)  # every file in it is ours: nothing else is overwritten
    raw = read_yaml(Path(config)) if config else rf.manifest.config
    where = config or f"{rf.path / 'manifest.json'} (its config)"
    section = raw.get("judge") if isinstance(raw, dict) else None
    if section is None:
        raise StagebenchError(f"{where}: no judge: section; give a config with one (--config FILE; docs/metrics.md#an-llm-judge-for-the-holes)")
    params = parse_judge(section, where, rf.manifest.stage_names)
    dc = parse_dataset(rf.manifest.config.get("dataset"))
    ds = LOADERS[dc.loader].load(dc.options)
    recorded, here = rf.manifest.dataset, DatasetRecord.from_json(ds.stats())
    if (recorded.fingerprint, recorded.qrels_fingerprint) != (here.fingerprint, here.qrels_fingerprint):
        raise StagebenchError(f"{rf.path}: the dataset its config names ({dc.loader}) is not the one its runs were "
                              "scored on (its corpus or qrels fingerprint differs); the judge needs the same texts")  # fmt: skip
    judge = Judge(params)
    judge.preflight()
    cache = Cache(cache_root(cache_dir, raw.get("cache_dir") if isinstance(raw, dict) else None))
    t0 = time.perf_counter()
    record, tsv = judge_runs(params, judge, ds, rf.runs(), rf.manifest.stage_names, rf.manifest.dataset.label_names, cache)
    atomic_write(rf.path / JUDGMENTS, tsv)
    manifest = write_manifest(rf.path, rf.manifest.with_judge(record), [JUDGMENTS])
    rendered = render(rf.path, RunFolder(rf.path, manifest))
    write_manifest(rf.path, manifest, rendered.written)
    log.info("%s: judged in %.1fs; judge/ tables and report.html written", rf.path, time.perf_counter() - t0)
    return rendered
