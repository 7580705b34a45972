"""Dense top-k cuts ties with the run rule (issue 11, item 10): faiss's arbitrary choice among
tied scores never decides which documents make the cut."""

from __future__ import annotations

import numpy as np


def test_dense_top_k_cuts_ties_with_the_run_rule():
    import faiss

    from stagebench.runs import ranked
    from stagebench.stages.dense import search_top_k

    rng = np.random.default_rng(0)
    base = rng.normal(size=(4, 8)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    emb = np.repeat(base, 30, axis=0)  # 4 groups of 30 identical vectors: 30-way ties everywhere
    doc_ids = [f"d{i:03d}" for i in range(len(emb))]
    index = faiss.IndexFlatIP(8)
    index.add(emb)
    q = base[:2] + 0.01 * rng.normal(size=(2, 8)).astype(np.float32)
    run = search_top_k(index, q, ["qa", "qb"], doc_ids, 10)
    for qi, qid in enumerate(["qa", "qb"]):
        full = {d: float(s) for d, s in zip(doc_ids, (emb @ q[qi]).astype(np.float32))}
        oracle = [d for d, _ in ranked(full)[:10]]  # score desc, then doc id desc
        assert [d for d, _ in ranked(run[qid])] == oracle
