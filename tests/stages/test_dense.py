"""The dense stage with the real bundled MiniLM model on a small corpus."""

from __future__ import annotations

import logging

import pytest

from stagebench.cache import Cache
from stagebench.data.dataset import Dataset
from stagebench.stages.base import StageContext
from stagebench.stages.dense import DenseParams, DenseStage

pytestmark = pytest.mark.slow  # encodes with a real bi-encoder

DOCS = {
    "sofa1": "Velvet three seater sofa in navy blue",
    "couch2": "Leather loveseat couch, brown",
    "mug1": "Ceramic coffee mug 12 oz, white",
    "pan1": "Cast iron frying pan, 10 inch skillet",
    "shoe1": "Men's running shoes, mesh, size 10",
    "shoe2": "Women's trail trainers for jogging",
}


@pytest.fixture
def ds():
    return Dataset("t", {d: {"text": t} for d, t in DOCS.items()},
                   {"q1": "comfy couch", "q2": "skillet for cooking", "q3": "jogging sneakers"},
                   {"q1": {"sofa1": 3}, "q2": {"pan1": 3}, "q3": {"shoe1": 3}}, "{text}")  # fmt: skip


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_semantic_matches_without_shared_words(ds, tmp_path):
    run = DenseStage("dense", DenseParams(top_k=3))(StageContext(ds, Cache(tmp_path)), [])
    top = {q: max(docs, key=docs.get) for q, docs in run.items()}
    assert top["q1"] in ("sofa1", "couch2")
    assert top["q2"] == "pan1"
    assert top["q3"] in ("shoe1", "shoe2")
    assert all(len(d) == 3 for d in run.values())


def test_embeddings_cached_and_keyed(ds, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="stagebench")
    ctx = StageContext(ds, Cache(tmp_path))
    first = DenseStage("dense", DenseParams(top_k=6))(ctx, [])
    assert "computed corpus embeddings: 6 documents" in caplog.text
    caplog.clear()
    again = DenseStage("dense", DenseParams(top_k=6))(ctx, [])
    assert "cached corpus embeddings" in caplog.text and "computed corpus embeddings" not in caplog.text
    assert again == first
    caplog.clear()
    DenseStage("dense", DenseParams(top_k=6, passage_prefix="passage: "))(ctx, [])  # prefix changes the key
    assert "computed corpus embeddings: 6 documents" in caplog.text
    caplog.clear()
    ds2 = Dataset("t", {d: {"text": t, "other": "x"} for d, t in DOCS.items()}, ds.queries, ds.qrels, "{text} {other}")
    DenseStage("dense", DenseParams(top_k=6))(StageContext(ds2, Cache(tmp_path)), [])  # the template changes the key
    assert "computed corpus embeddings: 6 documents" in caplog.text
    assert len(list((tmp_path / "embeddings").glob("*/embeddings.npy"))) == 3


def test_hnsw_agrees_with_exact_on_small_corpus(ds, tmp_path):
    ctx = StageContext(ds, Cache(tmp_path))
    flat = DenseStage("d", DenseParams(top_k=3))(ctx, [])
    hnsw = DenseStage("d", DenseParams(top_k=3, index="hnsw"))(ctx, [])
    assert {q: list(v) for q, v in flat.items()} == {q: list(v) for q, v in hnsw.items()}


def test_onnx_bi_encoder_bge(ds, tmp_path):
    run = DenseStage("d", DenseParams(model="BAAI/bge-small-en-v1.5", top_k=2,
                                      query_prefix="Represent this sentence for searching relevant passages: "))(
        StageContext(ds, Cache(tmp_path)), [])  # fmt: skip
    assert max(run["q2"], key=run["q2"].get) == "pan1"
