"""A torch cross-encoder (a fine-tuned folder, a hub id) at fp32 on a CPU - what ``precision: auto`` gives it -
runs its ONNX export: the same scores as the torch model, checked when the export is built. Where the check
fails the model runs in torch, the log says why, the stage's record says what ran, and nothing is cached.
Real models (a small DistilBERT, whose forward takes no token types, built here with a seed), real torch,
transformers, sentence-transformers and onnxruntime, through ``stagebench.stage``: the object a run's stage is."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

import stagebench

pytestmark = pytest.mark.slow

TEXT = "sentence-transformers/all-MiniLM-L6-v2"  # the bundled bi-encoder lends its (uncased BERT) vocabulary


@pytest.fixture(scope="module")
def distilbert(tmp_path_factory) -> Path:
    """A 2-layer DistilBERT cross-encoder with random weights (seeded; wide enough initial weights that its
    scores spread) and a fast tokenizer of BERT's uncased vocabulary."""
    import torch
    import transformers

    from stagebench.models.resolve import resolve_model

    folder = tmp_path_factory.mktemp("distilbert")
    torch.manual_seed(5)
    cfg = transformers.DistilBertConfig(dim=64, n_layers=2, n_heads=2, hidden_dim=128, num_labels=1, initializer_range=0.3)
    transformers.DistilBertForSequenceClassification(cfg).save_pretrained(folder)
    vocab = Path(resolve_model(TEXT).path)
    transformers.DistilBertTokenizerFast(tokenizer_file=str(vocab / "tokenizer.json"), vocab_file=str(vocab / "vocab.txt")).save_pretrained(folder)
    return folder


def rerank(folder: Path, dataset, cache: Path):
    """The folder as a ``cross_encoder`` stage over BM25's top 5 of 4 queries, and the torch model's own logits for
    the same pairs (sentence-transformers, no activation)."""
    from sentence_transformers import CrossEncoder
    from torch.nn import Identity

    ds = dataset.subset(dataset.query_ids[:4])
    bm25 = stagebench.stage("bm25", top_k=5).apply(ds, cache=False).run
    ran = stagebench.stage("cross_encoder", model=str(folder), top_n=5, max_length=64, device="cpu").apply(ds, bm25, cache=cache)
    pairs = [(q, d) for q in bm25 for d in bm25[q]]
    torch_scores = CrossEncoder(str(folder), device="cpu", max_length=64).predict(
        [(ds.queries[q], ds.doc_text[d]) for q, d in pairs], activation_fn=Identity())
    return ran, np.array([ran.run[q][d] for q, d in pairs]), np.asarray(torch_scores, dtype=np.float64)


@pytest.fixture(scope="module")
def dataset(small_synthetic):
    return stagebench.load_dataset({"loader": "esci", "path": str(small_synthetic), "split": "test"})


def test_a_torch_cross_encoder_runs_its_checked_onnx_export(distilbert, dataset, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="stagebench")
    ran, got, torch_scores = rerank(distilbert, dataset, tmp_path / "cache")
    placement = ran.record.placement
    assert (placement["precision"], placement["variant"], placement["runtime"]) == ("fp32", "export", "onnxruntime")
    assert "exported to ONNX; probe scores within" in caplog.text
    assert float(np.abs(got - torch_scores).max()) < 1e-4 and np.ptp(torch_scores) > 0.1  # real spread
    (entry,) = (tmp_path / "cache" / "models").iterdir()
    assert json.loads((entry / "variant.json").read_text())["recipe"] == "export"


def test_a_cross_encoder_whose_export_tokenizes_otherwise_runs_in_torch_and_says_so(distilbert, dataset, tmp_path, caplog):
    """The folder's tokenizer_config.json turns lowercasing off, which the tokenizer transformers loads obeys and
    its tokenizer.json alone (what the export runs with) does not: the export is not the model, so the model
    runs in torch at fp32 - the log and the record say so - and no export is cached."""
    cased = tmp_path / "cased"
    shutil.copytree(distilbert, cased)
    cfg = json.loads((cased / "tokenizer_config.json").read_text())
    (cased / "tokenizer_config.json").write_text(json.dumps({**cfg, "do_lower_case": False}))
    caplog.set_level(logging.INFO, logger="stagebench")
    ran, got, torch_scores = rerank(cased, dataset, tmp_path / "cache")
    placement = ran.record.placement
    assert (placement["variant"], placement["runtime"]) == ("the model itself", "torch")
    assert "tokenizes probe inputs unlike the tokenizer the torch model loads" in caplog.text
    assert "it runs in torch at fp32" in caplog.text
    assert float(np.abs(got - torch_scores).max()) < 1e-5
    assert not list((tmp_path / "cache" / "models").glob("*/variant.json"))
