"""Run folders: the rich stage table, `table` byte-for-byte, `compare`, and report.html."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, child_path, stagebench_cli

pytestmark = pytest.mark.slow  # a full run in a subprocess, headless Chromium

PLUGIN = '''
class Reverse:
    """Reverses the candidate order: a deliberately bad reranker."""
    def score(self, query, docs):
        return [float(i) for i in range(len(docs))]
'''


def make_config(tmp_path: Path, dataset: Path, name: str, k1: float = 1.2) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"""
name: {name}
output: {tmp_path / name}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {dataset}, split: test}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 200, k1: {k1}}}}}
  - {{name: bm25_stem, type: bm25, params: {{top_k: 200, stemmer: english}}}}
  - {{name: rrf, type: rrf, inputs: [bm25, bm25_stem]}}
  - {{name: title, type: plugin, target: "examples.title_boost:TitleBoostReranker", inputs: [rrf], params: {{top_n: 30}}}}
  - {{name: reverse, type: plugin, target: "revplug:Reverse", inputs: [rrf], params: {{top_n: 30}}}}
evaluation: {{metrics: [nDCG@10, RR@10, R@100], baseline: bm25, permutations: 2000, bootstrap: 500}}
""")
    return cfg


def run_cli(*args, cwd):
    env = {"PYTHONPATH": child_path(cwd), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    return stagebench_cli(*args, cwd=cwd, env=env)  # fmt: skip


def independent_holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment written from its definition, not from stagebench.stats: the
    adjusted p of hypothesis i is the largest (m - k + 1) * p_(k), capped at 1, over the
    hypotheses k ranked at or before it (ranks by p ascending, ties by position)."""
    m = len(ps)
    ranked = sorted(range(m), key=lambda i: (ps[i], i))
    rank = {i: r + 1 for r, i in enumerate(ranked)}
    return [min(1.0, max((m - rank[j] + 1) * ps[j] for j in range(m) if rank[j] <= rank[i])) for i in range(m)]


def check_holm_and_marks(sig: list[dict], rows: list[dict], alpha: float) -> None:
    """Every metric's family of comparisons is Holm-corrected as a whole, and a stage carries
    the mark of another exactly when the corrected randomization p is below alpha."""
    letters = {r["stage"]: r["id"] for r in rows}
    metrics = list(dict.fromkeys(c["metric"] for c in sig))
    for m in metrics:
        family = [c for c in sig if c["metric"] == m]
        for key, raw in (("p_rand_holm", "p_rand"), ("p_t_holm", "p_t")):
            want = independent_holm([c[raw] for c in family])
            # significance.json stores p-values rounded to 6 decimals (each off by up to 5e-7): Holm multiplies a
            # raw p by at most the family's size, and its own result is rounded once more
            bound = (len(family) + 1) * 5e-7 + 1e-12
            assert [c[key] for c in family] == pytest.approx(want, rel=2e-3, abs=bound), (m, key)
        for r in rows:
            expected = sorted(letters[c["b"] if c["a"] == r["stage"] else c["a"]] for c in family
                              if r["stage"] in (c["a"], c["b"]) and c["p_rand_holm"] < alpha
                              and (c["mean_a"] > c["mean_b"]) == (c["a"] == r["stage"]) and c["mean_a"] != c["mean_b"])
            assert r["better_than"].get(m, []) == expected, (m, r["stage"])


@pytest.fixture(scope="module")
def finished(tmp_path_factory, small_synthetic):
    tmp = tmp_path_factory.mktemp("runs")
    (tmp / "revplug.py").write_text(PLUGIN)
    r = run_cli("run", make_config(tmp, small_synthetic, "one"), cwd=tmp)
    assert r.returncode == 0, r.stderr
    return tmp, r.stdout


