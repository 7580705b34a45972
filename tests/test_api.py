"""The Python API from a script: run a pipeline given as a dict, read the table, evaluate a run."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import stagebench
from stagebench.report.tables import comparison_text
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
        "evaluation": {"metrics": ["nDCG@10", "RR@10", "R@100"], "permutations": 500, "bootstrap": 200, "latency_queries": 0},
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
    qrels = stagebench.api.read_trec_qrels(tmp_path / "out" / "qrels.trec")
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


def test_open_reads_back_what_run_returned(tmp_path, small_synthetic):
    done = stagebench.run(pipeline(tmp_path, small_synthetic))
    opened = stagebench.open(tmp_path / "out")
    assert opened.table_text == done.table_text
    assert opened.table.equals(done.table)
    assert opened.runs == done.runs and set(opened.runs) == {"bm25", "stem", "rrf"}
    assert opened.per_query.equals(done.per_query)
    # a file changed behind the manifest's back is refused, not read: open reads the table only, and
    # the runs (with the per-query values computed from them) when they are asked for
    run_file = tmp_path / "out" / "runs" / "bm25.trec"
    run_file.write_text(run_file.read_text().replace(" 1 ", " 2 ", 1))
    reopened = stagebench.open(tmp_path / "out")
    assert reopened.table.equals(done.table)
    with pytest.raises(stagebench.StagebenchError, match="bm25.trec: changed after the run"):
        reopened.runs
    with pytest.raises(stagebench.StagebenchError, match="bm25.trec: changed after the run"):
        stagebench.open(tmp_path / "out").per_query
    # one run deleted: an incomplete folder, refused at open (a committed folder holds no run at all)
    run_file.unlink()
    with pytest.raises(stagebench.StagebenchError, match="bm25.trec: missing;.*incomplete"):
        stagebench.open(tmp_path / "out")
    for runs in (tmp_path / "out" / "runs").iterdir():
        runs.unlink()
    (tmp_path / "out" / "qrels.trec").unlink()
    tables_only = stagebench.open(tmp_path / "out")
    assert tables_only.runs == {} and tables_only.per_query.round(6).equals(done.per_query.round(6))


def test_compare_returns_the_numbers_the_cli_prints(tmp_path, small_synthetic, capsys):
    from stagebench.cli import main

    cfg = pipeline(tmp_path, small_synthetic)
    stagebench.run(cfg)
    cfg["output"] = str(tmp_path / "other")
    cfg["stages"][0]["params"]["k1"] = 0.5
    other = stagebench.run(cfg)
    c = stagebench.compare(tmp_path / "out", other, permutations=500)
    assert c.stages == ["bm25", "stem", "rrf"] and c.same_query_sets and c.queries == other.stage_table.rows[0].queries
    row = c.row("bm25", "nDCG@10")
    # the means are the two folders' per-query means over the common queries (compare reads the
    # per_query.csv each folder wrote: six decimals)
    a = stagebench.open(tmp_path / "out").per_query.query("stage == 'bm25'")["nDCG@10"].mean()
    b = other.per_query.query("stage == 'bm25'")["nDCG@10"].mean()
    assert row.mean_a == pytest.approx(a, abs=1e-6) and row.mean_b == pytest.approx(b, abs=1e-6)
    assert row.delta == pytest.approx(b - a, abs=2e-6) and row.wins + row.ties + row.losses == c.queries
    # stem is untouched by k1 of the first stage: no difference at all
    assert c.row("stem", "nDCG@10").delta == 0 and c.row("stem", "nDCG@10").wins == 0
    assert main(["compare", str(tmp_path / "out"), str(tmp_path / "other"), "--permutations", "500"]) == 0
    assert capsys.readouterr().out == comparison_text(c)


def test_a_stage_applied_from_python_shares_the_cache_with_a_yaml_run(tmp_path, small_synthetic):
    cache = tmp_path / "cache"
    spec = {"loader": "esci", "path": str(small_synthetic), "split": "test"}
    ds = stagebench.load_dataset(spec)
    bm25 = stagebench.stage("bm25", top_k=100, k1=0.9).apply(ds, cache=cache)
    assert bm25.record.status == "computed" and 0 < len(bm25.run) <= len(ds.queries)
    stem = stagebench.stage("bm25", name="stem", top_k=100, stemmer="english").apply(ds, cache=cache)
    fused = stagebench.stage("rrf").apply(ds, bm25.run, stem.run, cache=cache)
    # the same stages as a YAML run (names differ, keys do not): everything is read from the cache
    cfg = pipeline(tmp_path, small_synthetic)
    cfg["stages"][0]["params"]["k1"] = 0.9
    done = stagebench.run(cfg)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [s["status"] for s in manifest["stages"]] == ["cached", "cached", "cached"]
    assert done.runs == {"bm25": bm25.run, "stem": stem.run, "rrf": fused.run}
    # and the other way round; without a cache it computes the same run again
    again = stagebench.stage("rrf").apply(ds, done.runs["bm25"], done.runs["stem"], cache=cache)
    assert again.record.status == "cached" and again.run == fused.run
    fresh = stagebench.stage("bm25", top_k=100, k1=0.9).apply(spec, cache=False)
    assert fresh.record.status == "computed" and fresh.run == bm25.run


def test_a_stage_applied_from_python_is_validated_as_a_config_is(small_synthetic):
    ds = stagebench.load_dataset({"loader": "esci", "path": str(small_synthetic), "split": "test"})
    with pytest.raises(stagebench.StagebenchError, match=r"stagebench.stage \(bm25\).params.k1: must be >= 0"):
        stagebench.stage("bm25", k1=-1).apply(ds, cache=False)
    with pytest.raises(stagebench.StagebenchError, match=r"\(bm25\).params.k_1: unknown key"):
        stagebench.stage("bm25", k_1=1).apply(ds, cache=False)
    with pytest.raises(stagebench.StagebenchError, match=r"a cross_encoder stage takes exactly 1 input\(s\), got 0"):
        stagebench.stage("cross_encoder", top_n=5).apply(ds, cache=False)
    with pytest.raises(stagebench.StagebenchError, match=r"input input1: query 'nope' is not a query of dataset"):
        stagebench.stage("cross_encoder", top_n=5).apply(ds, {"nope": {"d1": 1.0}}, cache=False)
    with pytest.raises(stagebench.StagebenchError, match=r"score .* not a finite number|finite"):
        stagebench.stage("rrf").apply(ds, {ds.query_ids[0]: {"d1": float("nan")}}, {}, cache=False)
    with pytest.raises(stagebench.StagebenchError, match=r"dataset.loader: unknown loader 'nope'"):
        stagebench.load_dataset({"loader": "nope"})


@pytest.mark.slow
def test_a_model_stage_applied_from_python_equals_its_yaml_run(tmp_path, small_synthetic):
    spec = {"loader": "esci", "path": str(small_synthetic), "split": "test", "max_queries": 8}
    cascade = stagebench.stage("bm25", top_k=50) >> stagebench.stage("cross_encoder", top_n=10)
    done = cascade.run(spec, output=tmp_path / "out", cache_dir=tmp_path / "cache", metrics=["nDCG@10"])
    ds = stagebench.load_dataset(spec)
    first = stagebench.stage("bm25", top_k=50).apply(ds, cache=False)
    ce = stagebench.stage("cross_encoder", top_n=10).apply(ds, first.run, cache=False)
    assert first.run == done.runs["bm25"] and ce.run == done.runs["cross_encoder"]
    assert ce.stats.pairs == {10: sum(min(10, len(v)) for v in first.run.values())}
    assert ce.record.status == "computed" and ce.record.candidate_depth == 10


@pytest.mark.parametrize("kwarg,value,message", [("alpha", 1.5, "must be < 1, got 1.5"), ("alpha", 0.0, "must be > 0"),
                                                 ("permutations", 0, "must be >= 100, got 0"),
                                                 ("seed", -1, "must be >= 0, got -1")])  # fmt: skip
def test_the_python_api_refuses_what_the_command_line_refuses(tmp_path, capsys, kwarg, value, message):
    """compare and eval, at the command line and from Python, over the committed results/explore: one check
    (evaluation's declarations), the same refusal (alpha 1.5 marked rows with difference 0 significant)."""
    from stagebench.cli import main
    from stagebench.errors import ConfigError

    folder = str(REPO / "results" / "explore")
    assert main(["compare", folder, folder, f"--{kwarg}", str(value)]) == 2
    assert f"--{kwarg}: {message}" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=f"^{kwarg}: {message}"):
        stagebench.compare(folder, folder, **{kwarg: value})
    runs = [str(REPO / "results" / "explore" / "runs" / f"{s}.trec") for s in ("bm25", "dense")]
    qrels = str(REPO / "results" / "explore" / "qrels.trec")
    assert main(["eval", qrels, *runs, f"--{kwarg}", str(value), "-m", "nDCG@10"]) == 2
    assert f"--{kwarg}: {message}" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=f"^{kwarg}: {message}"):
        stagebench.api.compare_runs(qrels, runs, ["nDCG@10"], **{kwarg: value})
