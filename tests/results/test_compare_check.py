"""``stagebench compare``, the stage table's significance letters and ``stagebench check``, from their
definitions: p-values recomputed from the per-query values of the folders (per_query.csv read here)
with the configured seed, Holm-Bonferroni written out here, significance as "Holm-corrected p below
alpha", and tolerances per measure before the global one."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from types import SimpleNamespace

import pytest
import yaml

from stagebench import stats
from stagebench.results.check import compare_with_expected
from stagebench.results.compare import compare_folders
from stagebench.results.folder import RunFolder
from stagebench.results.scoring import significance
from stagebench.results.segments import length_segments
from tests.conftest import SWEEP_EVALUATION
from tests.results.test_depth import holm

SEED, PERMS = SWEEP_EVALUATION["seed"], SWEEP_EVALUATION["permutations"]


def per_query(folder) -> dict[str, dict[str, dict[str, float]]]:
    """stage -> measure -> qid -> value, from per_query.csv."""
    out: dict = {}
    with open(folder / "per_query.csv", newline="") as f:
        for row in csv.DictReader(f):
            for m, v in row.items():
                if m not in ("stage", "qid"):
                    out.setdefault(row["stage"], {}).setdefault(m, {})[row["qid"]] = float(v)
    return out


def between(raw: list[float], corrected: list[float]) -> float:
    """An alpha that the raw p of some test is below and its Holm p is not."""
    gaps = [(r, c) for r, c in zip(raw, corrected) if c > r * 1.01]
    assert gaps, "no p-value is changed by Holm: the data cannot tell a raw p from a corrected one"
    r, c = min(gaps)
    return (r + c) / 2


def test_compare_p_values_are_holm_over_the_stages_of_each_measure(sweep_folder, sweep_folder_b):
    pa, pb = per_query(sweep_folder), per_query(sweep_folder_b)
    stages = list(pa)
    want: dict = {}
    for m in pa[stages[0]]:
        raw = []
        for s in stages:
            qs = sorted(set(pa[s][m]) & set(pb[s][m]))
            raw.append(stats.randomization_test([pb[s][m][q] for q in qs], [pa[s][m][q] for q in qs], PERMS, SEED))
        want[m] = (raw, holm(raw))
    raw_nd, holm_nd = want["nDCG@10"]
    alpha = between(raw_nd, holm_nd)
    c = compare_folders(sweep_folder, sweep_folder_b, permutations=PERMS, seed=SEED, alpha=alpha)
    for m, (raw, corrected) in want.items():
        for s, p_raw, p in zip(stages, raw, corrected):
            row = c.row(s, m)
            assert row.p_rand == pytest.approx(p, rel=1e-9), (s, m)
            assert row.significant == (p < alpha), (s, m, p_raw, p)
            assert row.delta == pytest.approx(sum(pb[s][m].values()) / len(pb[s][m]) - sum(pa[s][m].values()) / len(pa[s][m]),
                                              abs=1e-6)  # fmt: skip
    # another seed gives other p-values (so a seed not passed through shows)
    other = compare_folders(sweep_folder, sweep_folder_b, permutations=PERMS, seed=SEED + 1, alpha=alpha)
    assert any(r.p_rand != o.p_rand for r, o in zip(c.rows, other.rows))


def test_the_stage_table_letters_come_from_holm_corrected_p_values(sweep_folder):
    pq = per_query(sweep_folder)
    table = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}
    comps = json.loads((sweep_folder / "significance.json").read_text())
    letters = {s: r["id"] for s, r in table.items()}
    queries = sorted(pq["bm25"]["nDCG@10"])
    pairs = list(dict.fromkeys((c["a"], c["b"]) for c in comps))
    metrics = list(dict.fromkeys(c["metric"] for c in comps))
    raw = {m: [stats.randomization_test([pq[a][m][q] for q in queries], [pq[b][m][q] for q in queries], PERMS, SEED)
               for a, b in pairs] for m in metrics}  # fmt: skip
    for c in comps:  # the file holds the configured test's p-values, Holm over each measure's pairs
        i = pairs.index((c["a"], c["b"]))
        assert c["p_rand"] == pytest.approx(raw[c["metric"]][i], abs=1e-6)
        assert c["p_rand_holm"] == pytest.approx(holm(raw[c["metric"]])[i], abs=1e-6)
    def letters_at(alpha: float) -> dict[str, dict[str, set[str]]]:
        """stage -> measure -> the letters of the stages it beats: Holm-corrected p below alpha, by its mean."""
        out: dict = {s: {} for s in pq}
        for m in metrics:
            for (a, b), p in zip(pairs, holm(raw[m])):
                ma, mb = (sum(pq[x][m][q] for q in queries) for x in (a, b))
                if p < alpha and ma != mb:
                    win, lose = (a, b) if ma > mb else (b, a)
                    out[win].setdefault(m, set()).add(letters[lose])
        return out

    # the table as written, at its own alpha
    assert {s: {m: set(v) for m, v in row["better_than"].items()} for s, row in table.items()} == \
        letters_at(SWEEP_EVALUATION["alpha"])  # fmt: skip
    # and through the table's own function at an alpha between some pair's raw and corrected p
    alpha = between(raw["nDCG@10"], holm(raw["nDCG@10"]))
    evals = {s: SimpleNamespace(per_query=pq[s]) for s in pq}
    ev = dataclasses.replace(RunFolder.open(sweep_folder).manifest.evaluation, alpha=alpha)
    _, better = significance(evals, pairs, metrics, queries, letters, ev)
    assert {s: {m: set(v) for m, v in b.items()} for s, b in better.items()} == letters_at(alpha)


def judged_only_by_definition(folder) -> dict[str, dict[str, dict[str, float]]]:
    """stage -> measure -> qid -> value in the judged-only view, written here from the definitions: each
    ranking (score desc, docid desc) with its unjudged documents removed, then cut at k; nDCG under the
    folder's gain table (ideal: every judged document sorted by gain), RR@10 and R@100 at grade >= 1."""
    from stagebench.runs import read_trec_qrels, read_trec_run

    gain = {int(k): v for k, v in SWEEP_EVALUATION["gain"].items()}
    qrels = read_trec_qrels(folder / "qrels.trec")
    queries = sorted(q for q, j in qrels.items() if any(g >= 1 for g in j.values()))
    out: dict = {}
    for path in (folder / "runs").glob("*.trec"):
        if "@" in path.stem:
            continue
        run = read_trec_run(path)
        vals: dict = {"nDCG@10": {}, "RR@10": {}, "R@100": {}}
        for q in queries:
            j = qrels[q]
            ranking = [d for d, _ in sorted(run.get(q, {}).items(), key=lambda x: (x[1], x[0]), reverse=True) if d in j]
            dcg = sum(gain[j[d]] / math.log2(i + 2) for i, d in enumerate(ranking[:10]))
            ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted((gain[g] for g in j.values()), reverse=True)[:10]))
            vals["nDCG@10"][q] = dcg / ideal if ideal else 0.0
            vals["RR@10"][q] = next((1 / (i + 1) for i, d in enumerate(ranking[:10]) if j[d] >= 1), 0.0)
            vals["R@100"][q] = sum(j[d] >= 1 for d in ranking[:100]) / sum(g >= 1 for g in j.values())
        out[path.stem] = vals
    return out


