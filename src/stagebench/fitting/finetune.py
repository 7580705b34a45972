"""Fine-tuning a cross-encoder (the kernel behind ``stagebench train-reranker``, like PyTerrier's
``Estimator.fit``).

:func:`fine_tune` is handed a :class:`TrainingData` (training pairs and dev pools, built from a
dataset's train split by :mod:`stagebench.fitting.train`) and a recipe (``training:`` of a config:
loss, epochs, batch size, learning rate, ...). It loads the named model as the base - a bundled
INT8 ONNX model is dequantized to fp32 torch weights first (:mod:`stagebench.models.onnx_weights`);
a bi-encoder such as all-MiniLM-L6-v2 gets a fresh one-logit head - trains it with
sentence-transformers' ``CrossEncoderTrainer``, and reports graded dev nDCG@10 / RR@10
before and after. Saving the model folder is the caller's business.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagebench.runtime.devices import resolve_device
from stagebench.runtime.system import compute_threads
from stagebench.errors import StagebenchError
from stagebench.metrics import evaluate
from stagebench.models.resolve import resolve_model
from stagebench.models.onnx_weights import build_reference_folder
from stagebench.optional import need

log = logging.getLogger("stagebench")


@dataclass
class TrainingData:
    train: list[tuple[str, str, str, float]]  # (qid, query text, doc text, target)
    dev: dict[str, list[tuple[str, float]]]  # dev qid -> [(doc id, target)] candidate pool
    dev_qrels: dict[str, dict[str, int]]
    dev_queries: dict[str, str]
    train_qids: list[str]
    stats: dict
    doc_text: dict[str, str]  # doc id -> indexed text, for the dev pools


@dataclass
class Fitted:
    """A fine-tuned model (a sentence-transformers ``CrossEncoder``) and how it got there."""

    model: Any
    base_origin: str
    dev_before: dict[str, float]
    dev_after: dict[str, float]
    train_seconds: float
    steps: int
    log_history: list


def base_model_folder(model: str, source: str, work: Path) -> tuple[str, str]:
    """A folder (or hub name) sentence-transformers' CrossEncoder can train, and a description."""
    m = resolve_model(model, source)
    if m.backend == "onnx":
        folder = build_reference_folder(m.path, work / "base-fp32")
        return str(folder), f"{m.origin}, INT8 weights dequantized to fp32 for training"
    return m.path, m.origin


def dev_ndcg(model, data: TrainingData, batch_size: int) -> dict[str, float]:
    """Graded nDCG@10 / RR@10 of the model reranking each dev query's pool (stagebench metrics)."""
    run = {}
    for q, pool in data.dev.items():
        if not pool:
            continue
        scores = model.predict([[data.dev_queries[q], data.doc_text[d]] for d, _ in pool], batch_size=batch_size,
                               show_progress_bar=False)  # fmt: skip
        run[q] = {d: float(s) for (d, _), s in zip(pool, scores)}
    ev = evaluate(data.dev_qrels, run, ["nDCG@10", "RR@10"])
    return {k: round(v, 6) for k, v in ev.means.items()}


def fine_tune(base_model: str, source: str, data: TrainingData, recipe: Any, work: Path) -> Fitted:
    """Fine-tune ``base_model`` on ``data`` with ``recipe`` (loss, epochs, batch_size, max_length,
    learning_rate, warmup_ratio, seed, early_stopping_patience); checkpoints go under ``work``."""
    why = "fine-tuning a cross-encoder"
    torch = need("torch", why)
    HFDataset = need("datasets", why).Dataset
    CrossEncoder = need("sentence_transformers", why).CrossEncoder
    ce = need("sentence_transformers.cross_encoder", why)
    evaluation = need("sentence_transformers.cross_encoder.evaluation", why)
    losses = need("sentence_transformers.cross_encoder.losses", why)
    transformers = need("transformers", why)

    base, base_desc = base_model_folder(base_model, source, work)
    device = resolve_device(recipe.device)
    log.info("training: on %s, fp32", device)
    torch.set_num_threads(compute_threads())
    transformers.set_seed(recipe.seed)
    try:
        model = CrossEncoder(base, num_labels=1, max_length=recipe.max_length, device=device)
    except Exception as exc:
        raise StagebenchError(f"training.base_model: cannot load {base_model!r} from {base_desc} "
                              f"({type(exc).__name__}: {exc})") from exc  # fmt: skip
    before = dev_ndcg(model, data, 64) if data.dev else {}
    log.info("training: dev metrics of the base model: %s", before)

    if recipe.loss == "lambda":
        groups: dict[str, list] = {}
        for q, qt, d, y in data.train:
            groups.setdefault(q, [qt, [], []])
            groups[q][1].append(d)
            groups[q][2].append(y)
        train_ds = HFDataset.from_dict({"query": [g[0] for g in groups.values()], "docs": [g[1] for g in groups.values()],
                                        "labels": [g[2] for g in groups.values()]})  # fmt: skip
        loss = losses.LambdaLoss(model)
    else:
        train_ds = HFDataset.from_dict({"query": [x[1] for x in data.train], "passage": [x[2] for x in data.train],
                                        "label": [x[3] for x in data.train]})  # fmt: skip
        loss = losses.BinaryCrossEntropyLoss(model) if recipe.loss == "bce" else losses.MSELoss(model)
    evaluator = None
    patience = recipe.early_stopping_patience
    if data.dev and patience:  # otherwise the dev pools are scored only before and after
        text = data.doc_text
        samples = [{"query": data.dev_queries[q], "positive": [text[d] for d, y in pool if y > 0],
                    "documents": [text[d] for d, _ in pool]} for q, pool in data.dev.items() if pool]  # fmt: skip
        evaluator = evaluation.CrossEncoderRerankingEvaluator(samples, at_k=10, name="dev", always_rerank_positives=True,
                                                              show_progress_bar=False)  # fmt: skip
    steps_per_epoch = math.ceil(len(train_ds) / recipe.batch_size)
    args = ce.CrossEncoderTrainingArguments(
        output_dir=str(work / "checkpoints"), num_train_epochs=recipe.epochs,
        per_device_train_batch_size=recipe.batch_size, learning_rate=recipe.learning_rate,
        warmup_steps=int(recipe.warmup_ratio * steps_per_epoch * recipe.epochs), seed=recipe.seed,
        data_seed=recipe.seed, eval_strategy="epoch" if evaluator else "no", save_strategy="epoch" if patience else "no",
        load_best_model_at_end=bool(patience and evaluator), metric_for_best_model="eval_dev_ndcg@10" if evaluator else None,
        save_total_limit=1, logging_steps=max(1, steps_per_epoch // 10), report_to="none", use_cpu=device == "cpu",
        dataloader_num_workers=0, disable_tqdm=False,
    )  # fmt: skip
    callbacks = [transformers.EarlyStoppingCallback(patience)] if patience and evaluator else []
    trainer = ce.CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds, loss=loss, evaluator=evaluator,
                                     callbacks=callbacks)  # fmt: skip
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    after = dev_ndcg(model, data, 64) if data.dev else {}
    log.info("training: dev metrics after training: %s", after)
    return Fitted(model, base_desc, before, after, seconds, trainer.state.global_step, trainer.state.log_history)
