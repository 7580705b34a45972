"""Crash-proof by construction (issue 50): every durable write of a command, faulted.

tests/faults.py counts the write points of a command (a file opened for writing, a folder made, a
rename) and makes one of them SIGKILL the process, tear the file it writes (half its bytes, then
SIGKILL) or raise ENOSPC or EIO; then the command runs again. Each path below must hold at every
point it is faulted at: the rerun's outputs byte-identical to an uninterrupted run's, the user's
file beside them unchanged, nothing partial left behind, and an I/O error one line naming the path
and the cause.

In `make test` each path is faulted at the first point of each kind of write (the kind: the
operation and where it writes, process ids and cache keys taken out) with every fault its operation
can meet, less those that take the path of another: EIO (ENOSPC's), a torn rename (the torn
file's), every folder made but the first (a kill there is a kill at the write before); the run leaves
out the latency entries (the runs' Cache.put) and tune its trials' entries (a run's). `make faults` faults every point with every fault and writes
the table (results/faults.md). The model path is faulted only at the writes no other path makes (the
model variant entry), with a kill and a full disk: a model stage costs seconds per run, not a tenth
of one.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, child_path

pytestmark = pytest.mark.slow

CASCADE = """name: faults
output: out
cache_dir: cache
dataset: {{loader: esci, path: {data}, split: test}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 50, threads: 1}}}}
  - {{name: bm25s, type: bm25, params: {{top_k: 50, stemmer: english, threads: 1}}}}
  - {{name: rrf, type: rrf, inputs: [bm25, bm25s]}}
  - {{name: boost, type: plugin, target: "examples.title_boost:TitleBoostReranker", inputs: [rrf], params: {{top_n: 20}}}}