def test_the_judged_only_letters_from_the_definitions(sweep_folder):
    """The judged-only view's significance: its own per-query values (recomputed here, not read from a
    file the same code wrote), the configured test and seed, Holm over each measure's pairs."""
    jo = judged_only_by_definition(sweep_folder)
    table = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}
    letters = {s: r["id"] for s, r in table.items()}
    queries = sorted(jo["bm25"]["nDCG@10"])
    for s, r in table.items():
        for m in ("nDCG@10", "RR@10", "R@100"):
            assert r["judged_only"][m] == pytest.approx(sum(jo[s][m].values()) / len(queries), abs=1e-6), (s, m)
    comps = json.loads((sweep_folder / "significance.json").read_text())
    pairs = list(dict.fromkeys((c["a"], c["b"]) for c in comps))  # the same pairs as the main view
    want: dict = {s: {} for s in table}
    for m in ("nDCG@10", "RR@10", "R@100"):
        raw = [stats.randomization_test([jo[a][m][q] for q in queries], [jo[b][m][q] for q in queries], PERMS, SEED)
               for a, b in pairs]  # fmt: skip
        for (a, b), p in zip(pairs, holm(raw)):
            ma, mb = (sum(jo[x][m].values()) for x in (a, b))
            if p < SWEEP_EVALUATION["alpha"] and ma != mb:
                win, lose = (a, b) if ma > mb else (b, a)
                want[win].setdefault(m, set()).add(letters[lose])
    got = {s: {m: set(v) for m, v in r["judged_only_better_than"].items() if v} for s, r in table.items()}
    assert got == want
    main = {s: {m: set(v) for m, v in r["better_than"].items() if v} for s, r in table.items()}
    assert got != main  # the two views' letters differ here, so one view's letters in place of the other's show


