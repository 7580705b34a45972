"""``stagebench run --dry-run`` (issue 79): each stage cached or to compute, a reranker's work in pairs,
nothing of the run computed or written; after the run, every stage cached and the reranker's pairs exact.
Issue 95: each stage to compute with its expected seconds, from a probe kept in the cache (its only entries),
read back by the next dry run and by the run's log."""

from __future__ import annotations

import yaml

from stagebench import cli
from stagebench.runs import read_trec_run


def test_a_dry_run_says_what_is_cached_and_what_would_be_computed_and_writes_nothing(tmp_path, tiny_synthetic, capsys,
                                                                                     caplog):  # fmt: skip
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
    assert not (tmp_path / "out").exists()  # nothing of the run written; the probes' rates kept in the cache
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["rates"]
    assert len(list((tmp_path / "cache" / "rates").iterdir())) == 2  # one per stage probed
    assert before[2].split()[:3] == ["bm25", "bm25", "compute"] and before[2].endswith("(probed now)")
    assert "at most" in before[3] and "x top 7" in before[3] and before[3].endswith("(probed now)")
    assert before[-2].startswith("0 of 2 stages cached; 2 to compute")
    assert before[-1].startswith("expected: about ") and " of stage work on " in before[-1]
    with caplog.at_level("INFO", logger="stagebench"):
        assert cli.main(["run", str(cfg)]) == 0
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("expected on this machine")]
    assert len(said) == 1 and "bm25" in said[0] and "shuffle" in said[0] and "rate probed" in said[0], said
    capsys.readouterr()
    assert cli.main(["run", str(cfg), "--dry-run"]) == 0
    after = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in after[2:4]] == ["cached", "cached"]
    assert after[-1].startswith("2 of 2 stages cached; 0 to compute")  # nothing to forecast
    # the reranker at another depth: not cached, its input is: its pairs exactly
    raw = yaml.safe_load(cfg.read_text())
    raw["stages"][1]["params"]["top_n"] = 5
    cfg.write_text(yaml.safe_dump(raw))
    assert cli.main(["run", str(cfg), "--dry-run"]) == 0
    line = capsys.readouterr().out.splitlines()[3]
    bm25 = read_trec_run(tmp_path / "out" / "runs" / "bm25.trec")
    pairs = sum(min(5, len(docs)) for docs in bm25.values())
    assert line.split()[2] == "compute" and f"{pairs:,} pairs ({len(bm25):,} queries x top 5)" in line
    assert "(rate probed 20" in line  # its scoring is the same at any depth: the rate read back


def test_a_dry_run_with_a_ray_engine_says_whether_its_cluster_answers(tmp_path, tiny_synthetic, capsys, free_tcp_port):
    """Issue 94: `run --dry-run` with a Ray engine asks the cluster whether it answers (nothing started on it):
    a cluster that is down is said after the plan, as the run's one error, and the exit says it; a run that
    starts a local cluster says so."""
    cfg = tmp_path / "c.yaml"
    raw = {"name": "dry", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
           "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"},
           "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 30}}],
           "engine": {"type": "ray", "address": f"127.0.0.1:{free_tcp_port}"},
           "evaluation": {"metrics": ["nDCG@10"], "permutations": 200, "latency_queries": 0}}  # fmt: skip
    cfg.write_text(yaml.safe_dump(raw))
    assert cli.main(["run", str(cfg), "--dry-run"]) == 2
    got = capsys.readouterr()
    assert got.out.splitlines()[2].split()[:3] == ["bm25", "bm25", "compute"]  # the plan first
    assert got.out.splitlines()[-1].startswith("engine ray: the cluster does not answer")
    said = [line for line in got.err.splitlines() if line.startswith("stagebench: error:")]
    assert len(said) == 1 and f"no Ray cluster answers at 127.0.0.1:{free_tcp_port}" in said[0], got.err
    raw["engine"] = {"type": "ray", "address": None, "local_cpus": 2}
    cfg.write_text(yaml.safe_dump(raw))
    assert cli.main(["run", str(cfg), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "engine ray: a local Ray cluster is started for the run (2 CPUs)"
    assert not (tmp_path / "out").exists()  # nothing of the run written
