"""The reranker-by-pool matrix: the stages a config's matrix: adds, each cell equal to the reranker
applied to that pool on its own (a second path: the Python API's one-stage run, no cache), the oracle
pool's recall, nothing scored twice, the matrix files and `stagebench matrix`, and the config's errors."""

from __future__ import annotations

import json
import logging

import pytest

import stagebench
from stagebench.cli import main
from stagebench.config import load_config, parse_config
from stagebench.errors import ConfigError
from stagebench.pipeline import run_config
from stagebench.runs import ranked_ids, read_trec_run

TB = "examples.title_boost:TitleBoostReranker"


def config_text(tmp_path, data, matrix: str) -> str:
    return (f"name: m\noutput: {tmp_path / 'm'}\ncache_dir: {tmp_path / 'cache'}\n"
            f"dataset: {{loader: esci, path: {data}, split: test}}\nstages:\n"
            "  - {name: bm25, type: bm25, params: {top_k: 100}}\n"
            "  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english}}\n"
            "  - {name: rrf, type: rrf, inputs: [bm25, stem]}\n"
            f"  - {{name: tb, type: plugin, target: '{TB}', inputs: [rrf], params: {{top_n: 50}}}}\n"
            f"  - {{name: flat, type: plugin, target: '{TB}', inputs: [stem], params: {{top_n: 30, title_weight: 0.0}}}}\n"
            f"{matrix}"
            "evaluation: {metrics: [nDCG@10, R@100], permutations: 200, bootstrap: 100, latency_queries: 0}\n")  # fmt: skip