def test_a_main_table_mark_whose_order_the_bounds_leave_open_carries_a_question_mark(sweep_folder):
    """x? exactly where a stage significantly beats x and their bounds overlap; here such pairs occur."""
    from stagebench.report.tables import main_cell
    from stagebench.table import StageRow

    rows = json.loads((sweep_folder / "stage_table.json").read_text())
    text = (sweep_folder / "stage_table.txt").read_text().split("Judged only:")[0]
    questioned = 0
    for r in rows:
        line = next(x for x in text.splitlines() if x.split()[:2] == [r["id"], r["stage"]])
        for m, won in r["better_than"].items():
            marks = "".join(x + ("?" if x in r["unsettled"].get(m, []) else "") for x in won)
            assert f"{r[m]:.4f}^{marks}" in line.split(), (r["stage"], m, line)
            questioned += sum(x in r["unsettled"].get(m, []) for x in won)
    assert questioned > 0
    # and where the bounds settle the order, the mark stands alone
    a = next(r for r in rows if r["better_than"].get("nDCG@10"))
    settled = StageRow.from_json({**a, "unsettled": {}}, ["nDCG@10"])
    assert main_cell(settled, "nDCG@10") == f"{a['nDCG@10']:.4f}^" + "".join(a["better_than"]["nDCG@10"])


def test_check_uses_each_measure_s_tolerance_before_the_global_one(sweep_folder, tmp_path):
    table = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}
    have = table["bm25"]
    expected = {
        "tolerance": 0.01,
        "tolerances": {"RR@10": 0.0001, "R@100": 0.05},
        "stages": {"bm25": {"nDCG@10": have["nDCG@10"] + 0.005,  # within the global 0.01: OK-within-tolerance
                            "RR@10": have["RR@10"] + 0.005,  # beyond its own 0.0001: FAIL
                            "R@100": have["R@100"] + 0.03}},  # beyond the global, within its own 0.05: OK-within
    }  # fmt: skip
    path = tmp_path / "expected.yaml"
    path.write_text(yaml.safe_dump(expected))
    rows, _ = compare_with_expected(sweep_folder, path)
    status = {(r.stage, r.metric): (r.status, r.tolerance) for r in rows}
    assert status[("bm25", "nDCG@10")] == ("OK-within-tolerance", 0.01)
    assert status[("bm25", "RR@10")] == ("FAIL", 0.0001)
    assert status[("bm25", "R@100")] == ("OK-within-tolerance", 0.05)


def test_segment_p_values_use_the_configured_seed_and_holm_over_each_measure(sweep_folder):
    """The segments table: within each segment, each stage against its input, the configured test
    and seed; one Holm family per measure over every tested (segment, stage, input)."""
    pq = per_query(sweep_folder)
    (table,) = json.loads((sweep_folder / "segments.json").read_text())
    texts = json.loads((sweep_folder / "texts.json").read_text())["queries"]
    queries = sorted(pq["bm25"]["nDCG@10"])
    groups: dict[str, list[str]] = {}
    for q, label in length_segments(texts, queries).items():
        groups.setdefault(label, []).append(q)
    assert table["seed"] == SEED and table["permutations"] == PERMS
    differs = 0
    for m in table["measures"]:
        tested, got = [], []
        for seg in table["segments"]:
            qs = sorted(groups[seg["label"]])
            assert len(qs) == seg["queries"]
            for ch in seg["changes"][m]:
                if len(qs) < table["min_queries"]:
                    assert ch["p"] is None
                    continue
                a, b = ([pq[s][m][q] for q in qs] for s in (ch["stage"], ch["against"]))
                tested.append(stats.randomization_test(a, b, PERMS, SEED))
                differs += stats.randomization_test(a, b, PERMS, 42) != tested[-1]
                got.append((ch["p"], ch["p_holm"]))
        assert tested, m
        assert [p for p, _ in got] == pytest.approx(tested, abs=1e-6), m
        assert [h for _, h in got] == pytest.approx(holm(tested), abs=1e-6), m
    assert differs  # another seed gives other p-values here, so one not passed through would show