def test_stage_table_has_ceiling_significance_and_labels(finished):
    tmp, stdout = finished
    out = tmp / "one"
    rows = json.loads((out / "stage_table.json").read_text())
    by = {r["stage"]: r for r in rows}
    assert [r["id"] for r in rows] == ["a", "b", "c", "d", "e"]
    for r in rows:
        assert set(r["recall"]) == {"R@10", "R@100"}  # runs are 200 deep: no R@1000
        assert sum(r["top10_labels"].values()) == pytest.approx(1.0)
        assert set(r["top10_labels"]) == {"E", "S", "C", "I", "unjudged"}
        for m in ("nDCG@10", "RR@10", "R@100"):
            lo, hi = r["ci95"][m]
            assert lo <= r[m] <= hi
    for name in ("title", "reverse"):
        c = by[name]["ceiling"]
        assert c["depth"] == 30
        assert c["input_ndcg10"] == pytest.approx(by["rrf"]["nDCG@10"])
        assert c["achieved_ndcg10"] == pytest.approx(by[name]["nDCG@10"])
        assert c["oracle_ndcg10"] >= max(c["achieved_ndcg10"], c["input_ndcg10"])
        assert by[name]["R@100"] == pytest.approx(by["rrf"]["R@100"])  # reranking cannot change recall beyond N
    assert by["reverse"]["ceiling"]["headroom_captured"] < 0  # the reversing reranker loses ground
    assert by["title"]["ceiling"]["headroom_captured"] > by["reverse"]["ceiling"]["headroom_captured"]
    assert by["bm25"]["ceiling"] is None
    # the reversal is significantly worse than its input: rrf (c) is marked better than reverse (e)
    assert "e" in by["rrf"]["better_than"]["nDCG@10"]
    sig = json.loads((out / "significance.json").read_text())
    pairs = {(c["a"], c["b"]) for c in sig if c["metric"] == "nDCG@10"}
    assert pairs == {("bm25_stem", "bm25"), ("rrf", "bm25"), ("rrf", "bm25_stem"), ("title", "rrf"), ("title", "bm25"),
                     ("reverse", "rrf"), ("reverse", "title"), ("reverse", "bm25")}  # fmt: skip (reverse, title: siblings)
    for c in sig:
        assert c["wins"] + c["ties"] + c["losses"] == rows[0]["queries"]
    check_holm_and_marks(sig, rows, alpha=0.05)
    assert "Recall ceiling and reranking headroom" in stdout and "headroom captured" in stdout
    for f in ("metrics.png", "recall_at_k.png", "ceiling.png", "top10_labels.png"):
        assert (out / "plots" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_three_views_of_unjudged_documents_against_independent_computations(finished):
    """judged only = pytrec_eval's judged_docs_only_flag on the folder's runs; the bounds' low end is
    the main value for monotone measures and never above it; unsettled pairs are exactly the
    overlapping intervals, both ways; the judged-only marks are Holm-consistent in their own view; a
    main-table mark whose order the bounds leave open is printed with a "?"."""
    import pytrec_eval

    from stagebench.runs import read_trec_qrels, read_trec_run

    tmp, _ = finished
    out = tmp / "one"
    rows = json.loads((out / "stage_table.json").read_text())
    qrels = read_trec_qrels(out / "qrels.trec")
    scored = [q for q, docs in qrels.items() if any(g >= 1 for g in docs.values())]
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}, judged_docs_only_flag=True)
    for r in rows:
        got = ref.evaluate(read_trec_run(out / "runs" / f"{r['stage']}.trec"))
        for m, key in (("nDCG@10", "ndcg_cut_10"), ("R@100", "recall_100")):
            want = sum(got.get(q, {}).get(key, 0.0) for q in scored) / len(scored)
            assert r["judged_only"][m] == pytest.approx(want, abs=2e-6), (r["stage"], m)
        assert r["bounds"]["RR@10"][0] == r["RR@10"] and r["bounds"]["R@100"][0] == r["R@100"]
        assert r["bounds"]["nDCG@10"][0] <= r["nDCG@10"] <= r["bounds"]["nDCG@10"][1]
    letters = {r["id"]: r for r in rows}
    for r in rows:
        for m, (lo, hi) in r["bounds"].items():
            overlapping = sorted(o["id"] for o in rows if o is not r and lo <= o["bounds"][m][1] and o["bounds"][m][0] <= hi)
            assert sorted(r["unsettled"].get(m, [])) == overlapping, (r["stage"], m)
            assert all(r["id"] in letters[x]["unsettled"][m] for x in overlapping)
    sig = json.loads((out / "significance_judged_only.json").read_text())
    check_holm_and_marks(sig, [{**r, "better_than": r["judged_only_better_than"]} for r in rows], 0.05)
    text = (out / "stage_table.txt").read_text()
    assert "Judged only: unjudged documents removed" in text and "Bounds: every hole irrelevant" in text
    for r in rows:
        for m, won in r["better_than"].items():
            for x in won:
                mark = x + ("?" if x in r["unsettled"].get(m, []) else "")
                line = next(x for x in text.splitlines() if x.split()[:2] == [r["id"], r["stage"]])  # the main table's row
                assert mark in line, (r["stage"], m, mark)


