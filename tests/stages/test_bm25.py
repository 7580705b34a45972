from __future__ import annotations

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from stagebench.data.jsonl import BeirOptions, load_beir
from stagebench.stages.base import StageContext
from stagebench.stages.bm25 import BM25Params, BM25Stage, SparseBM25
from stagebench.tokenize import Tokenizer


def test_sparse_backend_matches_rank_bm25_scores_on_cranfield(cranfield):
    ds = load_beir(BeirOptions(path=str(cranfield)))
    tok = Tokenizer()
    corpus = [tok(t) for t in ds.doc_texts]
    queries = [tok(ds.queries[q]) for q in ds.query_ids[:40]]
    ref = BM25Okapi(corpus, k1=1.2, b=0.75, epsilon=0.25)
    ours = SparseBM25(corpus, k1=1.2, b=0.75, epsilon=0.25)
    got = ours.score_batch(queries)
    want = np.vstack([ref.get_scores(q) for q in queries])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_backends_give_the_same_run(cranfield, tmp_path):
    ds = load_beir(BeirOptions(path=str(cranfield), max_queries=25))
    ctx = StageContext(dataset=ds, cache_dir=tmp_path)
    a = BM25Stage("a", BM25Params(top_k=50, backend="sparse"))(ctx, [])
    b = BM25Stage("b", BM25Params(top_k=50, backend="rank_bm25"))(ctx, [])
    assert a.keys() == b.keys()
    for q in a:
        assert list(a[q]) == list(b[q])
        assert list(a[q].values()) == pytest.approx(list(b[q].values()))


def test_tokenizer_options():
    assert Tokenizer()("Men's RUNNING-shoes, size 10!") == ["men", "s", "running", "shoes", "size", "10"]
    assert Tokenizer(stopwords=True)("the shoes for the run") == ["shoes", "run"]
    assert Tokenizer(stemmer="english")("running shoes") == ["run", "shoe"]
