"""The judge on a run: it grades the holes in every stage's top ``depth`` and a sample of judged pairs
(:mod:`stagebench.judge`), inside ``stagebench run`` (a config's ``judge:`` section) or on a finished
results folder (``stagebench judge RUN_DIR``, :func:`stagebench.api.judging.judge_folder`) without running a
stage again.

The judge's grades are a file of the folder (``judge/judgments.tsv``, in the manifest with its
digest), and its record - identity, settings, pairs, parse health, tokens, seconds - is the
manifest's ``judge``; everything else (the filled qrels, the judge-filled stage table, the
agreement) is computed from those by :func:`stagebench.report.write.render`, like every table.
The judging round that follows (plan, worksheets, judgments back, incompleteness) is
:mod:`stagebench.judgments`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from stagebench.cache import Cache
from stagebench.data import LOADERS, Dataset, DatasetConfig
from stagebench.errors import DataError, StagebenchError
from stagebench.judge.ask import Judge, JudgeParams
from stagebench.judge.rules import RULES, RulesJudge
from stagebench.judge.scale import scale_for
from stagebench.judgments.pool import HOLE, SAMPLE, Judgment, judgments_tsv, pool, sample
from stagebench.metrics import scored_query_ids
from stagebench.record import DatasetRecord, JudgeRecord
from stagebench.results.folder import RunFolder
from stagebench.runs import Run
from stagebench.runtime.engine import LocalEngine

log = logging.getLogger("stagebench")


def make_judge(params: JudgeParams, dataset: DatasetConfig) -> Judge | RulesJudge:
    """The judge ``params`` describe: an LLM (:class:`Judge`) or the generator's rules over the
    dataset the config names (:class:`RulesJudge`)."""
    if params.backend == RULES:
        return RulesJudge(params, dataset.options.path, dataset.options.labels)
    return Judge(params)


def judge_runs(params: JudgeParams, judge: Judge | RulesJudge, ds: Dataset, runs: dict[str, Run], stages: list[str],
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
    asked = judge.grade([(q, d) for q, d, _ in pairs], [(ds.queries[q], ds.doc_text.get(d, "")) for q, d, _ in pairs],
                        scale, cache, LocalEngine())  # fmt: skip
    judgments = [Judgment(q, d, purpose, a.grade, a.status) for (q, d, purpose), a in zip(pairs, asked.answers)]
    o = asked.outcomes
    if isinstance(judge, RulesJudge):
        log.info("%s: %d pairs graded by the generator's rules (nothing asked or cached) [%.1fs]", judge.label,
                 len(pairs), asked.seconds)  # fmt: skip
    else:
        log.info("%s: %d pairs: %d from the cache, %d asked; ok %d, repaired %d, unusable %d, failed %d; %d prompt + "
                 "%d completion tokens [%.1fs]", judge.label, len(pairs), asked.from_cache, len(pairs) - asked.from_cache,
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


def dataset_of(rf: RunFolder, dc: DatasetConfig, who: str) -> Dataset:
    """The dataset a folder's config names, loaded, and refused unless it is the one the folder's runs
    were scored on (corpus and qrels fingerprints): ``who`` needs the same texts. A dataset that is not
    here is one line saying where it was expected and what writes it (the embedded one: ``make data``)."""
    try:
        ds = LOADERS[dc.loader].load(dc.options)
    except DataError as exc:
        path = getattr(dc.options, "path", None)
        how = ("; `make data` (stagebench generate-data --output data/synthetic-esci) writes it" if path and
               Path(path).as_posix().rstrip("/").endswith("data/synthetic-esci") else
               "; put it back where the folder's config names it")  # fmt: skip
        raise StagebenchError(f"{rf.path}: {who} needs the texts of the dataset its runs were scored on, which is not "
                              f"here ({exc}){how}") from None  # fmt: skip
    recorded, here = rf.manifest.dataset, DatasetRecord.from_json(ds.stats())
    if (recorded.fingerprint, recorded.qrels_fingerprint) != (here.fingerprint, here.qrels_fingerprint):
        raise StagebenchError(f"{rf.path}: the dataset its config names ({dc.loader}) is not the one its runs were "
                              f"scored on (its corpus or qrels fingerprint differs); {who} needs the same texts")  # fmt: skip
    return ds
