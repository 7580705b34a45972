"""Fine-tune a cross-encoder reranker on a dataset's train split (`stagebench train-reranker`).

A config's ``training:`` section says what to train; its ``dataset:`` says the data (the
train split is loaded with the same loader options, only ``split`` replaced) and its
``stages:`` name the first stage that mines hard negatives::

    training:
      base_model: cross-encoder/ms-marco-MiniLM-L-12-v2   # anything the resolver loads
      output: models/esci-ce-minilm-l12                   # a model folder + model card
      split: train
      max_queries: 600            # train queries used (after the dev ones are set aside)
      dev_queries: 100            # held out from the train split, for dev metrics / early stopping
      negatives: {judged: true, from_stage: bm25, per_query: 8, depth: 50}
      labels: {E: 1.0, S: 0.1, C: 0.01, I: 0.0}   # grade name (or grade) -> target
      unjudged_label: 0.0         # target of mined negatives nobody judged
      loss: bce                   # bce (pointwise) | mse (pointwise regression) | lambda (listwise LambdaLoss)
      epochs: 1
      batch_size: 16
      max_length: 96
      learning_rate: 2.0e-5
      seed: 12

Data separation: only the ``split`` queries are loaded for training - the test split's
queries and judgments are never read by this module (``tests/fitting/test_train.py`` checks it).
Bundled INT8 ONNX models (the offline MS MARCO MiniLM) are dequantized to fp32 torch
weights first (:mod:`stagebench.models.onnx_weights`); a bi-encoder such as all-MiniLM-L6-v2
gets a fresh one-logit head.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

from stagebench.cache import Cache, cache_root
from stagebench.config import NegativesConfig, TrainingConfig
from stagebench.data import LOADERS
from stagebench.errors import ConfigError, DataError, StagebenchError
from stagebench.execute import context, make_stage, run_in
from stagebench.files import (
    STAGING_MARK, atomic_write, check_destination, inventory, remove_staging, staging, swap_in,
)
from stagebench.fitting.finetune import TrainingData, fine_tune
from stagebench.record import MODEL, TRAINING_RECORD
from stagebench.runs import ranked_ids

log = logging.getLogger("stagebench")


# --------------------------------------------------------------------------- data


def target_for(grade: int, label_names: dict[int, str], mapping: dict[str, float]) -> float | None:
    name = label_names.get(grade)
    if name is not None and name in mapping:
        return mapping[name]
    return mapping.get(str(grade))


def build_training_data(config, t: TrainingConfig, cache=None) -> tuple[TrainingData, Any]:
    """Load the train split, split off dev queries, map labels, mine hard negatives."""

    opts = config.dataset.options
    if not hasattr(opts, "split"):
        raise ConfigError(f"{config.path}: training: loader {config.dataset.loader!r} has no split option")
    train_opts = dataclasses.replace(opts, split=t.split, max_queries=None) if hasattr(opts, "max_queries") else \
        dataclasses.replace(opts, split=t.split)  # fmt: skip
    try:
        ds = LOADERS[config.dataset.loader].load(train_opts)
    except DataError as exc:
        raise ConfigError(f"{config.path}: training.split: split {t.split!r} has no queries or cannot be loaded ({exc})") \
            from None
    if not ds.queries:
        raise ConfigError(f"{config.path}: training.split: split {t.split!r} has no queries in {ds.source or ds.name} "
                          "(after the dataset's locale and version filters)")  # fmt: skip
    names = ds.label_names or {}
    unmapped: dict[int, int] = {}
    for docs in ds.qrels.values():
        for g in docs.values():
            if target_for(g, names, t.labels) is None:
                unmapped[g] = unmapped.get(g, 0) + 1
    if unmapped:
        desc = ", ".join(f"{names.get(g, g)!s} (grade {g}): {n} judgments" for g, n in sorted(unmapped.items()))
        raise ConfigError(f"{config.path}: training.labels: no target for {desc}; mapping has {sorted(t.labels)}")

    qids = sorted(ds.queries)
    rng = random.Random(t.seed)
    rng.shuffle(qids)
    dev_ids = sorted(qids[: t.dev_queries])
    train_ids = sorted(qids[t.dev_queries:])
    if t.max_queries is not None:
        train_ids = train_ids[: t.max_queries]
    if not train_ids:
        raise ConfigError(f"{config.path}: training.dev_queries: {t.dev_queries} dev queries leave no train queries "
                          f"(the split has {len(qids)})")  # fmt: skip
    keep = set(train_ids) | set(dev_ids)
    ds = ds.subset(keep)

    mined: dict[str, list[str]] = {}
    n = t.negatives
    if n.from_stage and n.per_query > 0:
        mined = mine_negatives(config, ds, n, cache)
    text = ds.doc_text
    train, dev = [], {}
    counts = {"judged": 0, "mined": 0, "skipped_missing_docs": 0}
    for q in sorted(keep):
        pool: list[tuple[str, float]] = []
        if n.judged:
            for d, g in sorted(ds.qrels.get(q, {}).items()):
                if d not in text:
                    counts["skipped_missing_docs"] += 1
                    continue
                pool.append((d, float(target_for(g, names, t.labels))))  # type: ignore[arg-type]
        judged = set(ds.qrels.get(q, {}))
        cands = [d for d in mined.get(q, []) if d not in judged][n.skip_top : n.depth]
        qrng = random.Random(f"{t.seed}:{q}")
        picks = qrng.sample(cands, min(n.per_query, len(cands)))
        pool += [(d, t.unjudged_label) for d in sorted(picks)]
        if q in dev_ids:
            dev[q] = pool
        else:
            counts["judged"] += sum(1 for d, _ in pool if d in judged)
            counts["mined"] += sum(1 for d, _ in pool if d not in judged)
            train += [(q, ds.queries[q], text[d], y) for d, y in pool]
    stats = {"split": t.split, "split_queries": len(qids), "train_queries": len(train_ids), "dev_queries": len(dev_ids),
             "train_pairs": len(train), **counts, "dataset": ds.source or ds.name,
             "labels": {str(k): v for k, v in t.labels.items()}}  # fmt: skip
    data = TrainingData(train, dev, {q: ds.qrels.get(q, {}) for q in dev_ids}, {q: ds.queries[q] for q in dev_ids},
                        train_ids, stats, ds.doc_text)  # fmt: skip
    return data, ds


def mine_negatives(config, ds, n: NegativesConfig, cache) -> dict[str, list[str]]:
    """Run the named first stage over the train+dev queries (through the stage cache)."""

    sc = next(s for s in config.stages if s.name == n.from_stage)
    stage = make_stage(sc)
    ran = run_in(sc, stage, context(sc, ds, cache), [], [])
    run = ran.run
    log.info("training: hard negatives from stage %s over %d train+dev queries (%s)", sc.name, len(ds.queries),
             ran.record.status)  # fmt: skip

    return {q: ranked_ids(docs) for q, docs in run.items()}


def run_training(config, output: str | None = None, cache=None) -> dict:
    """Build the training data, fine-tune the base cross-encoder on it (:func:`~stagebench.fitting.finetune.fine_tune`), save
    the model folder with a model card, and return the training report."""
    t: TrainingConfig = config.training
    if t is None:
        raise ConfigError(f"{config.path}: no training: section (see docs/training.md)")
    cache = cache or Cache(cache_root(None, config.cache_dir))
    out = Path(output or t.output)
    check_destination(out, MODEL)
    t0 = time.perf_counter()
    data, _ = build_training_data(config, t, cache)
    log.info("training data: %s", json.dumps(data.stats))
    tmp = staging(out)
    try:
        work = tmp / WORK
        work.mkdir()
        try:
            fitted = fine_tune(t.base_model, t.source, data, t, work)
        except StagebenchError as exc:
            raise StagebenchError(f"{config.path}: {exc}") from exc
        shutil.rmtree(work)
        fitted.model.save_pretrained(str(tmp))
        report = {
            "base_model": t.base_model, "base_model_origin": fitted.base_origin, "config": config.path,
            "training": json.loads(json.dumps(dataclasses.asdict(t), default=str)), "data": data.stats,
            "dev_before": fitted.dev_before, "dev_after": fitted.dev_after, "train_seconds": round(fitted.train_seconds, 1),
            "total_seconds": round(time.perf_counter() - t0, 1), "steps": fitted.steps, "log_history": fitted.log_history,
        }  # fmt: skip
        atomic_write(tmp / "README.md", model_card(report))
        report["files"] = inventory(tmp, leave_out={TRAINING_REPORT, STAGING_MARK})
        atomic_write(tmp / TRAINING_REPORT, json.dumps(report, indent=2, default=str) + "\n")
        check_destination(out, MODEL)  # it may have changed while training ran
        swap_in(tmp, out)
    except BaseException:
        remove_staging(tmp)
        raise
    report["output"] = str(out)
    return report


TRAINING_REPORT = TRAINING_RECORD


WORK = ".work"  # checkpoints while training, inside the staging folder




def model_card(r: dict) -> str:
    t, d = r["training"], r["data"]
    lines = [
        f"# Cross-encoder reranker fine-tuned by stagebench from {r['base_model']}", "",
        f"Base: {r['base_model_origin']}. Config: `{r['config']}`.", "",
        "## Data", "",
        f"- {d['dataset']}, split `{d['split']}` ({d['split_queries']} queries): {d['train_queries']} train queries, "
        f"{d['dev_queries']} dev queries held out of the same split. No test-split query or judgment is read.",
        f"- {d['train_pairs']} training pairs: {d['judged']} judged, {d['mined']} mined hard negatives "
        f"(stage `{t['negatives']['from_stage']}`, {t['negatives']['per_query']} per query from its top "
        f"{t['negatives']['depth']} unjudged, target {t['unjudged_label']}).",
        f"- Label targets: {d['labels']}.", "",
        "## Recipe", "",
        f"- loss `{t['loss']}`, {t['epochs']} epoch(s), batch {t['batch_size']}, max_length {t['max_length']}, "
        f"learning rate {t['learning_rate']}, warmup {t['warmup_ratio']}, seed {t['seed']}; {r['steps']} steps in "
        f"{r['train_seconds']} s on CPU.", "",
        "## Dev metrics (graded nDCG@10 / RR@10 reranking each dev query's pool)", "",
        f"- before: {r['dev_before']}", f"- after: {r['dev_after']}", "",
        "Full details: `stagebench_training.json`.", "",
    ]  # fmt: skip
    return "\n".join(lines)