def test_table_reproduces_every_file_byte_for_byte_without_running_stages(finished, tmp_path):
    tmp, stdout = finished
    copy = tmp_path / "copy"
    shutil.copytree(tmp / "one", copy)
    names = ["stage_table.txt", "stage_table.md", "stage_table.csv", "stage_table.json", "significance.json",
             "per_query.csv", "report.html", "plots/metrics.png", "plots/ceiling.png"]  # fmt: skip
    before = {n: (copy / n).read_bytes() for n in names}
    for n in names:
        (copy / n).unlink()
    # no plug-in module, no dataset on the path: nothing but the saved runs can be used
    r = run_cli("table", copy, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == stdout
    for n in names:
        assert (copy / n).read_bytes() == before[n], n


def test_cumulative_cost_is_exact_whatever_the_hash_seed(finished):
    """Each stage's seconds per query is the exactly rounded sum of its own and its upstream
    stages' computed seconds (each once): computed here with fractions, and in processes with
    different hash seeds (a sum over a set in hash order once moved the last digit of report.html)."""
    from fractions import Fraction

    from stagebench.results.cost import quality_cost
    from stagebench.results.folder import RunFolder

    tmp, _ = finished
    rf = RunFolder.open(tmp / "one")
    stages = {s.name: s for s in rf.stages}
    table = rf.table()
    n_q = table.rows[0].queries
    ups = {"bm25": ["bm25"], "bm25_stem": ["bm25_stem"], "rrf": ["bm25", "bm25_stem", "rrf"],
           "title": ["bm25", "bm25_stem", "rrf", "title"], "reverse": ["bm25", "bm25_stem", "rrf", "reverse"]}  # the graph
    points = {p.stage: p for p in quality_cost(table, rf.stages)}
    assert set(points) == set(ups)
    for name, names in ups.items():
        exact = sum(Fraction(stages[x].computed_seconds or 0.0) for x in names)
        assert points[name].seconds_per_query == float(exact) / n_q, name
    code = ("import sys; from stagebench.results.folder import RunFolder; from stagebench.results.cost import quality_cost; "
            "rf = RunFolder.open(sys.argv[1]); print([p.seconds_per_query.hex() for p in quality_cost(rf.table(), rf.stages)])")  # fmt: skip
    outs = {subprocess.run([sys.executable, "-c", code, str(tmp / "one")], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(8)}  # fmt: skip
    assert len(outs) == 1, outs


def test_compare_two_runs(finished, tmp_path, small_synthetic):
    tmp, _ = finished
    shutil.copy(tmp / "revplug.py", tmp_path / "revplug.py")
    r = run_cli("run", make_config(tmp_path, small_synthetic, "two", k1=0.3), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("compare", tmp / "one", tmp_path / "two", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("bm25 ") and "nDCG@10" in line for line in lines)
    bm25 = [line for line in lines if line.startswith("bm25 ") and "nDCG@10" in line][0].split()
    one = json.loads((tmp / "one" / "stage_table.json").read_text())[0]["nDCG@10"]
    two = json.loads((tmp_path / "two" / "stage_table.json").read_text())[0]["nDCG@10"]
    assert float(bm25[2]) == pytest.approx(one, abs=1e-4) and float(bm25[3]) == pytest.approx(two, abs=1e-4)
    # bm25_stem did not change between the runs: identical, p = 1
    stem = [line for line in lines if line.startswith("bm25_stem ") and "nDCG@10" in line][0].split()
    assert stem[4] == "+0.0000" and float(stem[5]) == 1.0


def test_table_on_a_folder_without_runs_fails_clearly(tmp_path):
    (tmp_path / "x").mkdir()
    r = run_cli("table", tmp_path / "x", cwd=tmp_path)
    assert r.returncode == 2 and "not a stagebench results folder" in r.stderr


def chromium_paths():
    chrome, driver = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
    if not (chrome.exists() and driver.exists()):
        import os

        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium and chromium-driver (.ci/run installs them)")
        pytest.skip("headless Chromium absent: apt-get install chromium chromium-driver")
    pytest.importorskip("selenium", reason="selenium (test extra) drives Chromium")
    return chrome, driver


def test_report_html_renders_in_headless_chromium_with_its_images(finished):
    chromium_paths()
    from benchmarks.report_screenshot import check_report

    tmp, _ = finished
    report = tmp / "one" / "report.html"
    text = report.read_text()
    # self-contained: no address, no external stylesheet or script (the explorer's script is inline)
    assert "http://" not in text and "https://" not in text and "<link" not in text and "<script src" not in text
    info = check_report(report, tmp / "one" / "report_screenshot.png", tmp / "one" / "explorer.png")
    assert info["images"] == ["metrics.png", "recall_at_k.png", "ceiling.png", "top10_labels.png", "quality_cost.png"]
    # the two rerankers of one pool head to head first, then the three views in order
    assert info["tables"][:7] == ["head", "stage", "judged", "bounds", "recall", "top-10", "95"]
    assert (tmp / "one" / "report_screenshot.png").stat().st_size > 10_000
    x = info["explorer"]
    assert len(x["stages"]) == len(json.loads((tmp / "one" / "manifest.json").read_text())["stages"])
    assert set(x["badges"]) <= {"E", "S", "C", "I", "?"} and x["badges"] and (tmp / "one" / "explorer.png").stat().st_size > 5_000