def test_check_fails_a_missing_stage_or_measure_and_checks_the_dataset(sweep_folder, tmp_path):
    manifest = json.loads((sweep_folder / "manifest.json").read_text())
    have = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}["bm25"]
    expected = {"tolerance": 0.001,
                "dataset": {"fingerprint": manifest["dataset"]["fingerprint"], "qrels_fingerprint": "0" * 64},
                "stages": {"bm25": {"nDCG@10": have["nDCG@10"], "P@10": 0.5}, "nonesuch": {"nDCG@10": 0.5}}}  # fmt: skip
    path = tmp_path / "expected.yaml"
    path.write_text(yaml.safe_dump(expected))
    rows, _ = compare_with_expected(sweep_folder, path)
    status = {(r.stage, r.metric): r.status for r in rows}
    assert status == {("(dataset)", "fingerprint"): "OK", ("(dataset)", "qrels_fingerprint"): "FAIL",
                      ("bm25", "nDCG@10"): "OK", ("bm25", "P@10"): "FAIL", ("nonesuch", "nDCG@10"): "FAIL"}  # fmt: skip
    assert [r.got for r in rows if r.stage == "nonesuch" or r.metric == "P@10"] == [None, None]


def test_compare_refuses_folders_scored_differently_or_on_other_data(sweep_folder, sweep_folder_b, tmp_path):
    """Each refusal names both folders and what differs (the manifest edited in a copy of a folder)."""
    import shutil

    from stagebench.errors import StagebenchError

    def variant(name, edit):
        out = tmp_path / name
        shutil.copytree(sweep_folder_b, out)
        m = json.loads((out / "manifest.json").read_text())
        edit(m)
        (out / "manifest.json").write_text(json.dumps(m))
        return out

    gain = variant("gain", lambda m: m["evaluation"].update(gain="exponential"))
    with pytest.raises(StagebenchError, match=rf"^{sweep_folder} and {gain} are scored differently: evaluation.gain is "
                                              r"\{.*\} vs 'exponential'; their numbers cannot be compared"):  # fmt: skip
        compare_folders(sweep_folder, gain, permutations=PERMS)
    fp = variant("corpus", lambda m: m["dataset"].update(fingerprint="f" * 64))
    mine = json.loads((sweep_folder / "manifest.json").read_text())["dataset"]["fingerprint"]
    with pytest.raises(StagebenchError, match=rf"ran on different corpora \(dataset fingerprints {mine[:12]} vs "
                                              rf"{'f' * 12}\): their numbers cannot be compared$"):  # fmt: skip
        compare_folders(sweep_folder, fp, permutations=PERMS)



def test_compare_refuses_folders_that_grade_a_shared_pair_differently(sweep_folder, tmp_path):
    """--judgments same: the same documents judged is not enough; a shared (query, document) pair graded
    1 in one folder and 2 in the other is refused (the copy's qrels.trec edited, its digest re-recorded)."""
    import hashlib
    import shutil

    from stagebench.errors import StagebenchError

    other = tmp_path / "regraded"
    shutil.copytree(sweep_folder, other)
    lines = (other / "qrels.trec").read_text().splitlines()
    q, it, d, g = lines[0].split()
    lines[0] = " ".join([q, it, d, str(1 if int(g) != 1 else 2)])
    (other / "qrels.trec").write_text("\n".join(lines) + "\n")
    m = json.loads((other / "manifest.json").read_text())
    m["files"]["qrels.trec"] = hashlib.sha256((other / "qrels.trec").read_bytes()).hexdigest()
    (other / "manifest.json").write_text(json.dumps(m))
    assert set(RunFolder.open(other).qrels()[q]) == set(RunFolder.open(sweep_folder).qrels()[q])  # the same documents
    with pytest.raises(StagebenchError, match=rf"judge query '{q}' differently \(qrels.trec\)"):
        compare_folders(sweep_folder, other, permutations=PERMS)
    assert compare_folders(sweep_folder, other, permutations=PERMS, judgments="each").judgments == "each"
