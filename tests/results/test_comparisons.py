"""The comparisons a team asks for (issue 79): ``evaluation.comparisons`` declares the family of stage pairs
tested (Holm over it, named in the notes); by default two stages over the same input - two rerankers of
one pool, two fusions of one pair of runs - are tested against each other and lead the table, with the
difference, its interval, p, wins/ties/losses and whether the holes settle it."""

from __future__ import annotations

import csv
import json
import re

import pytest

import stagebench
from stagebench.stats import bootstrap_ci, holm
from stagebench.errors import ConfigError
from stagebench.api.ground import ground
from stagebench.judgments.pool import filled_qrels
from stagebench.judgments.sampling import ESTIMATE, Record, design_path

STAGES = [{"name": "bm25", "type": "bm25", "params": {"top_k": 50}},
          {"name": "bm25_flat", "type": "bm25", "params": {"k1": 0.3, "b": 0.1, "top_k": 50}},
          {"name": "rrf60", "type": "rrf", "inputs": ["bm25", "bm25_flat"], "params": {"k": 60}},
          {"name": "rrf1", "type": "rrf", "inputs": ["bm25", "bm25_flat"], "params": {"k": 1}}]  # fmt: skip


def config(tmp_path, tiny_synthetic, **evaluation):
    return {"name": "siblings", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
            "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"}, "stages": STAGES,
            "evaluation": {"metrics": ["nDCG@10", "RR@10"], "permutations": 500, "latency_queries": 0, **evaluation}}  # fmt: skip


def test_siblings_are_tested_against_each_other_by_default_and_lead_the_table(tmp_path, tiny_synthetic):
    result = stagebench.run(config(tmp_path, tiny_synthetic))
    sig = json.loads((result.output / "significance.json").read_text())
    tested = {(c["a"], c["b"]) for c in sig}
    assert ("rrf1", "rrf60") in tested and ("rrf60", "bm25") in tested and ("rrf1", "bm25_flat") in tested
    notes = " ".join(result.stage_table.notes)
    assert "Holm-Bonferroni over the 6 comparisons" in notes and "its siblings over the same input (rrf1 vs rrf60)" in notes
    text = (result.output / "stage_table.txt").read_text()
    assert text.index("Head to head") < text.index("Stage metrics")
    row = result.stage_table.row("rrf1")
    per = result.per_query_values  # stage -> measure -> qid -> value
    for m in ("nDCG@10", "RR@10"):
        c = row.compared["rrf60"][m]
        diffs = [per["rrf1"][m][q] - per["rrf60"][m][q] for q in per["rrf1"][m]]
        assert c["difference"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-6)
        assert c["wins"] == sum(d > 1e-12 for d in diffs) and c["losses"] == sum(d < -1e-12 for d in diffs)
        assert c["wins"] + c["ties"] + c["losses"] == len(diffs) and c["ci"][0] <= c["difference"] <= c["ci"][1]
        # the interval adjusted as the p is: simultaneous over the 6 comparisons Holm is over (Bonferroni)
        assert c["ci_level"] == pytest.approx(1 - 0.05 / 6) and c["comparisons"] == 6
        assert c["ci"] == pytest.approx(bootstrap_ci(diffs, 2000, 42, level=1 - 0.05 / 6), abs=1e-6)
        assert f"[{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}] (99.1667%)" in text
        p = next(x for x in sig if (x["a"], x["b"], x["metric"]) == ("rrf1", "rrf60", m))["p_rand_holm"]
        assert c["p"] == p and c["holes"] in ("open", "settled")
        family = [x for x in sig if x["metric"] == m]  # Holm by definition, from the raw p of the 6 comparisons
        at = next(i for i, x in enumerate(family) if (x["a"], x["b"]) == ("rrf1", "rrf60"))
        assert c["p"] == pytest.approx(holm([x["p_rand"] for x in family])[at], abs=1e-6)
        assert c["p"] > family[at]["p_rand"] or c["p"] == 1.0  # adjusted: never the raw p where Holm moves it
        assert any(line.startswith("rrf1 - rrf60") and m in line for line in text.splitlines())
    assert json.loads((result.output / "stage_table.json").read_text())[3]["compared"]["rrf60"]["nDCG@10"] == row.compared["rrf60"]["nDCG@10"]
    assert "Head to head" in (result.output / "report.html").read_text()


