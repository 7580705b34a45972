"""The committed explorable folder (issue 70): results/explore holds its runs and qrels, every file
verified against its manifest, so a fresh clone can run the README's first exploring commands; its
stored table is what its runs score now (it cannot go stale unnoticed)."""

from __future__ import annotations

import json

import pytest

from stagebench import api
from stagebench.results.folder import RunFolder
from stagebench.results.scoring import score_folder
from tests.conftest import REPO

EXPLORE = REPO / "results" / "explore"


def test_the_committed_explore_folder_is_whole_and_its_table_is_what_its_runs_score():
    rf = RunFolder.open(EXPLORE)
    assert rf.holds_runs()
    qrels, runs = rf.qrels(), rf.runs()  # each verified against the manifest's sha256
    scored = score_folder(rf.manifest, qrels, runs)
    stored = {r["stage"]: r for r in json.loads((EXPLORE / "stage_table.json").read_text())}
    for row in scored.table.rows:
        for m in ("nDCG@10", "RR@10", "R@100", "P@10"):
            assert stored[row.stage][m] == pytest.approx(row.metrics[m], abs=5e-7), (row.stage, m)


def test_the_readmes_exploring_commands_work_on_it():
    text = api.show(EXPLORE, "0")
    assert text.startswith("query 0:") and "cross_encoder: nDCG@10" in text
    exp = api.compare_runs(EXPLORE / "qrels.trec", [EXPLORE / "runs" / "bm25.trec", EXPLORE / "runs" / "rrf.trec"],
                           ["nDCG@10"], permutations=200)  # fmt: skip
    assert exp.runs == ["bm25", "rrf"]
    assert list(api.open(EXPLORE).table.index) == ["bm25", "dense", "rrf", "cross_encoder"]