def test_matrix_stages_cells_files_and_cache(tmp_path, small_synthetic, capsys, caplog):
    cfg = tmp_path / "m.yaml"
    cfg.write_text(config_text(tmp_path, small_synthetic, "matrix: {rerankers: [tb, flat], pools: [bm25, stem, rrf, oracle]}\n"))
    config = load_config(cfg)
    names = [s.name for s in config.stages]
    # a reranker over its own input is itself; every other pool gets a copy; the oracle pool reads the first stage
    # one oracle pool per reranker depth (top_n), so each reranker sees every relevant product
    assert names == ["bm25", "stem", "rrf", "tb", "flat", "oracle_30", "oracle_50", "tb_on_bm25", "tb_on_stem",
                     "tb_on_oracle", "flat_on_bm25", "flat_on_rrf", "flat_on_oracle"]  # fmt: skip
    assert config.matrix.cells["tb"]["rrf"] == "tb" and config.matrix.cells["flat"]["stem"] == "flat"
    for d in (30, 50):
        oracle = config.stages[names.index(f"oracle_{d}")]
        assert oracle.type == "oracle_pool" and oracle.inputs == ["bm25"] and oracle.params.depth == d
    assert config.stages[names.index("tb_on_oracle")].inputs == ["oracle_50"]
    assert config.stages[names.index("flat_on_oracle")].inputs == ["oracle_30"]

    result = run_config(config)
    out = result.output
    m = json.loads((out / "matrix.json").read_text())
    table = {r["stage"]: r for r in json.loads((out / "stage_table.json").read_text())}
    ds = result.dataset
    for c in m["cells"]:
        row = table[c["stage"]]
        pool = c["pool"] if c["pool"] != "oracle" else f"oracle_{c['depth']}"
        assert row["inputs"] == [pool] and c["ndcg10"] == row["nDCG@10"]
        assert c["input_ndcg10"] == pytest.approx(table[pool]["nDCG@10"], abs=1e-12)
        # the cell's run is the reranker applied to the pool by itself (the API's one-stage path, no cache)
        params = {"top_n": 50} if c["reranker"] == "tb" else {"top_n": 30, "title_weight": 0.0}
        alone = stagebench.stage("plugin", target=TB, **params).apply(ds, result.runs[pool], cache=False).run
        cell_run = read_trec_run(out / "runs" / f"{c['stage']}.trec")
        assert set(cell_run) == set(alone)
        for q, docs in alone.items():
            assert ranked_ids(cell_run[q]) == ranked_ids(docs) and cell_run[q] == pytest.approx(docs)
    marks_follow_the_stage_table(m, table)
    cells = {(c["reranker"], c["pool"]): c for c in m["cells"]}
    # every relevant product is in the oracle pool's top 50 (no query here has more than 50)
    assert cells["tb", "oracle"]["pool_recall"] == 1.0
    assert cells["flat", "oracle"]["pool_recall"] > max(cells["flat", p]["pool_recall"] for p in ("bm25", "stem", "rrf"))
    assert m["rerankers"] == ["tb", "flat"] and m["pools"] == ["bm25", "stem", "rrf", "oracle"]

    assert main(["matrix", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Reranker by pool" in text and "oracle: a first stage's candidates" in text
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.split() and ln.split()[0] in m["pools"]}
    for cell in m["cells"]:  # each cell's change, marked * (significantly better) or ! (significantly worse)
        mark = "*" if cell["better_than_input"] else "!" if cell["worse_than_input"] else ""
        shown = f"{cell['ndcg10']:.4f} ({cell['ndcg10'] - cell['input_ndcg10']:+.4f}){mark}"
        assert f"{shown} " in lines[cell["pool"]] or lines[cell["pool"]].endswith(shown), (shown, lines[cell["pool"]])
    assert main(["matrix", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == m
    for fmt, name in (("markdown", "matrix.md"), ("csv", "matrix.csv")):  # each format is the folder's own file
        assert main(["matrix", str(out), "--format", fmt]) == 0
        assert capsys.readouterr().out == (out / name).read_text(encoding="utf-8"), fmt
    html = (out / "report.html").read_text()
    assert 'id="matrix"' in html and 'alt="matrix.png"' in html
    assert (out / "plots" / "matrix.png").stat().st_size > 5_000

    caplog.set_level(logging.INFO, logger="stagebench")
    caplog.clear()
    run_config(load_config(cfg))  # every cell again: nothing scored twice
    assert "stages computed: none" in caplog.text


def marks_follow_the_stage_table(m: dict, table: dict) -> dict[str, int]:
    """A cell is better (worse) than its pool exactly when the stage table marks the cell's stage
    significantly better than its pool (the pool significantly better than the stage); the counts."""
    marks = {"better": 0, "worse": 0}
    for c in m["cells"]:
        row = table[c["stage"]]
        pool = table[row["inputs"][0]]
        assert c["better_than_input"] == (pool["id"] in row["better_than"].get("nDCG@10", [])), c["stage"]
        assert c["worse_than_input"] == (row["id"] in pool["better_than"].get("nDCG@10", [])), c["stage"]
        marks["better"] += c["better_than_input"]
        marks["worse"] += c["worse_than_input"]
    return marks


def test_a_cell_is_marked_better_or_worse_than_its_pool_as_the_stage_table_marks_it(tmp_path, small_synthetic, capsys):
    """A reversing reranker over a good pool is significantly worse than it; over a reversed pool it
    restores the order and is significantly better: both marks, from the stage table's Holm-corrected tests."""
    rev = "tests.shuffle_plugin:Reverse"
    cfg = tmp_path / "m.yaml"
    cfg.write_text(f"name: m\noutput: {tmp_path / 'm'}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {small_synthetic}, split: test}}\nstages:\n"
                   "  - {name: bm25, type: bm25, params: {top_k: 50}}\n"
                   f"  - {{name: flipped, type: plugin, target: '{rev}', inputs: [bm25], params: {{top_n: 30}}}}\n"
                   f"  - {{name: rev, type: plugin, target: '{rev}', inputs: [bm25], params: {{top_n: 30}}}}\n"
                   "matrix: {rerankers: [rev], pools: [bm25, flipped]}\n"
                   "evaluation: {metrics: [nDCG@10], permutations: 500, bootstrap: 100, latency_queries: 0}\n")  # fmt: skip
    out = run_config(load_config(cfg)).output
    m = json.loads((out / "matrix.json").read_text())
    table = {r["stage"]: r for r in json.loads((out / "stage_table.json").read_text())}
    assert marks_follow_the_stage_table(m, table) == {"better": 1, "worse": 1}
    cells = {c["pool"]: c for c in m["cells"]}
    assert cells["bm25"]["worse_than_input"] and cells["flipped"]["better_than_input"]
    assert main(["matrix", str(out)]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.split()}
    for pool, mark in (("bm25", "!"), ("flipped", "*")):
        c = cells[pool]
        assert f"{c['ndcg10']:.4f} ({c['ndcg10'] - c['input_ndcg10']:+.4f}){mark}" in lines[pool]


def test_a_folder_without_a_matrix_says_so(tmp_path, small_synthetic, capsys):
    cfg = tmp_path / "m.yaml"
    cfg.write_text(config_text(tmp_path, small_synthetic, ""))
    out = run_config(load_config(cfg)).output
    assert not (out / "matrix.json").exists()
    assert main(["matrix", str(out)]) == 2
    assert "the run had no matrix" in capsys.readouterr().err


@pytest.mark.parametrize("matrix, msg", [
    ("{rerankers: [tb], pools: [bm52]}", r"matrix\.pools\[0\]: unknown stage 'bm52'"),
    ("{rerankers: [bm25], pools: [rrf]}", r"matrix\.rerankers\[0\]: 'bm25' \(bm25\) is not a reranker of one input"),
    ("{rerankers: [tbb], pools: [rrf]}", r"matrix\.rerankers\[0\]: unknown stage 'tbb'"),
    ("{rerankers: [tb], pools: []}", r"matrix\.pools: must not be empty"),
    ("{rerankers: [tb], pools: [rrf, rrf]}", r"matrix\.pools: .* a stage is listed twice"),
    ("{rerankers: [tb], pools: [oracle], oracle: {of: nope}}", r"matrix\.oracle\.of: unknown stage 'nope'"),
    ("{rerankers: [tb], pools: [oracle], oracle: {depth: 5}}", r"matrix\.oracle\.depth: unknown key"),
    ("{rerankers: [tb], pools: [rrf], cells: 3}", r"matrix\.cells: unknown key"),
])  # fmt: skip
def test_matrix_config_errors(tmp_path, small_synthetic, matrix, msg):
    import yaml

    raw = yaml.safe_load(config_text(tmp_path, small_synthetic, f"matrix: {matrix}\n"))
    with pytest.raises(ConfigError, match=msg):
        parse_config(raw, "m.yaml")


def test_a_generated_name_that_a_stage_has_is_refused(tmp_path, small_synthetic):
    import yaml

    raw = yaml.safe_load(config_text(tmp_path, small_synthetic, "matrix: {rerankers: [tb], pools: [bm25]}\n"))
    raw["stages"].insert(2, {"name": "tb_on_bm25", "type": "bm25"})
    with pytest.raises(ConfigError, match=r"matrix: the stage 'tb_on_bm25' it adds: a stage of the config has that name"):
        parse_config(raw, "m.yaml")


COUNTING = '''
import os


class Counting:
    """A batched reranker (a pair's score is a function of the pair) that appends every pair it scores to a file."""

    def __init__(self, log):
        self.log = log

    def score(self, query, docs):
        return self.score_pairs([(query, d) for d in docs])

    def score_pairs(self, pairs):
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.writelines(f"{q}\\t{d[:40]}\\n" for q, d in pairs)
        return [float(len(set(q.split()) & set(d.split()))) + len(d) * 1e-4 for q, d in pairs]
'''


def test_a_pair_is_scored_once_per_run_across_the_matrix(tmp_path, small_synthetic, monkeypatch):
    (tmp_path / "counting.py").write_text(COUNTING, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "scored.tsv"
    cfg = tmp_path / "m.yaml"
    stage = f"  - {{name: cnt, type: plugin, target: 'counting:Counting', inputs: [rrf], params: {{top_n: 20, log: '{log}'}}}}\n"
    cfg.write_text(config_text(tmp_path, small_synthetic, "matrix: {rerankers: [cnt], pools: [bm25, stem, rrf, oracle]}\n")
                   .replace("matrix:", stage + "matrix:"))  # fmt: skip
    result = run_config(load_config(cfg))
    scored = log.read_text(encoding="utf-8").splitlines()
    cells = [result.runs[n] for n in ("cnt_on_bm25", "cnt_on_stem", "cnt", "cnt_on_oracle")]
    pools = [result.runs[n] for n in ("bm25", "stem", "rrf", "oracle")]
    every = sum(min(20, len(r[q])) for r in pools for q in r)
    unique = {(q, d) for r in pools for q in r for d in ranked_ids(r[q])[:20]}
    assert len(scored) == len(unique) < every  # each (query, product) pair scored once, whatever its pools
    # and each cell is what the reranker gives over that pool alone (no sharing, no cache)
    for pool, cell in zip(pools, cells):
        alone = stagebench.stage("plugin", target="counting:Counting", top_n=20, log=str(tmp_path / "x.tsv")).apply(
            result.dataset, pool, cache=False).run  # fmt: skip
        assert {q: ranked_ids(d) for q, d in cell.items()} == {q: ranked_ids(d) for q, d in alone.items()}
