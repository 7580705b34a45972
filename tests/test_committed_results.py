"""results/README.md (issue 93): every committed entry of results/ is listed, and an entry kept "as written at
commit X" names the commit its folder's manifest records, or, for folders written before commits were
recorded, the last commit that changed it - so a folder regenerated without its row updated, or a new one
left out, fails here."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.conftest import REPO

RESULTS = REPO / "results"
ROW = re.compile(r"^\| (?P<entry>[^|]+) \| (?P<state>[^|]+) \|")


def rows() -> dict[str, str]:
    out = {}
    for line in (RESULTS / "README.md").read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m and "`" in m["entry"]:
            for name in re.findall(r"`([^`]+)`", m["entry"]):
                out[name.rstrip("/")] = m["state"].strip()
    return out


def last_commit(path: str) -> str | None:
    got = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h", "--abbrev=7", "--", path],
                         capture_output=True, text=True)  # fmt: skip
    return got.stdout.strip() or None if got.returncode == 0 else None


def test_every_committed_entry_is_listed_with_how_it_is_kept_true():
    listed = rows()
    present = {p.name for p in RESULTS.iterdir() if p.name != "README.md" and not p.name.startswith(".")}  # not a run's staging
    assert present == set(listed), (sorted(present - set(listed)), sorted(set(listed) - present))
    for name, state in listed.items():
        assert state.startswith(("current", "as written at commit ")), (name, state)


def test_an_entry_as_written_names_the_commit_that_wrote_it():
    shallow = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
    if last_commit("results") is None or shallow.stdout.strip() != "false":
        pytest.skip("not a git checkout with its whole history (the commits that wrote the folders cannot be read)")
    for name, state in rows().items():
        m = re.match(r"as written at commit ([0-9a-f]{7,40})", state)
        if not m:
            continue
        manifest = RESULTS / name / "manifest.json"
        code = json.loads(manifest.read_text()).get("code") if manifest.is_file() else None
        if code and code.get("commit"):
            assert code["commit"].startswith(m[1]), (name, code)  # the commit the run recorded
        else:
            assert last_commit(f"results/{name}") == m[1][:7], (name, last_commit(f"results/{name}"))


def test_a_run_records_the_commit_of_the_code_that_ran_it(tmp_path, tiny_synthetic):
    """A run from this checkout records its commit (and whether tracked files differed) in the manifest, and its
    report says it; the committed folders written before that say so instead."""
    from stagebench import api
    from stagebench.record import Manifest

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    out = api.run({"name": "c", "output": str(tmp_path / "c"), "cache_dir": str(tmp_path / "cache"),
                   "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"},
                   "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 20}}],
                   "evaluation": {"metrics": ["nDCG@10"], "permutations": 100, "latency_queries": 0}}).output  # fmt: skip
    code = json.loads((out / "manifest.json").read_text())["code"]
    assert code["commit"] == head.stdout.strip() and isinstance(code["dirty"], bool)
    said = Manifest.read(out).written_by
    assert said.startswith("stagebench ") and f"at commit {head.stdout.strip()[:12]}" in said
    assert said in (out / "report.html").read_text()
    assert "no commit recorded" in Manifest.read(RESULTS / "explore").written_by
