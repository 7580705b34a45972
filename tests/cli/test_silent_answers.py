"""The last silent answers: a threshold above every grade, CLI flags checked by the declaration of
the config key they stand for, upper bounds on the counts that set the work, YAML merge keys, and
`cache prune` beside a live writer. Each refusal is one line, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stagebench
from stagebench.cache import Cache
from stagebench.cli import main
from stagebench.config import load_config
from stagebench.errors import ConfigError, StagebenchError
from tests.conftest import REPO

QRELS = "q1 0 d1 2\nq1 0 d2 0\nq2 0 d3 1\n"
RUN = "q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 1.0 x\nq2 Q0 d3 1 1.0 x\n"


def one_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("stagebench: error: "), err
    return err[0]


def test_a_threshold_above_every_grade_is_refused_naming_the_highest(tmp_path, capsys):
    (tmp_path / "q.trec").write_text(QRELS)
    (tmp_path / "r.trec").write_text(RUN)
    assert main(["eval", str(tmp_path / "q.trec"), str(tmp_path / "r.trec"), "-m", "P@10", "--rel", "99"]) == 2
    assert "--rel 99 is above every grade in the qrels (highest: 2)" in one_error(capsys)
    assert main(["eval", str(tmp_path / "q.trec"), str(tmp_path / "r.trec"), "-m", "P(rel=3)@10"]) == 2
    assert "P(rel=3)@10: rel=3 is above every grade in the qrels (highest: 2)" in one_error(capsys)
    assert main(["eval", str(tmp_path / "q.trec"), str(tmp_path / "r.trec"), "-m", "P@10", "--rel", "2"]) == 0
    assert capsys.readouterr().out == "P@10\tall\t0.0500\n"  # q1: d1 of 10, q2: none at grade 2
    qrels = {"q1": {"d1": 2}}
    with pytest.raises(StagebenchError, match=r"relevance_threshold 3 is above every grade in the qrels \(highest: 2\)"):
        stagebench.evaluate(qrels, {"q1": {"d1": 1.0}}, ["P@10"], relevance_threshold=3)


@pytest.mark.parametrize("argv, message", [
    (["compare", "results/default", "results/default-trained", "--permutations", "-5"], "--permutations: must be >= 100, got -5"),
    (["compare", "results/default", "results/default-trained", "--permutations", "100000000"], "--permutations: must be <= 10000000"),
    (["compare", "results/default", "results/default-trained", "--alpha", "nan"], "--alpha: must be a finite number, got nan"),
    (["compare", "results/default", "results/default-trained", "--alpha", "1.5"], "--alpha: must be < 1, got 1.5"),
    (["check", "results/default", "{exp}", "--update", "--tolerance", "nan"], "--tolerance: must be a finite number, got nan"),
    (["check", "results/default", "{exp}", "--update", "--tolerance", "-1"], "--tolerance: must be >= 0, got -1.0"),
])  # fmt: skip
def test_a_flag_is_checked_as_its_config_key_is(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(REPO)
    exp = tmp_path / "expected.yaml"
    assert main([a.format(exp=exp) for a in argv]) == 2
    assert message in one_error(capsys)
    assert not exp.exists()


def test_the_counts_that_set_the_work_have_upper_bounds(tmp_path):
    for key, value, message in (("permutations", 10**8, "must be <= 10000000"), ("bootstrap", 10**7, "must be <= 1000000")):
        cfg = tmp_path / f"{key}.yaml"
        cfg.write_text("name: t\ndataset: {loader: beir, path: nowhere}\nstages:\n  - {name: bm25, type: bm25}\n"
                       f"evaluation: {{{key}: {value}}}\n")  # fmt: skip
        with pytest.raises(ConfigError, match=f"evaluation.{key}: {message}"):
            load_config(cfg)


def test_yaml_merge_keys_and_anchors_write_variants_of_one_stage(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\ndataset: {loader: beir, path: nowhere}\nstages:\n"
                   "  - &first {name: bm25, type: bm25, params: {k1: 0.9, top_k: 50}}\n"
                   "  - {<<: *first, name: bm25b}\n"
                   "  - <<: *first\n    name: stem\n    params: {stemmer: english}\n")  # fmt: skip
    c = load_config(cfg)
    assert [(s.name, s.params.k1, s.params.top_k, s.params.stemmer) for s in c.stages] == [
        ("bm25", 0.9, 50, None), ("bm25b", 0.9, 50, None), ("stem", 1.5, 1000, "english")]  # own keys override merged ones
    cfg.write_text(cfg.read_text().replace("name: bm25b}", "name: bm25b, name: x}"))
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_config(cfg)


def test_cache_prune_leaves_the_half_written_entry_of_a_live_process(tmp_path):
    """A live writer's temporary entry is its own (it renames or removes it); a dead one's is removed."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        cache = Cache(tmp_path / "cache")
        writing = tmp_path / "cache" / "runs" / f".tmp-{'a' * 32}-{live.pid}-1"
        killed = tmp_path / "cache" / "runs" / f".tmp-{'b' * 32}-{dead.pid}-1"
        for d in (writing, killed):
            d.mkdir(parents=True)
            (d / "run.trec").write_text("q1 Q0 d1 1 1.0 x\n")
        gone = cache.prune()
        assert [Path(r["path"]) for r in gone] == [killed] and writing.is_dir() and not killed.exists()
        assert cache.prune(everything=True) == [] and writing.is_dir()
    finally:
        live.kill()
        live.wait()
    assert [Path(r["path"]) for r in Cache(tmp_path / "cache").prune()] == [writing]
    assert os.listdir(tmp_path / "cache" / "runs") == []


