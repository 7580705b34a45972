"""Every cache entry kind corrupted every way (issue 50): detected on read by its checksums, logged,
removed and recomputed - never served.

The entries are real: a run of a small cascade with a model stage of each backend (BM25's analysed
corpus, the dense stage's corpus embeddings, the cross-encoder's per-token INT8 model variant, every
stage's run and latency), a tuning (what it found, for the weak-baseline note) and an LLM answer
(written by the LLM stages' own cache path, answered by the scripted chat backend). Each is
corrupted six ways: its largest member truncated to half, one byte flipped, emptied, replaced by a
folder, or deleted, and its entry.json cut short.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stagebench.cache import ENTRY_FILE, Cache, memo
from stagebench.llm.chat import cached_answer
from stagebench.llm.request import ChatRequest, Completion
from tests.conftest import child_path
from tests.scripted_chat import ScriptedChat

#: one worker builds the entries once (each worker would build its own module fixture)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("corruption")]

CONFIG = """name: corrupt
output: out
cache_dir: cache
dataset: {{loader: esci, path: {data}, split: test, max_queries: 4}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 20, threads: 1}}}}
  - {{name: dense, type: dense, params: {{top_k: 20, max_length: 64}}}}
  - {{name: rrf, type: rrf, inputs: [bm25, dense]}}
  - {{name: ce, type: cross_encoder, inputs: [rrf], params: {{top_n: 5, precision: int8-token, max_length: 64}}}}
evaluation: {{latency_queries: 1, permutations: 100, bootstrap: 100}}
tune: {{stages: [bm25], queries: kfold, folds: 2, space: {{bm25: {{k1: [0.9, 1.5]}}}}}}
"""
KINDS = ("runs", "latency", "bm25-index", "embeddings", "models", "tuning", "llm")
TABLES = ("stage_table.txt", "per_query.csv", "runs/bm25.trec", "runs/dense.trec", "runs/rrf.trec", "runs/ce.trec")



def _largest(entry: Path) -> Path:
    files = [p for p in entry.rglob("*") if p.is_file() and p.name != ENTRY_FILE]
    return max(files, key=lambda p: p.stat().st_size)


def _truncate(p: Path) -> None:
    with open(p, "r+b") as fh:
        fh.truncate(p.stat().st_size // 2)


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))


def _folder(p: Path) -> None:
    p.unlink()
    p.mkdir()
    (p / "x").write_text("not the file")


CORRUPTIONS = {
    "truncated": lambda e: _truncate(_largest(e)),
    "a flipped byte": lambda e: _flip(_largest(e)),
    "empty": lambda e: _largest(e).write_bytes(b""),
    "a folder where a file was": lambda e: _folder(_largest(e)),
    "a missing member": lambda e: _largest(e).unlink(),
    "entry.json cut short": lambda e: _truncate(e / ENTRY_FILE),
}


@pytest.fixture(scope="module")
def filled(tmp_path_factory, tiny_synthetic) -> Path:
    """A work folder whose cache holds a real entry of every kind, and the run's results folder."""
    work = tmp_path_factory.mktemp("corrupt")
    (work / "c.yaml").write_text(CONFIG.format(data=tiny_synthetic))
    env = {**os.environ, "PYTHONPATH": child_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for argv in (["run", "c.yaml"], ["tune", "c.yaml"]):
        r = subprocess.run([sys.executable, "-m", "stagebench", "-q", *argv], cwd=work, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
    backend = ScriptedChat(lambda req: Completion("[2] > [1]", 10, 3, 0.01))
    req = ChatRequest((("user", "rank [1] a [2] b"),), 8, 0.0, 0)
    cached_answer(Cache(work / "cache"), backend, backend.identity(), req, "scripted", "stage llm", "answer")
    assert {d.name for d in (work / "cache").iterdir() if d.is_dir()} >= set(KINDS)
    return work


def _entry(root: Path, kind: str) -> Path:
    return next(d for d in sorted((root / kind).iterdir()) if d.is_dir() and not d.name.startswith("."))


@pytest.mark.parametrize("kind", KINDS)
def test_every_corruption_of_an_entry_is_detected_removed_and_recomputed(filled, tmp_path, kind, caplog):
    for how, corrupt in CORRUPTIONS.items():
        root = tmp_path / how.replace(" ", "-")
        shutil.copytree(filled / "cache" / kind, root / kind)
        entry = _entry(root, kind)
        parts = json.loads((entry / ENTRY_FILE).read_text())["key_parts"]
        corrupt(entry)
        cache = Cache(root)
        computed = []
        with caplog.at_level(logging.WARNING, logger="stagebench"):
            caplog.clear()
            m = memo(cache, kind, parts, lambda: computed.append(1) or "fresh",
                     save=lambda v, folder: (folder / "v.txt").write_text(v), load=lambda e: "served",
                     label="test", what=kind)  # fmt: skip
        assert computed == [1] and m.value == "fresh" and m.status == "computed", f"{kind}, {how}: served"
        assert m.key == entry.name, f"{kind}: the recorded key parts give another key"
        warned = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
        assert len(warned) == 1 and "recomputing" in warned[0] and entry.name in warned[0], (kind, how, warned)
        assert cache.get(kind, entry.name) is not None  # the recomputed value replaced it


def test_a_rerun_over_a_corrupted_entry_of_every_kind_gives_the_same_tables(filled, tmp_path):
    """One flipped byte in an entry of every kind the run reads, then the same command: each is
    recomputed (the log says so), and the tables and runs are byte-identical."""
    work = tmp_path / "work"
    shutil.copytree(filled, work, ignore=shutil.ignore_patterns("out"))
    want = {f: (filled / "out" / f).read_bytes() for f in TABLES}
    for kind in ("runs", "latency", "bm25-index", "embeddings", "models"):
        for entry in [d for d in (work / "cache" / kind).iterdir() if d.is_dir()]:
            _flip(_largest(entry))
    env = {**os.environ, "PYTHONPATH": child_path(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "stagebench", "run", "c.yaml"], cwd=work, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    for kind in ("runs", "latency", "bm25-index", "embeddings", "models"):
        assert f"cache: {kind} entry" in r.stderr and "is corrupt" in r.stderr, kind
    assert {f: (work / "out" / f).read_bytes() for f in TABLES} == want
