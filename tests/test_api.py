"""The Python API from a script: run a pipeline given as a dict, read the table, evaluate a run."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import stagebench
from tests.conftest import REPO


def pipeline(tmp_path, dataset) -> dict:
    return {
        "name": "api",
        "output": str(tmp_path / "out"),
        "cache_dir": str(tmp_path / "cache"),
        "dataset": {"loader": "esci", "path": str(dataset), "split": "test"},
        "stages": [
            {"name": "bm25", "type": "bm25", "params": {"top_k": 100}},
            {"name": "stem", "type": "bm25", "params": {"top_k": 100, "stemmer": "english"}},
            {"name": "rrf", "type": "rrf", "inputs": ["bm25", "stem"]},
        ],
        "evaluation": {"metrics": ["nDCG@10", "RR@10", "R@100"], "permutations": 500, "bootstrap": 200},
    }


def test_run_a_dict_and_read_the_table(tmp_path, small_synthetic):
    result = stagebench.run(pipeline(tmp_path, small_synthetic))
    table = result.table
    assert isinstance(table, pd.DataFrame) and list(table.index) == ["bm25", "stem", "rrf"]
    rows = {r["stage"]: r for r in json.loads((tmp_path / "out" / "stage_table.json").read_text())}
    for stage in table.index:
        for m in ("nDCG@10", "RR@10", "R@100"):
            assert table.loc[stage, m] == rows[stage][m]
    pq = result.per_query
    assert set(pq.columns) == {"stage", "qid", "nDCG@10", "RR@10", "R@100"} and len(pq) == 3 * rows["bm25"]["queries"]
    assert pq[pq.stage == "rrf"]["nDCG@10"].mean() == pytest.approx(rows["rrf"]["nDCG@10"], abs=1e-6)
    # evaluate() on a run from the result gives the table's numbers
    qrels = stagebench.read_trec_qrels(tmp_path / "out" / "qrels.trec")
    ev = stagebench.evaluate(qrels, result.runs["bm25"], ["nDCG@10", "rr@10"])
    assert ev.means["nDCG@10"] == pytest.approx(rows["bm25"]["nDCG@10"], abs=1e-6)
    assert ev.means["RR@10"] == pytest.approx(rows["bm25"]["RR@10"], abs=1e-6)
    copy = result.save(tmp_path / "copy")
    assert (copy / "stage_table.txt").read_text() == (tmp_path / "out" / "stage_table.txt").read_text()


def test_a_bad_dict_is_one_clear_error(tmp_path, small_synthetic):
    cfg = pipeline(tmp_path, small_synthetic)
    cfg["stages"][0]["params"]["k1"] = float("nan")
    with pytest.raises(stagebench.StagebenchError, match=r"<dict>: stages\[0\] \(bm25\).params.k1: must be a finite"):
        stagebench.run(cfg)


@pytest.mark.slow
def test_importing_stagebench_loads_no_model_library():
    code = ("import sys, stagebench; heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'faiss', "
            "'onnxruntime', 'datasets') if m in sys.modules]; print(heavy)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"
