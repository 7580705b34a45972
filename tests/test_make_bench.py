"""`make bench`'s check, as the Makefile runs it: each of the four tables of the run held to the committed
results/default byte for byte - a difference in any one of them fails it, naming the file (issue 92: only
stage_table.txt was compared once)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO

TABLES = ("stage_table.csv", "stage_table.txt", "per_query.csv", "significance.json")


@pytest.mark.parametrize("changed", TABLES)
def test_make_bench_fails_when_any_of_the_four_tables_differs(tmp_path, changed):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for f in TABLES:
        shutil.copy(REPO / "results" / "default" / f, tmp_path / f)

    def bench() -> subprocess.CompletedProcess:
        return subprocess.run(["make", "-s", "--no-print-directory", "bench-tables", f"BUILT={tmp_path}",
                               f"COMMITTED={REPO / 'results' / 'default'}"], cwd=REPO, capture_output=True, text=True)  # fmt: skip

    ok = bench()
    assert ok.returncode == 0 and "byte-identical" in ok.stdout, ok.stdout + ok.stderr
    with open(tmp_path / changed, "a", encoding="utf-8") as fh:
        fh.write("\n")
    bad = bench()
    assert bad.returncode != 0 and f"{tmp_path}/{changed} differs from the committed" in bad.stdout, bad.stdout
