"""BM25 retrieval (Okapi BM25 as rank-bm25's ``BM25Okapi`` defines it).

Two backends compute the same scores:

* ``sparse`` (default): the whole corpus as a scipy CSR matrix of precomputed BM25
  term weights; a batch of queries is one sparse matrix product. Fast.
* ``rank_bm25``: the reference library, one ``get_scores`` call per query. Slow, kept
  so the fast backend can be checked against it (``tests/parity/test_rank_bm25.py``).

BM25Okapi, as rank-bm25 implements it:
  idf(t) = ln((N - n_t + 0.5) / (n_t + 0.5)), and any negative idf is replaced by
  epsilon * mean(idf);
  score(q, d) = sum over query tokens t (repeats count) of
  idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl)).
"""

from __future__ import annotations

import json
import logging
import os
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import Stemmer
from rank_bm25 import BM25Okapi
from scipy import sparse

from stagebench.cache import code_identity, memo
from stagebench.params import INDEX, RUN, Fraction, NonNegativeFloat, PositiveInt, affecting, param
from stagebench.runs import Run, ranked
from stagebench.stages.base import Server, Stage, StageContext
from stagebench.analyzer import Tokenizer
from stagebench.runtime.progress import progress

log = logging.getLogger("stagebench")


@dataclass
class BM25Params:
    # the weights and the search: the run only (trials over k1 and b analyse the corpus once)
    k1: NonNegativeFloat = param(1.5, "term-frequency saturation", affects=(RUN,))
    b: Fraction = param(0.75, "document-length normalisation (0: none, 1: full)", affects=(RUN,))
    epsilon: NonNegativeFloat = param(0.25, "a negative idf is replaced by epsilon x the mean idf (rank-bm25's rule)",
                                      affects=(RUN,))  # fmt: skip
    top_k: PositiveInt = param(1000, "documents kept per query (ties at the cut by doc id)", affects=(RUN,))
    backend: Literal["sparse", "rank_bm25"] = param("sparse", "sparse: scipy matrix product (fast); rank_bm25: the "
                                                    "reference library", affects=(RUN,))  # fmt: skip
    # the analyser: the run and the cached index (the analysed corpus)
    lowercase: bool = param(True, "lowercase before tokenizing")
    stopwords: bool = param(False, "drop English stopwords")
    stemmer: str | None = param(None, "a PyStemmer (Snowball) language, e.g. english")
    tokens: Literal["letters_digits", "word", "whitespace"] = param("letters_digits", "how text is cut: runs of letters "
                                                                   "and digits; word: Python's \\w+; whitespace: str.split()")  # fmt: skip
    query_batch: PositiveInt = param(256, "queries per sparse product (capped so a score block stays under 64 MB)",
                                    affects=())  # fmt: skip
    threads: PositiveInt | None = param(None, "sparse backend: query-batch threads (null: all cores)", affects=())

    def validate(self) -> list[tuple[str, str]]:
        if self.stemmer is not None and self.stemmer not in Stemmer.algorithms():
            return [("stemmer", f"unknown stemmer {self.stemmer!r} (PyStemmer has: {', '.join(Stemmer.algorithms())})")]
        return []