evaluation: {{latency_queries: 2, permutations: 100, bootstrap: 100}}
"""
TABLES = ["out/runs/*.trec", "out/stage_table.*", "out/per_query.csv", "out/significance.json"]
USER = {"notes.txt": "the user's own notes, beside the results\n"}
EVERY = os.environ.get("STAGEBENCH_FAULT_POINTS") == "every"



def _cli(work: Path, *argv: str) -> None:
    r = subprocess.run([sys.executable, "-m", "stagebench", "-q", *argv], cwd=work, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": child_path()})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]


def drive(tmp: Path, spec: dict) -> dict:
    """Run the harness in its own process (it forks a child per command). ``make faults`` sets
    $STAGEBENCH_FAULT_POINTS=every (every point, not the first of each kind) and
    $STAGEBENCH_FAULT_REPORT (a folder: what each path found, for the table in results/faults.md)."""
    spec = {"work": str(tmp / "work"), "logs": str(tmp / "logs"), "roots": [str(tmp / "work")], "user_files": USER,
            "points": "every" if EVERY else "kinds", **({} if EVERY else {"fast": True}), **spec}  # fmt: skip
    (tmp / "spec.json").write_text(json.dumps(spec))
    r = subprocess.run([sys.executable, "-m", "tests.faults", str(tmp / "spec.json")], cwd=REPO, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": child_path()})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(r.stdout)
    if report := os.environ.get("STAGEBENCH_FAULT_REPORT"):
        name = " ".join(spec["command"])
        Path(report).mkdir(parents=True, exist_ok=True)
        (Path(report) / f"{name.replace(' ', '_').replace('/', '_')}.json").write_text(json.dumps({"command": name, **found}))
    return found


def held(found: dict) -> None:
    broken = [f"{r['op']} {r['kind']} (point {r['n']}), {r['fault']}: {'; '.join(r['problems'])}"
              for r in found["results"] if not r["held"]]  # fmt: skip
    assert found["results"] and not broken, "\n".join(broken)


def cascade_work(tmp: Path, data: Path) -> Path:
    work = tmp / "work"
    work.mkdir(parents=True)
    (work / "run.yaml").write_text(CASCADE.format(data=data))
    return work


def test_a_run_survives_a_fault_at_every_kind_of_write(tmp_path, tiny_synthetic):
    """The cascade's run: the staging folder and its mark, every file of the results folder, the
    folder swapped in, and the cache entries of each kind (BM25's analysed corpus, runs, latency)."""
    cascade_work(tmp_path, tiny_synthetic)
    # make test leaves out the latency entries: written by the same Cache.put as the runs' (make faults: every point)
    found = drive(tmp_path, {"command": ["run", "run.yaml"], "compare": TABLES,
                             "only": "" if EVERY else "^(?!.*cache/latency)"})  # fmt: skip
    held(found)
    kinds = set(found["kinds"])
    assert {"rename <work>/out", "mkdir <work>/.out.partial-<pid>", "rename <work>/cache/runs/<key>",
            "rename <work>/cache/bm25-index/<key>"} <= kinds, kinds  # fmt: skip
    assert {r["fault"] for r in found["results"]} >= {"kill", "torn", "enospc"}


def test_the_judge_and_a_judging_round_survive_a_fault_at_every_kind_of_write(tmp_path, tiny_synthetic):
    """`stagebench judge` writes into a finished folder (the judgments, the manifest, the judge's
    tables); `plan-judgments` writes a worksheet; `add-judgments` a new folder."""
    work = cascade_work(tmp_path / "judge", tiny_synthetic)
    _cli(work, "run", "run.yaml")
    (work / "judge.yaml").write_text("judge: {backend: rules, depth: 5, sample: 4}\n")
    held(drive(tmp_path / "judge", {"command": ["judge", "out", "--config", "judge.yaml"],
                                    "compare": ["out/judge/judgments.tsv", "out/judge/qrels.filled.*",
                                                "out/judge/stage_table.*", "out/stage_table.*"]}))  # fmt: skip

    work = cascade_work(tmp_path / "sheet", tiny_synthetic)
    _cli(work, "run", "run.yaml")
    held(drive(tmp_path / "sheet", {"command": ["plan-judgments", "out", "--budget", "6", "--strategy", "depth",
                                                "--output", "sheet.csv"], "compare": ["sheet.*"]}))  # fmt: skip

    work = tmp_path / "sheet" / "work"
    with open(work / "sheet.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    with open(work / "graded.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        grade = next(k for k in rows[0] if k.startswith("grade"))
        w.writerows({**r, grade: "E"} for r in rows)
    for f in ("sheet.csv", "sheet.jsonl"):
        (work / f).unlink()
    (tmp_path / "sheet" / "logs").rename(tmp_path / "sheet" / "logs-plan")
    if not EVERY:  # make test: a new folder staged and swapped in, as a run's (make faults: every point)
        return
    held(drive(tmp_path / "sheet", {"command": ["add-judgments", "out", "graded.csv", "--output", "more"],
                                    "compare": ["more/stage_table.*", "more/qrels.trec", "more/runs/*.trec"],
                                    "only": "<work>/more|\\.more\\."}))  # fmt: skip


def test_a_tuning_survives_a_fault_at_every_kind_of_write(tmp_path, tiny_synthetic):
    """`stagebench tune`: its trials through the stage cache, the tuning folder swapped in, and what
    it found stored for the weak-baseline note."""
    work = cascade_work(tmp_path, tiny_synthetic)
    (work / "tune.yaml").write_text(CASCADE.format(data=tiny_synthetic).split("stages:")[0] + """stages:
  - {name: bm25, type: bm25, params: {top_k: 50, threads: 1}}
evaluation: {latency_queries: 0, permutations: 100, bootstrap: 100}
tune: {stages: [bm25], queries: kfold, folds: 2, space: {bm25: {k1: [0.9, 1.5]}}}
""")
    # trials.tsv says which trials were computed or cached, and their seconds: the rest is compared
    found = drive(tmp_path, {"command": ["tune", "tune.yaml"], "compare": ["out-tuning/table.md", "out-tuning/tuned.yaml"],
                             "only": "" if EVERY else "tuning|write-test|^mkdir <work>/cache$"})  # trials: as a run's
    held(found)
    assert any("tuning" in k for k in found["kinds"]), found["kinds"]


@pytest.mark.skipif(not EVERY, reason="make faults only (a model stage costs seconds a run); make test holds the bug it "
                    "found with test_a_cache_entry_that_cannot_be_renamed_into_place_is_an_error_not_stored")
def test_a_model_variant_survives_a_kill_or_a_full_disk_at_each_of_its_writes(tmp_path, tiny_synthetic):
    """The cross-encoder's per-token INT8 variant, built once into the cache: a kill or a full disk at
    the rename that stores it (make faults: at each of its files' renames too). The stage's run and
    the results folder are written as the model-free run's, above."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "ce.yaml").write_text(CASCADE.format(data=tiny_synthetic).split("stages:")[0].replace(
        "split: test}", "split: test, max_queries: 3}") + """stages:
  - {name: bm25, type: bm25, params: {top_k: 20, threads: 1}}
  - {name: ce, type: cross_encoder, inputs: [bm25], params: {top_n: 5, precision: int8-token, max_length: 64}}
evaluation: {latency_queries: 0, permutations: 100, bootstrap: 100}
""")  # fmt: skip
    found = drive(tmp_path, {"command": ["run", "ce.yaml"], "compare": TABLES, "only": "^rename <work>/cache/models",
                             "faults": ["kill", "enospc"], "preload": ["onnxruntime", "onnx", "tokenizers"]})  # fmt: skip
    held(found)
    assert any("cache/models" in k for k in found["kinds"]), found["kinds"]


def test_a_cache_entry_that_cannot_be_renamed_into_place_is_an_error_not_stored(tmp_path, monkeypatch):
    """What the model-variant path found (make faults): a full disk at the rename that stores an entry
    was taken for another process storing the same key, and the entry was reported stored while
    absent. Only a present entry is another writer's; anything else is the error, naming the entry."""
    import errno

    from stagebench.cache import Cache

    cache = Cache(tmp_path / "cache")
    real = os.replace

    def full(src, dst, *a, **kw):
        if not str(os.fspath(src)).endswith(".part-" + str(os.getpid())) and ".tmp-" in str(src):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(dst))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space left on device") as err:
        cache.put("models", "k1", lambda folder: (folder / "model.onnx").write_bytes(b"weights"), {})
    assert "models/k1" in str(err.value.filename)
    monkeypatch.setattr(os, "replace", real)
    assert cache.get("models", "k1") is None and not list((tmp_path / "cache" / "models").iterdir())
