from __future__ import annotations

from stagebench.data.jsonl import BeirOptions, load_beir
from stagebench.stages.base import StageContext
from stagebench.stages.bm25 import BM25Params, BM25Stage
from stagebench.analyzer import Tokenizer


def test_index_is_cached_and_reused(tmp_path, cranfield, caplog):
    import logging

    from stagebench.cache import Cache

    caplog.set_level(logging.INFO, logger="stagebench")
    ds = load_beir(BeirOptions(path=str(cranfield), max_queries=10))
    ctx = StageContext(dataset=ds, cache=Cache(tmp_path))
    first = BM25Stage("a", BM25Params(top_k=20))(ctx, [])
    assert "computed BM25 index" in caplog.text
    caplog.clear()
    again = BM25Stage("a", BM25Params(top_k=50))(ctx, [])  # another top_k: same index
    assert "cached BM25 index" in caplog.text and "computed BM25 index" not in caplog.text
    assert {q: list(v)[:20] for q, v in again.items()} == {q: list(v) for q, v in first.items()}
    caplog.clear()
    k1 = BM25Stage("a", BM25Params(top_k=20, k1=0.9, b=0.4))(ctx, [])  # k1 and b weigh the same analysed corpus
    assert "cached BM25 index" in caplog.text and "computed BM25 index" not in caplog.text
    assert k1 == BM25Stage("a", BM25Params(top_k=20, k1=0.9, b=0.4))(StageContext(dataset=ds), [])  # as computed afresh
    assert k1 != first
    caplog.clear()
    BM25Stage("a", BM25Params(top_k=20, stemmer="english"))(ctx, [])  # another analyzer: a new index
    assert "computed BM25 index" in caplog.text


def test_tokenizer_options():
    assert Tokenizer()("Men's RUNNING-shoes, size 10!") == ["men", "s", "running", "shoes", "size", "10"]
    assert Tokenizer(stopwords=True)("the shoes for the run") == ["shoes", "run"]
    assert Tokenizer(stemmer="english")("running shoes") == ["run", "shoe"]