class TermCounts:
    """The analysed corpus: a doc-major CSR matrix of term frequencies and the vocabulary - what
    the analyzer params decide, and nothing of k1, b or epsilon. A grid over those (``stagebench
    tune``) weighs one cached TermCounts again per trial instead of tokenising the corpus again.
    Building it keeps no per-token Python objects: token ids go into one int32 array, and CSR
    construction sums the duplicates into tf."""

    def __init__(self, tf, vocab: dict[str, int]) -> None:
        self.tf = tf  # scipy.sparse.csr_matrix, documents x vocabulary, float64 counts
        self.vocab = vocab
        self.n_docs = tf.shape[0]

    @classmethod
    def build(cls, corpus_tokens: Iterable[list[str]]) -> TermCounts:
        vocab: dict[str, int] = {}
        ids = array("i")
        lengths = array("l")
        for toks in corpus_tokens:
            ids.extend([vocab.setdefault(t, len(vocab)) for t in toks])
            lengths.append(len(toks))
        n_docs, n_terms = len(lengths), len(vocab)
        lens = np.frombuffer(lengths, dtype=np.int64) if n_docs else np.zeros(0, dtype=np.int64)
        indptr = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        term_ids = np.frombuffer(ids, dtype=np.int32) if len(ids) else np.zeros(0, dtype=np.int32)
        # doc-major counts; duplicates (a term twice in a doc) are summed into tf
        tf = sparse.csr_matrix((np.ones(len(term_ids), dtype=np.float64), term_ids, indptr), shape=(n_docs, n_terms))
        tf.sum_duplicates()
        return cls(tf, vocab)

    # ---------------------------------------------------------------- cache entry files
    def save(self, folder: Path) -> None:
        sparse.save_npz(folder / "counts.npz", self.tf, compressed=False)
        (folder / "vocab.json").write_text(json.dumps(list(self.vocab)), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> TermCounts:
        terms = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        return cls(sparse.load_npz(folder / "counts.npz").tocsr(), {t: i for i, t in enumerate(terms)})


class SparseBM25:
    """rank-bm25's BM25Okapi, vectorised with scipy.sparse.

    The index is one term-major CSR matrix of precomputed BM25 term weights
    ``w(t, d) = idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))``, so a batch
    of queries is one sparse product ``Q @ W`` (Q holds query-term counts, as rank-bm25
    adds a repeated query term twice); the weights are computed from :class:`TermCounts`.
    Memory: 12 bytes per (term, document) pair (float64 weight + int32 doc id), plus the
    vocabulary.
    """

    def __init__(self, weights, vocab: dict[str, int]) -> None:
        self.weights = weights  # scipy.sparse.csr_matrix, vocabulary x documents
        self.vocab = vocab
        self.n_docs = weights.shape[1]

    @classmethod
    def build(cls, corpus_tokens: Iterable[list[str]], k1: float, b: float, epsilon: float) -> SparseBM25:
        return cls.weigh(TermCounts.build(corpus_tokens), k1, b, epsilon)

    @classmethod
    def weigh(cls, counts: TermCounts, k1: float, b: float, epsilon: float) -> SparseBM25:
        """The BM25 weights of analysed documents (``counts`` is left as it is)."""
        tf = counts.tf.copy()
        n_docs, n_terms = tf.shape
        doc_len = np.asarray(tf.sum(axis=1), dtype=np.float64).ravel()  # tokens per document (exact: integer counts)
        df = np.bincount(tf.indices, minlength=n_terms).astype(np.float64)
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        # rank-bm25: negative idf values are replaced by epsilon * the mean idf over the vocabulary
        eps = epsilon * (idf.sum() / len(idf)) if len(idf) else 0.0
        idf = np.where(idf < 0, eps, idf)
        avgdl = doc_len.sum() / n_docs if n_docs else 0.0
        norm = k1 * (1 - b + b * doc_len / avgdl) if avgdl else np.full(n_docs, k1)
        rows = np.repeat(np.arange(n_docs, dtype=np.int32), np.diff(tf.indptr))
        tf.data = idf[tf.indices] * tf.data * (k1 + 1) / (tf.data + norm[rows])
        del rows
        return cls(tf.T.tocsr(), counts.vocab)  # term-major, so a query picks whole rows

    def score_batch(self, queries_tokens: list[list[str]]) -> np.ndarray:
        rows, cols, vals = [], [], []
        for i, toks in enumerate(queries_tokens):
            for tok, c in Counter(toks).items():
                j = self.vocab.get(tok)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
                    vals.append(float(c))
        q = sparse.csr_matrix((vals, (rows, cols)), shape=(len(queries_tokens), len(self.vocab)))
        return (q @ self.weights).toarray()


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


def index_key_parts(ds_fingerprint: str, p: BM25Params) -> dict:
    """What the cached index (the analysed corpus, :class:`TermCounts`) depends on: the corpus, every param
    declared to affect it (the analyser's; k1, b and epsilon weigh it when a stage runs, a fraction of a
    second at 20K products), the code."""
    return {"corpus": ds_fingerprint, "params": {name: getattr(p, name) for name in affecting(BM25Params, INDEX)},
            "code": code_identity((__name__,))}  # fmt: skip


def sparse_index(ctx: StageContext, p: BM25Params, tok: Tokenizer, stage: str) -> SparseBM25:
    """The sparse index: the analysed corpus from the cache when the corpus and every index param
    are unchanged, weighted with this stage's k1, b and epsilon."""
    ds = ctx.dataset
    counts = memo(ctx.cache, "bm25-index", index_key_parts(ds.fingerprint, p),
                  lambda: TermCounts.build(tok(t) for t in ds.doc_texts),
                  save=lambda index, folder: index.save(folder), load=lambda entry: TermCounts.load(entry.path),
                  meta=lambda index: {"terms": len(index.vocab), "postings": int(index.tf.nnz)},
                  describe=lambda index: f"{len(index.vocab)} terms x {index.n_docs} docs, {index.tf.nnz} postings",
                  label=f"stage {stage}", what="BM25 index").value  # fmt: skip
    return SparseBM25.weigh(counts, p.k1, p.b, p.epsilon)


def query_batch_size(p: BM25Params, n_docs: int) -> int:
    """Queries per sparse product: ``query_batch``, capped so the dense (batch x docs)
    score block stays under about 64 MB (16 queries at 500K documents)."""
    return max(1, min(p.query_batch, (64 << 20) // (8 * max(n_docs, 1))))


def search(score: Callable[[list[list[str]]], np.ndarray], qids: list[str], q_tokens: list[list[str]],
           doc_ids: list[str], top_k: int, batch: int, threads: int, desc: str = "bm25: queries") -> Run:
    """Score query batches (``score(tokens) -> batch x docs``) and keep each query's top k.
    With ``threads > 1`` batches run in a thread pool: scipy's sparse product and numpy's
    partition release the GIL, so they overlap."""

    def work(i: int) -> Run:
        return top_k_run(qids[i : i + batch], doc_ids, score(q_tokens[i : i + batch]), top_k, keep_zero=False)

    starts = range(0, len(qids), batch)
    run: Run = {}
    with progress(len(qids), desc, "q") as bar:
        if threads > 1 and len(starts) > 1:
            with ThreadPoolExecutor(threads) as pool:
                for part in pool.map(work, starts):
                    run.update(part)
                    bar.update(len(part))
        else:
            for i in starts:
                part = work(i)
                run.update(part)
                bar.update(len(part))
    return run


class BM25Stage(Stage):
    type_name = "bm25"
    Params = BM25Params
    packages = ("numpy", "scipy", "rank-bm25", "PyStemmer")

    @classmethod
    def tune_space(cls, params: BM25Params, inputs: list[str]) -> dict[str, list]:
        """The analyzer (Snowball stemming, stopwords) and the two BM25 params over the ranges the
        literature tunes them in (k1 in [0.5, 3], b in [0.3, 1]): 96 trials, 4 analyses of the corpus."""
        return {"stemmer": [None, "english"], "stopwords": [False, True], "k1": [0.5, 0.9, 1.2, 1.5, 2.0, 3.0],
                "b": [0.3, 0.5, 0.75, 1.0]}  # fmt: skip

    def _scorer(self, ctx: StageContext) -> tuple[Tokenizer, Callable[[list[list[str]]], np.ndarray], int]:
        """The query tokenizer, the scorer of a batch of tokenized queries (-> batch x docs), and
        the threads to search with."""
        p: BM25Params = self.params
        tok = Tokenizer(lowercase=p.lowercase, stopwords=p.stopwords, stemmer=p.stemmer, split=p.tokens)
        if p.backend == "rank_bm25":
            index = BM25Okapi([tok(t) for t in ctx.dataset.doc_texts], k1=p.k1, b=p.b, epsilon=p.epsilon)

            def score(batch: list[list[str]]) -> np.ndarray:
                return np.vstack([index.get_scores(t) for t in batch])

            return tok, score, 1  # rank-bm25 is pure Python/numpy per query: the reference, not the fast path
        return tok, sparse_index(ctx, p, tok, self.name).score_batch, p.threads or os.cpu_count() or 1

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: BM25Params = self.params
        tok, score, threads = self._scorer(ctx)
        ds = ctx.dataset
        qids = ds.query_ids
        q_tokens = [tok(ds.queries[q]) for q in qids]
        t0 = time.perf_counter()
        run = search(score, qids, q_tokens, ds.doc_ids, p.top_k, query_batch_size(p, len(ds.doc_ids)), threads,
                     desc=f"{self.name}: queries")  # fmt: skip
        dt = time.perf_counter() - t0
        log.info("stage %s: %s backend, %d queries in %.2fs (%.0f queries/s, %d thread(s))",
                 self.name, p.backend, len(qids), dt, len(qids) / max(dt, 1e-9), threads)  # fmt: skip
        return run

    def server(self, ctx: StageContext) -> Server:
        """The index loaded once; a query tokenized, scored against every document, cut at ``top_k``."""
        p: BM25Params = self.params
        tok, score, _ = self._scorer(ctx)
        ds = ctx.dataset

        def one(qid: str, inputs: list[Run]) -> Run:
            return top_k_run([qid], ds.doc_ids, score([tok(ds.queries[qid])]), p.top_k, keep_zero=False)

        return one
