"""The Python API from a script: a pipeline given as a dict, its stage table as a DataFrame,
per-query values, and stagebench.evaluate on one of its runs.

    python examples/python_api.py            # after `make data` (the embedded dataset)
"""

from __future__ import annotations

import stagebench

pipeline = {
    "name": "api-example",
    "output": "build/api-example",
    "dataset": {"loader": "esci", "path": "data/synthetic-esci", "split": "test", "max_queries": 100},
    "stages": [
        {"name": "bm25", "type": "bm25", "params": {"k1": 1.2, "b": 0.75, "top_k": 1000}},
        {"name": "bm25_stem", "type": "bm25", "params": {"stemmer": "english", "top_k": 1000}},
        {"name": "rrf", "type": "rrf", "inputs": ["bm25", "bm25_stem"], "params": {"k": 60}},
        {"name": "title_boost", "type": "plugin", "target": "examples.title_boost:TitleBoostReranker",
         "inputs": ["rrf"], "params": {"top_n": 50}},
    ],
    "evaluation": {"metrics": ["nDCG@10", "RR@10", "R@100"]},
}

result = stagebench.run(pipeline)
print(result.table[["nDCG@10", "RR@10", "R@100", "pool_recall", "headroom_captured"]])

per_query = result.per_query
gain = per_query[per_query.stage == "title_boost"].set_index("qid")["nDCG@10"] - \
    per_query[per_query.stage == "rrf"].set_index("qid")["nDCG@10"]  # fmt: skip
print(f"title_boost vs rrf: {int((gain > 0).sum())} queries better, {int((gain < 0).sum())} worse")

qrels = stagebench.api.read_trec_qrels(result.output / "qrels.trec")
print(stagebench.evaluate(qrels, result.runs["bm25"], ["nDCG@10", "mrr@10", "P@10"]).means)
