"""Parity with rank-bm25: the sparse backend's scores and top-k lists against the reference
library, and the shared top-k cut against a brute-force oracle built from rank-bm25's full
score matrix (independent of the top-k code both backends share)."""

from __future__ import annotations

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from stagebench.data.jsonl import BeirOptions, load_beir
from stagebench.stages.base import StageContext
from stagebench.stages.bm25 import BM25Params, BM25Stage, SparseBM25
from stagebench.analyzer import Tokenizer


@pytest.mark.slow
def test_sparse_backend_matches_rank_bm25_scores_on_cranfield(cranfield):
    ds = load_beir(BeirOptions(path=str(cranfield)))
    tok = Tokenizer()
    corpus = [tok(t) for t in ds.doc_texts]
    queries = [tok(ds.queries[q]) for q in ds.query_ids[:40]]
    ref = BM25Okapi(corpus, k1=1.2, b=0.75, epsilon=0.25)
    ours = SparseBM25.build(corpus, k1=1.2, b=0.75, epsilon=0.25)
    got = ours.score_batch(queries)
    want = np.vstack([ref.get_scores(q) for q in queries])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def assert_same_top100(ds, params: dict) -> None:
    ctx = StageContext(dataset=ds)
    a = BM25Stage("a", BM25Params(top_k=100, backend="sparse", **params))(ctx, [])
    b = BM25Stage("b", BM25Params(top_k=100, backend="rank_bm25", **params))(ctx, [])
    assert a.keys() == b.keys() and len(a) == len(ds.queries)
    for q in a:
        assert list(a[q]) == list(b[q]), q  # same documents in the same order
        assert list(a[q].values()) == pytest.approx(list(b[q].values()), rel=1e-12)


@pytest.mark.slow
def test_backends_give_identical_top100_on_cranfield(cranfield):
    assert_same_top100(load_beir(BeirOptions(path=str(cranfield))), {"k1": 1.2, "b": 0.75})  # all 225 queries


@pytest.mark.slow
def test_backends_give_identical_top100_on_the_embedded_dataset(embedded_dataset):
    from stagebench.data.esci import EsciOptions, load_esci

    ds = load_esci(EsciOptions(path=str(embedded_dataset), split="test", max_queries=150,
                               text_template="{title} {brand} {color} {bullet_points}"))  # fmt: skip
    assert len(ds.corpus) == 20000
    assert_same_top100(ds, {"k1": 1.2, "b": 0.75})


def test_top_k_with_ties_at_the_cut_matches_a_brute_force_oracle(tmp_path):
    """Groups of identical documents tie exactly; k cuts through a tie group. The oracle is
    rank-bm25's full score matrix sorted by (score desc, doc id desc), independent of the
    top-k code both backends share."""
    import json
    import random

    from stagebench.runs import ranked

    rng = random.Random(3)
    texts = ["shoe shoe red"] * 12 + ["shoe blue"] * 12 + ["shoe lace green"] * 12 + ["hat"] * 12
    ids = [f"d{n:04d}" for n in rng.sample(range(10000), len(texts))]  # id order unrelated to index order
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                                                   for d, t in zip(ids, texts)))  # fmt: skip
    (tmp_path / "queries.jsonl").write_text('{"_id": "q", "text": "shoe"}\n{"_id": "r", "text": "blue shoe"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("q\td0001\t1\nr\td0002\t1\n")
    ds = load_beir(BeirOptions(path=str(tmp_path)))
    tok = Tokenizer()
    ref = BM25Okapi([tok(t) for t in ds.doc_texts])
    for k in (5, 12, 17, 30):  # inside the first, at the end of the first, inside the second and third group
        for backend in ("sparse", "rank_bm25"):
            run = BM25Stage("b", BM25Params(top_k=k, backend=backend))(StageContext(dataset=ds), [])
            for q in ("q", "r"):
                full = dict(zip(ds.doc_ids, ref.get_scores(tok(ds.queries[q])).tolist()))
                oracle = [d for d, s in ranked({d: s for d, s in full.items() if s > 0})][:k]
                assert [d for d, _ in ranked(run[q])] == oracle, (backend, k, q)