def test_a_folder_missing_one_run_is_refused_by_every_reader(tmp_path, sweep_folder, sweep_folder_b, capsys):
    """A folder whose manifest records a run that is gone (the others here) is incomplete: open, compare
    and segments each refuse it in one line naming the file, instead of answering from per_query.csv.
    A committed folder (no run and no qrels at all, by design) is still read from its tables."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sweep_folder, broken)
    (broken / "runs" / "bm25.trec").unlink()
    with pytest.raises(StagebenchError, match=r"bm25\.trec: missing;.*incomplete"):
        stagebench.open(broken)
    for argv in (["compare", str(broken), str(sweep_folder_b), "--permutations", "100"],
                 ["compare", str(sweep_folder_b), str(broken), "--permutations", "100"],
                 ["segments", str(broken), "--by", "length"]):  # fmt: skip
        assert main(argv) == 2
        line = one_error(capsys)
        assert "bm25.trec: missing;" in line and "--measure" not in line, line
    shutil.rmtree(broken / "runs")
    (broken / "qrels.trec").unlink()
    assert main(["segments", str(broken), "--by", "length"]) == 0  # tables only: from per_query.csv
    assert "length" in capsys.readouterr().out


def _beir(folder: Path, texts: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(f'{{"_id": "d{i}", "title": "", "text": "{t}"}}\n' for i, t in enumerate(texts)))
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "red shoes"}\n{"_id": "q2", "text": "blue hat"}\n')
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t2\nq2\td1\t1\n")
    return folder


def test_a_gain_map_or_a_corpus_that_leaves_nothing_to_score_is_refused(tmp_path, capsys):
    """No grade the qrels hold with a positive gain, or no document with any text: every nDCG (or
    every measure) would be 0. Refused in one line before a stage runs, in a config, eval's API
    and the gain table itself; nothing is written."""
    qrels, run = {"q1": {"d0": 2, "d1": 1}}, {"q1": {"d0": 2.0, "d1": 1.0}}
    with pytest.raises(StagebenchError, match="a gain table needs a grade with a positive gain"):
        stagebench.evaluate(qrels, run, ["nDCG@10"], gain={0: 0, 1: 0, 2: 0})
    with pytest.raises(StagebenchError, match=r"no grade the qrels hold \(1, 2\) has a positive gain"):
        stagebench.evaluate(qrels, run, ["nDCG@10"], gain={0: 1, 1: 0, 2: 0})
    assert stagebench.evaluate(qrels, run, ["P@10"], gain={0: 1, 1: 0, 2: 0}).means["P@10"] == 0.2  # no gain read

    data = _beir(tmp_path / "beir", ["red shoes for running", "a blue hat", "green socks"])
    config = tmp_path / "c.yaml"
    base = (f"name: t\noutput: {tmp_path / 'out'}\ncache_dir: {tmp_path / 'cache'}\n"
            f"dataset: {{loader: beir, path: {data}}}\nstages: [{{name: bm25, type: bm25}}]\n")  # fmt: skip
    config.write_text(base + "evaluation: {gain: {0: 0, 1: 0, 2: 0}}\n")
    assert main(["run", str(config)]) == 2
    assert "evaluation.gain: a gain table needs a grade with a positive gain" in one_error(capsys)
    config.write_text(base + "evaluation: {gain: {0: 1, 1: 0, 2: 0}}\n")
    assert main(["run", str(config)]) == 2
    assert "evaluation.gain: the gain map (2=0, 1=0, 0=1) gives no positive gain to any grade the qrels hold (1, 2)" \
        in one_error(capsys)  # fmt: skip

    empty = _beir(tmp_path / "empty", ["", " ", ""])
    config.write_text(base.replace(str(data), str(empty)))
    assert main(["run", str(config)]) == 2
    assert "every document's text is empty under text_template" in one_error(capsys)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
