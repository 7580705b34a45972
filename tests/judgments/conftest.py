"""The judging round's shared folder: three cheap stages on the tiny generated dataset, judged by the rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagebench import api

STAGES = [
    {"name": "bm25", "type": "bm25", "params": {"top_k": 50}},
    {"name": "bm25_flat", "type": "bm25", "params": {"k1": 0.3, "b": 0.1, "top_k": 50}},
    {"name": "rrf", "type": "rrf", "inputs": ["bm25", "bm25_flat"]},
]


@pytest.fixture(scope="module")
def judged_folder(tmp_path_factory, tiny_synthetic) -> Path:
    """Three cheap stages on the tiny generated dataset, every hole in their top 10 graded by the rules."""
    root = tmp_path_factory.mktemp("judging-round")
    cfg = {"name": "round", "output": str(root / "round"), "cache_dir": str(root / "cache"),
           "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"}, "stages": STAGES,
           "evaluation": {"metrics": ["nDCG@10", "P@10"], "permutations": 200, "latency_queries": 0},
           "judge": {"backend": "rules", "depth": 10, "sample": 60}}  # fmt: skip
    return api.run(cfg).output
