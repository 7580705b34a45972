"""stagebench tune: trials through the stage cache, decisions that never read the judgments of the
queries they are scored on (k-fold and split), a killed tuning resumed, the tuned config runnable,
and every tune: value that cannot make sense refused at load. Real BM25 on real data (Cranfield,
the synthetic ESCI layout), no mock."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from stagebench.config import load_config
from stagebench.errors import ConfigError
from stagebench.pipeline import run_config
from stagebench.fitting.tune import run_tune
from tests.conftest import REPO, child_path, stagebench_cli

SPACE = "{stemmer: [null, english], k1: [0.5, 1.2, 3.0]}"


def beir_copy(cranfield: Path, root: Path, keep: int = 60, change: set[str] | None = None) -> Path:
    """A BEIR folder over Cranfield's corpus and queries with the qrels of its first ``keep`` judged
    queries; the queries in ``change`` get other judgments (their relevant documents moved to
    documents that were not judged for them)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in ("corpus.jsonl", "queries.jsonl"):
        (root / f).unlink(missing_ok=True)
        (root / f).symlink_to(cranfield / f)
    rows = [line.split("\t") for line in (cranfield / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qids = sorted({r[0] for r in rows}, key=int)[:keep]
    docs = sorted({r[1] for r in rows}, key=int)
    out = ["query-id\tcorpus-id\tscore"]
    for q, d, g in rows:
        if q in qids:
            if change and q in change:
                d = docs[(docs.index(d) + 700) % len(docs)]
            out.append(f"{q}\t{d}\t{g}")
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text("\n".join(out) + "\n")
    return root


def config_file(tmp: Path, data: str, tune_yaml: str | None, name: str = "t", cache: str = "cache", more: str = "") -> Path:
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(f"name: {name}\noutput: {tmp / name}\ncache_dir: {tmp / cache}\ndataset: {data}\n"
                   f"stages:\n  - {{name: bm25, type: bm25, params: {{top_k: 100}}}}\n{more}"
                   "evaluation: {metrics: [nDCG@10, R@100], permutations: 1000}\n"
                   + (f"tune: {tune_yaml}\n" if tune_yaml else ""))  # fmt: skip
    return cfg


def test_kfold_decisions_never_read_their_own_folds_judgments(cranfield, tmp_path, caplog):
    """Fold 1's judgments changed: fold 1's choice and every number it was made on stay the same,
    while the other folds' tuning curves move (fold 1 is among their tuning queries). The k1 grid
    analyses the corpus once per stemmer; the tuned config loads and carries the chosen params."""
    caplog.set_level(logging.INFO, logger="stagebench")
    data = beir_copy(cranfield, tmp_path / "a")
    knobs = f"{{stages: [bm25], queries: kfold, folds: 3, space: {{bm25: {SPACE}}}}}"
    first = run_tune(load_config(config_file(tmp_path, f"{{loader: beir, path: {data}}}", knobs)))
    assert caplog.text.count("computed BM25 index") == 2  # 7 trials, 2 analyses (k1 weighs a cached one)
    rec = first.record
    assert rec["queries"]["mode"] == "kfold" and rec["counts"] == {"trials": 7, "computed": 7, "cached": 0}
    assert [t["params"] for t in rec["trials"]][0] == {}  # trial 0: the config's own params
    fold1 = set(rec["queries"]["decisions"]["fold 1"]["report_on"])
    assert 0 < len(fold1) < 60
    folds = [set(d["report_on"]) for d in rec["queries"]["decisions"].values()]
    assert set.union(*folds) == {q for f in folds for q in f} and sum(map(len, folds)) == len(set.union(*folds))

    changed = beir_copy(cranfield, tmp_path / "b", change=fold1)
    again = run_tune(load_config(config_file(tmp_path, f"{{loader: beir, path: {changed}}}", knobs, name="u")))
    a, b = first.record, again.record
    assert b["chosen"]["bm25"]["fold 1"] == a["chosen"]["bm25"]["fold 1"]
    assert [t["means"]["fold 1"] for t in b["trials"]] == [t["means"]["fold 1"] for t in a["trials"]]
    assert [t["means"]["fold 2"] for t in b["trials"]] != [t["means"]["fold 2"] for t in a["trials"]]  # the test has teeth
    # the cross-validated test figure of fold 1's queries is read with fold 1's changed judgments: it moves
    assert b["test"]["bm25"]["measures"]["nDCG@10"] != a["test"]["bm25"]["measures"]["nDCG@10"]

    tuned = load_config(first.output / "tuned.yaml")
    p = tuned.stages[0].params
    assert {k: getattr(p, k) for k in rec["tuned_params"]["bm25"]} == rec["tuned_params"]["bm25"]
    assert tuned.tune is None and tuned.output.endswith("t-tuned")
    table = (first.output / "table.md").read_text()
    assert "3-fold cross-validation" in table and "| nDCG@10 |" in table and "unjudged documents count as irrelevant" in table
    lines = (first.output / "trials.tsv").read_text().splitlines()
    assert len(lines) == 8 and lines[0].split("\t")[-3:] == ["nDCG@10 (fold 1)", "nDCG@10 (fold 2)", "nDCG@10 (fold 3)"]


def relabel_test_split(src: Path, dst: Path) -> None:
    """The dataset with every test-split label rotated (E->S->C->I->E): the train split untouched."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "shopping_queries_dataset_examples.parquet":
            (dst / f.name).symlink_to(f)
    ex = pd.read_parquet(src / "shopping_queries_dataset_examples.parquet")
    rot = {"E": "S", "S": "C", "C": "I", "I": "E"}
    test = ex["split"] == "test"
    ex.loc[test, "esci_label"] = ex.loc[test, "esci_label"].map(rot)
    ex.to_parquet(dst / "shopping_queries_dataset_examples.parquet")


def test_split_tuning_never_reads_the_test_judgments(small_synthetic, tmp_path):
    """Tuned on the train split: the test split relabelled leaves every trial and choice as it was,
    and only the default-against-tuned table moves. The test split itself is refused as a tuning split."""
    knobs = f"{{stages: [bm25], space: {{bm25: {SPACE}}}}}"
    first = run_tune(load_config(config_file(tmp_path, f"{{loader: esci, path: {small_synthetic}, split: test}}", knobs)))
    other = tmp_path / "relabelled"
    relabel_test_split(small_synthetic, other)
    again = run_tune(load_config(config_file(tmp_path, f"{{loader: esci, path: {other}, split: test}}", knobs, name="u")))
    a, b = first.record, again.record
    assert a["queries"]["mode"] == "split" and list(a["queries"]["decisions"]) == ["train"]
    assert [t["means"] for t in a["trials"]] == [t["means"] for t in b["trials"]] and a["chosen"] == b["chosen"]
    assert a["test"] != b["test"]  # the test judgments did change, and reach only the test table
    assert b["counts"]["cached"] == 7  # the trial runs did not change either: same corpus, same train queries

    cfg = config_file(tmp_path, f"{{loader: esci, path: {small_synthetic}, split: train}}", knobs, name="v")
    with pytest.raises(ConfigError, match="tune.split: 'train' is the split the table reports.*refused"):
        run_tune(load_config(cfg))


def test_a_run_finds_the_tuning_of_its_first_stage_and_says_its_baseline_is_weak(cranfield, tmp_path):
    """Tuned (5-fold over Cranfield's 225 queries), then a run of a config with that BM25 stage and a
    later one: the table says the baseline is beaten, with the tuning's figures, and how much of the
    later stage's gain would remain against the tuned BM25; the note survives `stagebench table`."""
    data = f"{{loader: beir, path: {cranfield}}}"
    knobs = "{stages: [bm25], queries: kfold, space: {bm25: {stemmer: [null, english], stopwords: [false, true], k1: [1.2, 3.0]}}}"
    rec = run_tune(load_config(config_file(tmp_path, data, knobs))).record
    wins = [m for m, r in rec["test"]["bm25"]["measures"].items() if r["significant"] and r["tuned"] > r["default"]]
    assert wins == ["nDCG@10", "R@100"]
    stem = "  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english, stopwords: true}}\n"
    result = run_config(load_config(config_file(tmp_path, data, None, name="r", more=stem)))
    note = [n for n in result.table.notes if n.startswith("(!) weak baseline: bm25")]
    assert len(note) == 1, result.table.notes
    m = rec["test"]["bm25"]["measures"]["nDCG@10"]
    assert f"nDCG@10 {m['tuned']:.4f} against {m['default']:.4f}" in note[0] and rec["queries"]["why"] in note[0]
    got = {r.stage: r.metrics["nDCG@10"] for r in result.table.rows}
    assert got["bm25"] == pytest.approx(m["default"], abs=1e-6)
    gain, left = got["stem"] - got["bm25"], got["stem"] - m["tuned"]
    assert gain > 0 and f"stem {gain:+.4f} -> {left:+.4f}" in note[0]
    assert note[0] in (tmp_path / "r" / "stage_table.txt").read_text()
    r = stagebench_cli("table", tmp_path / "r", cwd=REPO)
    assert r.returncode == 0 and note[0] in r.stdout


@pytest.mark.parametrize("knobs, message", [
    ("{stages: [bm52]}", "tune.stages[0]: unknown stage 'bm52'"),
    ("{stages: [bm25], space: {bm25: {k2: [1]}}}", "tune.space.bm25.k2[0] (bm25).params.k2: unknown key"),
    ("{stages: [bm25], space: {bm25: {k1: [1.2, -1]}}}", "tune.space.bm25.k1[1] (bm25).params.k1: must be >= 0"),
    ("{stages: [bm25], space: {bm25: {stemmer: [klingon]}}}", "unknown stemmer 'klingon'"),
    ("{stages: [bm25], space: {bm25: {k1: []}}}", "tune.space.bm25.k1: give at least one value"),
    ("{stages: [bm25], trials: 10}", "tune.trials: the grid of stage bm25 has 96 combinations, above the budget of 10"),
    ("{stages: [bm25], measure: nDCG@x}", "tune.measure:"),
    ("{stages: [bm25], folds: 1}", "tune.folds: must be >= 2"),
    ("{stages: [bm25], queries: test}", "tune.queries:"),
    ("{stages: []}", "tune.stages: must not be empty"),
])  # fmt: skip
def test_a_tune_section_that_cannot_make_sense_fails_at_load(tmp_path, knobs, message):
    cfg = config_file(tmp_path, "{loader: beir, path: nowhere}", knobs)
    with pytest.raises(ConfigError, match=None) as err:
        load_config(cfg)
    assert message in str(err.value) and str(cfg) in str(err.value)


@pytest.mark.slow
def test_a_killed_tuning_resumes_without_recomputing_finished_trials(small_synthetic, tmp_path):
    """``stagebench tune`` SIGKILLed after some trials: no tuning folder, and the rerun reads every
    trial that finished from the cache, computes the rest, and writes what an uninterrupted tuning
    writes."""
    knobs = "{stages: [bm25], space: {bm25: {stemmer: [null, english, porter], stopwords: [false, true], k1: [0.5, 0.9, 1.2, 1.5, 2.0, 3.0]}}}"
    data = f"{{loader: esci, path: {small_synthetic}, split: test}}"
    cfg = config_file(tmp_path, data, knobs)
    env = {**os.environ, "PYTHONPATH": child_path()}
    proc = subprocess.Popen([sys.executable, "-m", "stagebench", "tune", str(cfg)], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)  # fmt: skip
    done = []
    assert proc.stderr is not None
    for line in proc.stderr:
        if "tune bm25: trial " in line and "(computed)" in line:
            done.append(line.split("trial ")[1].split("/")[0])
            if len(done) == 5:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the tuning ended before it could be killed"
    assert not (tmp_path / "t-tuning").exists() and not list(tmp_path.glob(".t-tuning*"))

    r = subprocess.run([sys.executable, "-m", "stagebench", "tune", str(cfg)], cwd=REPO, env=env, capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    cached = [ln.split("trial ")[1].split("/")[0] for ln in r.stderr.splitlines() if "tune bm25: trial" in ln and "(cached)" in ln]
    assert set(done) <= set(cached), (done, cached)
    assert f"36 trials, {36 - len(cached)} computed, {len(cached)} from the cache" in r.stderr

    fresh = config_file(tmp_path, data, knobs, name="f", cache="cache-fresh")
    r2 = subprocess.run([sys.executable, "-m", "stagebench", "tune", str(fresh)], cwd=REPO, env=env, capture_output=True,
                        text=True)  # fmt: skip
    assert r2.returncode == 0, r2.stderr[-2000:]
    a, b = (json.loads((tmp_path / n / "tuning.json").read_text()) for n in ("t-tuning", "f-tuning"))
    for rec in (a, b):
        for key in ("seconds", "counts", "files", "config", "name"):
            rec.pop(key)
        for t in rec["trials"]:
            t.pop("seconds"), t.pop("status")
    assert a == b
