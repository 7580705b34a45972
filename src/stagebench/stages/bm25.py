"""BM25 retrieval (Okapi BM25 as rank-bm25's ``BM25Okapi`` defines it).

Two backends compute the same scores:

* ``sparse`` (default): the whole corpus as a scipy CSR matrix of precomputed BM25
  term weights; a batch of queries is one sparse matrix product. Fast.
* ``rank_bm25``: the reference library, one ``get_scores`` call per query. Slow, kept
  so the fast backend can be checked against it (``tests/stages/test_bm25.py``).

BM25Okapi, as rank-bm25 implements it:
  idf(t) = ln((N - n_t + 0.5) / (n_t + 0.5)), and any negative idf is replaced by
  epsilon * mean(idf);
  score(q, d) = sum over query tokens t (repeats count) of
  idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl)).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from stagebench.run import Run, ranked
from stagebench.stages.base import Stage, StageContext
from stagebench.tokenize import Tokenizer


@dataclass
class BM25Params:
    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25
    top_k: int = 1000
    backend: str = "sparse"  # sparse | rank_bm25
    lowercase: bool = True
    stopwords: bool = False
    stemmer: str | None = None
    query_batch: int = 256

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if self.backend not in ("sparse", "rank_bm25"):
            errs.append(("backend", f"must be 'sparse' or 'rank_bm25', got {self.backend!r}"))
        if self.top_k < 1:
            errs.append(("top_k", "must be >= 1"))
        if not 0.0 <= self.b <= 1.0:
            errs.append(("b", "must be in [0, 1]"))
        if self.k1 < 0:
            errs.append(("k1", "must be >= 0"))
        return errs


class SparseBM25:
    """rank-bm25's BM25Okapi, vectorised with scipy.sparse."""

    def __init__(self, corpus_tokens: list[list[str]], k1: float, b: float, epsilon: float) -> None:
        from scipy import sparse

        self.vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        doc_len = np.zeros(len(corpus_tokens), dtype=np.float64)
        for i, toks in enumerate(corpus_tokens):
            doc_len[i] = len(toks)
            for tok, tf in Counter(toks).items():
                j = self.vocab.setdefault(tok, len(self.vocab))
                rows.append(i)
                cols.append(j)
                vals.append(tf)
        n_docs = len(corpus_tokens)
        tf = sparse.csr_matrix(
            (np.asarray(vals, dtype=np.float64), (rows, cols)), shape=(n_docs, len(self.vocab))
        )
        df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=len(self.vocab)).astype(np.float64)
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        # rank-bm25: the epsilon floor uses the mean idf over the vocabulary.
        eps = epsilon * (idf.sum() / len(idf)) if len(idf) else 0.0
        idf = np.where(idf < 0, eps, idf)
        avgdl = doc_len.sum() / n_docs if n_docs else 0.0
        norm = k1 * (1 - b + b * doc_len / avgdl) if avgdl else np.full(n_docs, k1)
        tf = tf.tocoo()
        w = idf[tf.col] * tf.data * (k1 + 1) / (tf.data + norm[tf.row])
        # term-major so a query picks whole rows
        self.weights = sparse.csr_matrix((w, (tf.col, tf.row)), shape=(len(self.vocab), n_docs))
        self.n_docs = n_docs

    def score_batch(self, queries_tokens: list[list[str]]) -> np.ndarray:
        from scipy import sparse

        rows, cols, vals = [], [], []
        for i, toks in enumerate(queries_tokens):
            for tok, c in Counter(toks).items():
                j = self.vocab.get(tok)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
                    vals.append(float(c))
        q = sparse.csr_matrix((vals, (rows, cols)), shape=(len(queries_tokens), len(self.vocab)))
        return np.asarray((q @ self.weights).todense())


def top_k_run(qids: list[str], doc_ids: list[str], scores: np.ndarray, k: int, keep_zero: bool = True) -> Run:
    """Top-k per row of a (queries x docs) score matrix, with the run tie rule.

    Candidates are cut with ``argpartition`` and then ordered by (score desc, docid desc);
    documents tied with the k-th score at the boundary are resolved by the same rule.
    """
    run: Run = {}
    n = scores.shape[1]
    kk = min(k, n)
    doc_arr = np.asarray(doc_ids, dtype=object)
    for qi, qid in enumerate(qids):
        row = scores[qi]
        if kk < n:
            part = np.argpartition(-row, kk - 1)[:kk]
            kth = row[part].min()
            cand = np.nonzero(row >= kth)[0]  # include every doc tied at the boundary
        else:
            cand = np.arange(n)
        if not keep_zero:
            cand = cand[row[cand] > 0]
        run[qid] = dict(ranked({doc_arr[j]: float(row[j]) for j in cand})[:kk])
    return run


class BM25Stage(Stage):
    type_name = "bm25"
    Params = BM25Params

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: BM25Params = self.params
        tok = Tokenizer(lowercase=p.lowercase, stopwords=p.stopwords, stemmer=p.stemmer)
        ds = ctx.dataset
        doc_ids = ds.doc_ids
        corpus_tokens = [tok(t) for t in ds.doc_texts]
        qids = ds.query_ids
        q_tokens = [tok(ds.queries[q]) for q in qids]
        run: Run = {}
        if p.backend == "rank_bm25":
            from rank_bm25 import BM25Okapi

            index = BM25Okapi(corpus_tokens, k1=p.k1, b=p.b, epsilon=p.epsilon)
            for i in range(0, len(qids), p.query_batch):
                batch = q_tokens[i : i + p.query_batch]
                scores = np.vstack([index.get_scores(t) for t in batch])
                run.update(top_k_run(qids[i : i + p.query_batch], doc_ids, scores, p.top_k, keep_zero=False))
        else:
            index = SparseBM25(corpus_tokens, p.k1, p.b, p.epsilon)
            for i in range(0, len(qids), p.query_batch):
                scores = index.score_batch(q_tokens[i : i + p.query_batch])
                run.update(top_k_run(qids[i : i + p.query_batch], doc_ids, scores, p.top_k, keep_zero=False))
        return run

