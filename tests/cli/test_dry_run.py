"""``stagebench run --dry-run`` (issue 79): each stage cached or to compute, a reranker's work in pairs,
nothing computed or written; after the run, every stage cached and the reranker's pairs exact."""

from __future__ import annotations

import yaml

from stagebench import cli
from stagebench.runs import read_trec_run


def test_a_dry_run_says_what_is_cached_and_what_would_be_computed_and_writes_nothing(tmp_path, tiny_synthetic, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "dry", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
        "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"},
        "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 30}},
                   {"name": "shuffle", "type": "plugin", "target": "tests.shuffle_plugin:HashShuffle",
                    "inputs": ["bm25"], "params": {"top_n": 7}}],
        "evaluation": {"metrics": ["nDCG@10"], "permutations": 200, "latency_queries": 0}}))  # fmt: skip
    assert cli.main(["run", str(cfg), "--dry-run"]) == 0
    before = capsys.readouterr().out.splitlines()
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()  # nothing written
    assert before[2].split()[:3] == ["bm25", "bm25", "compute"]
    assert "its input is computed first" in before[3] and "x top 7" in before[3]
    assert before[-1].startswith("0 of 2 stages cached; 2 to compute")
    assert cli.main(["run", str(cfg)]) == 0
    capsys.readouterr()
    assert cli.main(["run", str(cfg), "--dry-run"]) == 0
    after = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in after[2:4]] == ["cached", "cached"]
    assert after[-1].startswith("2 of 2 stages cached; 0 to compute")
    # the reranker at another depth: not cached, its input is: its pairs exactly
    raw = yaml.safe_load(cfg.read_text())
    raw["stages"][1]["params"]["top_n"] = 5
    cfg.write_text(yaml.safe_dump(raw))
    assert cli.main(["run", str(cfg), "--dry-run"]) == 0
    line = capsys.readouterr().out.splitlines()[3]
    bm25 = read_trec_run(tmp_path / "out" / "runs" / "bm25.trec")
    pairs = sum(min(5, len(docs)) for docs in bm25.values())
    assert line.split()[2] == "compute" and f"{pairs:,} pairs ({len(bm25):,} queries x top 5)" in line
