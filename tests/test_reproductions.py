"""stagebench reproduce: the offline reproductions run and pass, the ones that need the hub are
listed as skipped with the reason, and the matrix says so (a real run on Cranfield, no mock)."""

from __future__ import annotations

import os

import pytest

from stagebench.reproductions import Reproduction, find, missing_needs
from stagebench.outputs import MATRIX_MARK
from tests.conftest import REPO, shared_path, stagebench_cli


@pytest.mark.slow
def test_offline_reproductions_pass_and_the_hub_one_is_skipped_with_its_reason(tmp_path, session_cache):
    shared_path("cranfield")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = stagebench_cli("reproduce", "cranfield_bm25", "search_ranking_stack", "--output-root", tmp_path / "out",
                       "--matrix", tmp_path / "m.md", "--cache-dir", session_cache, cwd=REPO, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    m = (tmp_path / "m.md").read_text()
    assert m == f"{MATRIX_MARK}\n{r.stdout}"  # the file names what wrote it (stagebench.outputs), then the matrix printed
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in m.splitlines() if line.startswith("| c")}
    for metric, want in (("nDCG@10", "0.3250"), ("RR", "0.4950"), ("R@100", "0.6780")):
        line = rows[("cranfield_bm25", "bm25", metric)]
        assert want in line and ("**OK**" in line or "**within tolerance**" in line), line
    assert "| search_ranking_stack | cross_encoder | nDCG@10 | 0.6450 | - |" in m
    assert "search_ranking_stack skipped: offline: it needs the Hugging Face hub" in m
    assert "| search_ranking_stack | llm | - |" in m and "not reproduced" in m
    assert (tmp_path / "out" / "cranfield_bm25" / "stage_table.json").is_file()
    assert not (tmp_path / "out" / "search_ranking_stack").exists()
    # one reproduction again into the same matrix: its rows rewritten, the other's kept as they were, and said so
    again = stagebench_cli("reproduce", "search_ranking_stack", "--output-root", tmp_path / "out", "--matrix",
                           tmp_path / "m.md", "--cache-dir", session_cache, cwd=REPO, env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    m2 = (tmp_path / "m.md").read_text()
    assert [line for line in m2.splitlines() if line.startswith("| cranfield_bm25 |")] == \
        [line for line in m.splitlines() if line.startswith("| cranfield_bm25 |")] != []  # fmt: skip
    assert "| search_ranking_stack | cross_encoder | nDCG@10 | 0.6450 | - |" in m2
    assert "kept: the rows of cranfield_bm25 are an earlier `stagebench reproduce`'s" in m2
    assert "* **cranfield_bm25**" in m2 and m2.count("* **search_ranking_stack**") == 1


def test_every_reproduction_folder_is_complete_and_its_needs_are_checked(tmp_path):
    reps = {r.name: r for r in find(REPO)}
    assert {"cranfield_bm25", "default", "search_ranking_stack"} <= set(reps)
    assert reps["search_ranking_stack"].needs == ["internet"]
    for r in reps.values():
        assert (r.folder / "README.md").is_file()
    r = Reproduction(title="t", source="s", needs=["path:no/such/data"])
    assert "no/such/data is absent" in missing_needs(r, tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        assert "offline" in missing_needs(Reproduction(title="t", source="s", needs=["internet"]), tmp_path)


def test_the_committed_matrix_holds_every_reproductions_current_expected_values():
    """results/reproductions.md against each reproduction's expected values as they are now: every expected
    value it shows is the expected file's (to its 4 decimals), and every reproduction run here shows OK or
    within tolerance - a matrix left from older expected values (bm25 0.5187 where the file says 0.4943) fails.
    `make test` writes the same matrix to build/reproductions.md: copy it over when the numbers move."""
    from stagebench.reproductions import _resolve
    from stagebench.results.check import load_expected

    text = (REPO / "results" / "reproductions.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 8 and cells[0] != "reproduction" and not cells[0].startswith("---") and cells[2] != "-":
            rows[(cells[0], cells[1], cells[2])] = cells
    for r in find(REPO):
        exp = load_expected(_resolve(r.folder, r.expected, REPO))
        for stage, metrics in exp.stages.items():
            for metric, value in metrics.items():
                cells = rows.get((r.name, stage, metric))
                assert cells is not None, f"results/reproductions.md has no row {r.name} {stage} {metric}"
                assert cells[3] == f"{float(value):.4f}", (r.name, stage, metric, cells[3], value)
                assert "skipped" in cells[7] or cells[7] in ("**OK**", "**within tolerance**"), cells
