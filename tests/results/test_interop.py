"""A run's runs and qrels handed to ranx and ir_measures: their own evaluations give the stage
table's values, tied scores included."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import stagebench
from stagebench.results.interop import strict_order
from stagebench.runs import ranked
from tests.conftest import child_path


def test_strict_order_breaks_ties_as_trec_eval_by_the_fewest_float_steps():
    scores = {"a": 2.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 0.5, "f": float(np.nextafter(1.0, -np.inf))}
    out = strict_order(scores)
    assert list(out) == [d for d, _ in ranked(scores)] == ["a", "d", "c", "b", "f", "e"]  # docid descending on ties
    values = list(out.values())
    assert all(x > y for x, y in zip(values, values[1:]))  # strict
    assert out["a"] == 2.0 and out["d"] == 1.0 and out["e"] == 0.5  # untied scores are kept
    assert out["c"] == np.nextafter(1.0, -np.inf) and out["b"] == np.nextafter(out["c"], -np.inf)
    assert out["f"] < out["b"] and math.isclose(out["f"], 1.0, rel_tol=1e-15)  # pushed past by the run of ties


@pytest.fixture(scope="module")
def tied_result(tmp_path_factory, small_synthetic):
    """BM25, a shuffle of its top 10 and their RRF (whose sums tie often), linear gain."""
    root = tmp_path_factory.mktemp("interop")
    return stagebench.run({
        "name": "interop", "output": str(root / "out"), "cache_dir": str(root / "cache"),
        "dataset": {"loader": "esci", "path": str(small_synthetic), "split": "test"},
        "stages": [
            {"name": "bm25", "type": "bm25", "params": {"top_k": 50}},
            {"name": "shuffle", "type": "plugin", "target": "tests.shuffle_plugin:HashShuffle", "inputs": ["bm25"],
             "params": {"top_n": 10}},
            {"name": "rrf", "type": "rrf", "inputs": ["bm25", "shuffle"], "params": {"top_k": 50}},
        ],
        "evaluation": {"metrics": ["nDCG@10", "RR@10"], "gain": "linear", "latency_queries": 0, "permutations": 100,
                       "bootstrap": 100},
    })  # fmt: skip


#: ranx's own evaluation of every stage of a folder, printed as JSON (run with numba's JIT off: ranx's kernels
#: then run as the Python they are written in, the same code, without the ~35 s of compiling them that a fresh
#: environment would spend on the first call)
RANX_EVALUATES = """
import json, sys
import ranx, stagebench
qrels, runs = stagebench.open(sys.argv[1]).to_ranx()
out = {}
for stage, run in runs.items():
    mean = ranx.evaluate(qrels, run, "ndcg@10", make_comparable=True)
    out[stage] = {"mean": float(mean), "per_query": {q: float(v) for q, v in run.scores["ndcg@10"].items()},
                  "name": run.name}
print(json.dumps(out))
"""


def test_ranx_evaluates_every_stage_as_the_table(tied_result):
    pytest.importorskip("ranx", reason="the interop extra is not installed (pip install 'stagebench[interop]')")
    r = subprocess.run([sys.executable, "-c", RANX_EVALUATES, str(tied_result.output)], capture_output=True, text=True,
                       env={**os.environ, "NUMBA_DISABLE_JIT": "1", "PYTHONPATH": child_path()})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    folder = stagebench.open(tied_result.output)  # a results folder read back: its files verified
    exact = folder.per_query_values
    assert set(got) == {"bm25", "shuffle", "rrf"} and all(got[s]["name"] == s for s in got)
    ties = sum(len(d) - len(set(d.values())) for d in folder.runs["rrf"].values())
    assert ties > 0  # the comparison below is about tied scores too
    for stage, g in got.items():
        mean = sum(exact[stage]["nDCG@10"].values()) / len(exact[stage]["nDCG@10"])
        assert abs(g["mean"] - mean) < 1e-9, stage
        assert g["per_query"] == pytest.approx(exact[stage]["nDCG@10"], abs=1e-12)


def test_ir_measures_reads_the_records_and_gives_the_tables_values(tied_result):
    irm = pytest.importorskip("ir_measures", reason="the interop extra is not installed")
    exact = tied_result.per_query_values
    for stage in ("bm25", "rrf"):
        got = {m.query_id: m.value for m in irm.iter_calc([irm.nDCG @ 10, irm.RR @ 10], tied_result.ir_measures_qrels(),
                                                          tied_result.ir_measures_run(stage)) if str(m.measure) == "nDCG@10"}  # fmt: skip
        assert got == pytest.approx(exact[stage]["nDCG@10"], abs=1e-12)
    with pytest.raises(stagebench.StagebenchError, match="no stage 'nope'"):
        tied_result.ir_measures_run("nope")