def test_the_family_is_what_the_config_declares(tmp_path, tiny_synthetic):
    result = stagebench.run(config(tmp_path, tiny_synthetic, comparisons=["inputs", "rrf1=bm25"]))
    sig = json.loads((result.output / "significance.json").read_text())
    assert sorted({(c["a"], c["b"]) for c in sig}) == [("bm25_flat", "bm25"), ("rrf1", "bm25"), ("rrf1", "bm25_flat"),
                                                       ("rrf60", "bm25"), ("rrf60", "bm25_flat")]  # fmt: skip
    notes = " ".join(result.stage_table.notes)
    assert "over the 5 comparisons" in notes and "and with as named (rrf1=bm25)" in notes
    assert list(result.stage_table.row("rrf1").compared) == ["bm25"]  # the named pair leads; no siblings tested


@pytest.mark.parametrize("entry, line", [
    ("nope", "evaluation.comparisons[0]: 'nope': one of inputs, siblings, baseline, all, or a pair of stages A=B"),
    ("rrf1=zzz", "evaluation.comparisons[0]: 'rrf1=zzz': 'zzz' is not a stage (bm25, bm25_flat, rrf60, rrf1)"),
    ("rrf1=rrf1", "evaluation.comparisons[0]: 'rrf1=rrf1': a stage against itself"),
])  # fmt: skip
def test_a_comparison_that_names_nothing_is_refused_at_load(tmp_path, tiny_synthetic, entry, line):
    with pytest.raises(ConfigError, match=re.escape(line)):
        stagebench.api.config_from(config(tmp_path, tiny_synthetic, comparisons=[entry]))


def test_a_sample_aims_at_the_siblings_by_default(tmp_path, tiny_synthetic):
    result = stagebench.run({**config(tmp_path, tiny_synthetic), "judge": {"backend": "rules", "depth": 10}})
    sheet = stagebench.api.plan_judgments(result.output, 30, tmp_path / "s.csv", strategy="sample", seed=1)
    assert sheet.power and sheet.power[0].startswith("rrf60 - rrf1: the model predicts")
    assert Record.read(open(design_path(str(sheet.csv))).read(), "x").aimed == ["rrf60 - rrf1"]
    # graded with the rules' grades: the head-to-head line carries the estimated view of its pair
    g = ground(result.output)
    truth = filled_qrels(g.qrels, g.judgments)[0]
    rows = list(csv.reader(sheet.csv.open(encoding="utf-8")))
    gi = next(i for i, h in enumerate(rows[0]) if h.startswith("grade"))
    for r in rows[1:]:
        r[gi] = str(truth[r[0]][r[2]])
    with sheet.csv.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows(rows)
    added = stagebench.api.add_judgments(result.output, [sheet.csv], tmp_path / "added")
    est = added.stage_table.row("rrf1").compared["rrf60"]["nDCG@10"]["estimated"]
    view = json.loads((tmp_path / "added" / ESTIMATE).read_text())
    at = view["targets"].index("rrf60 - rrf1")
    assert est["difference"] == pytest.approx(-view["value"][at], abs=1e-6)  # rrf1 - rrf60: the view's pair turned round
    assert est["ci95"] == pytest.approx([-view["high"][at], -view["low"][at]], abs=1e-6)
    line = next(x for x in (tmp_path / "added" / "stage_table.txt").read_text().splitlines() if x.startswith("rrf1 - rrf60  nDCG@10"))
    assert line.endswith(("settled", "open")) and f"{est['difference']:+.4f}" in line


def test_stages_the_judgments_fully_cover_are_ordered_whatever_their_values(tmp_path):
    """Two run files over a BEIR folder whose every retrieved document is judged: no hole, so the bounds are the
    values themselves and the judgments settle the order - the better stage's mark carries no ~ and no ?
    (an `or` for `and` in the pair bounds' test left stages at 1.0 and 0.0 unordered)."""
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    qids = [f"q{i}" for i in range(8)]
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in qids))
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": d, "text": f"doc {d}"}) + "\n"
                                               for d in ("r", "n1", "n2")))  # fmt: skip
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\tr\t1\n{q}\tn1\t0\n{q}\tn2\t0\n" for q in qids))  # fmt: skip
    for name, order in (("best", ["r", "n1", "n2"]), ("worst", ["n1", "n2", "r"])):
        (tmp_path / f"{name}.trec").write_text("".join(f"{q} Q0 {d} {i + 1} {3 - i} x\n" for q in qids
                                                       for i, d in enumerate(order)))  # fmt: skip
    cfg = {"name": "judged", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
           "dataset": {"loader": "beir", "path": str(data)},
           "stages": [{"name": "worst", "type": "run_file", "params": {"path": str(tmp_path / "worst.trec")}},
                      {"name": "best", "type": "run_file", "params": {"path": str(tmp_path / "best.trec")}}],
           "evaluation": {"metrics": ["nDCG@3", "P@1"], "permutations": 200, "latency_queries": 0,
                          "comparisons": ["all"]}}  # fmt: skip
    result = stagebench.run(cfg)
    best, worst = result.stage_table.row("best"), result.stage_table.row("worst")
    assert best.metrics["P@1"] == 1.0 and worst.metrics["P@1"] == 0.0
    for m in ("nDCG@3", "P@1"):
        assert best.unsettled.get(m, []) == [] and worst.unsettled.get(m, []) == [], (m, best.unsettled, worst.unsettled)


def test_the_head_to_head_p_is_holm_over_its_family_where_holm_moves_it(tmp_path, tiny_synthetic):
    """A named pair whose raw p is small (BM25 against a flattened BM25): its head-to-head p is Holm's over the
    family of the measure, recomputed here from the raw p of significance.json - never the raw p itself. The
    pair is named the other way round from the family's (bm25_flat against its input bm25): its line is the
    named difference, turned round (it was a KeyError after every stage had run)."""
    result = stagebench.run(config(tmp_path, tiny_synthetic, comparisons=["inputs", "bm25=bm25_flat"]))
    sig = json.loads((result.output / "significance.json").read_text())
    per = result.per_query_values
    moved = 0
    for m in ("nDCG@10", "RR@10"):
        c = result.stage_table.row("bm25").compared["bm25_flat"][m]
        diffs = [per["bm25"][m][q] - per["bm25_flat"][m][q] for q in per["bm25"][m]]
        assert c["difference"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-6)
        assert c["wins"] == sum(d > 1e-12 for d in diffs) and c["losses"] == sum(d < -1e-12 for d in diffs)
        family = [x for x in sig if x["metric"] == m]
        at = next(i for i, x in enumerate(family) if {x["a"], x["b"]} == {"bm25", "bm25_flat"})
        assert c["p"] == pytest.approx(holm([x["p_rand"] for x in family])[at], abs=1e-6)
        assert c["p"] == pytest.approx(family[at]["p_rand_holm"], abs=1e-6)
        moved += c["p"] > family[at]["p_rand"] + 1e-9
    assert moved  # Holm moved at least one of them: a raw p in its place would fail above


def test_compare_refuses_folders_without_runs_scored_against_other_qrels(tmp_path, capsys):
    """Two committed folders that keep their tables only (no runs, no qrels.trec): the manifests' qrels
    fingerprints are all compare has, and different ones are refused in one line; the same ones compare."""
    import shutil

    from stagebench.cli import main
    from tests.conftest import REPO

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(REPO / "results" / "default", a)
    shutil.copytree(REPO / "results" / "default", b)
    assert not (a / "qrels.trec").exists()
    assert main(["compare", str(a), str(b), "--permutations", "100"]) == 0
    capsys.readouterr()
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["dataset"]["qrels_fingerprint"] = "0" * 64
    (b / "manifest.json").write_text(json.dumps(manifest, indent=1))
    assert main(["compare", str(a), str(b), "--permutations", "100"]) == 2
    assert f"{a} and {b} were scored against different qrels" in capsys.readouterr().err
