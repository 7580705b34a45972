"""The per-query explorer, wins and losses, the quality-cost plane and the confidence intervals,
from their definitions, on a real run (tests/conftest.py ``sweep_folder``): ranks read from the
TREC files' rank column, changes from per_query.csv, cumulative seconds from manifest.json's stage
records walked here, intervals from the configured resamples and seed."""

from __future__ import annotations

import json
import re

import pytest

from stagebench import stats
from stagebench.report.explorer import DOWN, UP, explorer_json, query_text
from stagebench.report.write import show_query
from stagebench.results.cost import cascade_latency, quality_cost
from stagebench.results.folder import RunFolder
from stagebench.results.queries import QueryView, Shown, StageView, build, read_texts, wins_and_losses
from stagebench.runs import read_trec_qrels, read_trec_run
from tests.conftest import SWEEP_EVALUATION
from tests.results.test_compare_check import per_query


def ranks(path) -> dict[str, dict[str, int]]:
    """qid -> doc -> rank, from the rank column of a TREC run file."""
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines():
        q, _, d, r, *_ = line.split()
        out.setdefault(q, {})[d] = int(r)
    return out


@pytest.fixture(scope="module")
def folder(sweep_folder):
    rf = RunFolder.open(sweep_folder)
    manifest = rf.manifest
    return rf, manifest, {s.name: ranks(sweep_folder / "runs" / f"{s.name}.trec") for s in manifest.stages}


def test_show_names_each_document_s_rank_in_the_input_and_its_move(folder, sweep_folder):
    rf, manifest, rank = folder
    qrels = read_trec_qrels(sweep_folder / "qrels.trec")
    inputs = {s.name: list(s.inputs) for s in manifest.stages}
    moved = seen = 0
    for qid in sorted(per_query(sweep_folder)["bm25"]["nDCG@10"])[:12]:
        text = show_query(sweep_folder, qid)
        blocks = {b.split(":", 1)[0]: b for b in text.split("\n\n")[1:] if b.strip()}
        for stage, inp in inputs.items():
            top = sorted(rank[stage][qid], key=rank[stage][qid].get)[:10]
            lines = [ln for ln in blocks[stage].splitlines()[1:] if re.match(r"\s+\d+\s", ln)]
            assert len(lines) == len(top)
            for i, (doc, line) in enumerate(zip(top, lines), start=1):
                fields = line.split()
                assert int(fields[0]) == i and doc in fields
                grade = qrels.get(qid, {}).get(doc)
                assert fields[1] == ("?" if grade is None else {3: "E", 2: "S", 1: "C", 0: "I"}[grade])
                if not inp:
                    continue
                was = rank[inp[0]][qid].get(doc)
                seen += 1
                if was is None:
                    assert "new" in line
                elif was == i:
                    assert fields[2] == "="
                else:
                    moved += 1
                    assert f"{UP if was > i else DOWN}{abs(was - i)} (was {was})" in line, (stage, qid, line)
    assert moved > 20 and seen > 100


def test_wins_and_losses_are_the_largest_changes_against_the_input(folder, sweep_folder):
    rf, manifest, _ = folder
    pq = per_query(sweep_folder)
    queries = sorted(pq["bm25"]["nDCG@10"])
    runs, qrels = rf.runs(), rf.qrels()
    views = build(manifest.stages, runs, qrels, pq, "nDCG@10", queries, 1, {})
    got = wins_and_losses(views, n=5)
    for s in manifest.stages:
        if not s.inputs:
            assert s.name not in got
            continue
        change = {q: pq[s.name]["nDCG@10"][q] - pq[s.inputs[0]]["nDCG@10"][q] for q in queries}
        ups = sorted((q for q in queries if change[q] > 0), key=lambda q: (-change[q], q))[:5]
        downs = sorted((q for q in queries if change[q] < 0), key=lambda q: (change[q], q))[:5]
        assert [q for q, _ in got[s.name]["wins"]] == ups, s.name
        assert [q for q, _ in got[s.name]["losses"]] == downs, s.name
        assert all(c > 0 for _, c in got[s.name]["wins"]) and all(c < 0 for _, c in got[s.name]["losses"])
    assert len(got["shuffle40"]["losses"]) == 5 and got["boost"]["wins"]


def test_lost_at_retrieval_is_what_the_candidate_pool_missed(folder, sweep_folder):
    rf, manifest, rank = folder
    pq = per_query(sweep_folder)
    queries = sorted(pq["bm25"]["nDCG@10"])
    qrels = rf.qrels()
    views = build(manifest.stages, rf.runs(), qrels, pq, "nDCG@10", queries, 1, {})
    n_lost = 0
    for v in views:
        for sv, s in zip(v.stages, manifest.stages):
            if not s.is_reranker:
                assert sv.lost == [] and sv.depth is None
                continue
            pool = {d for d, r in rank[s.inputs[0]][v.qid].items() if r <= s.candidate_depth}
            want = {d for d, g in qrels[v.qid].items() if g >= 1} - pool
            assert {d for d, _ in sv.lost} == want and sv.depth == s.candidate_depth
            n_lost += len(want)
    assert n_lost > 0


def test_cumulative_seconds_per_query_sum_the_stage_and_everything_upstream_once(sweep_folder):
    raw = json.loads((sweep_folder / "manifest.json").read_text())
    by = {s["name"]: s for s in raw["stages"]}
    n_q = json.loads((sweep_folder / "stage_table.json").read_text())[0]["queries"]
    rf = RunFolder.open(sweep_folder)
    points = {p.stage: p for p in quality_cost(rf.table(), rf.stages)}

    def closure(name, acc):
        if name not in acc:
            acc.add(name)
            for i in by[name]["inputs"]:
                closure(i, acc)
        return acc

    for name in by:
        want = sum(by[x]["computed_seconds"] for x in closure(name, set())) / n_q
        assert points[name].seconds_per_query == pytest.approx(want, rel=1e-9), name
    # upstream time that a figure of the stage alone would leave out (recorded to the millisecond)
    assert by["bm25"]["computed_seconds"] + by["shuffle40"]["computed_seconds"] > 0


def test_confidence_intervals_use_the_configured_resamples_and_seed(sweep_folder):
    pq = per_query(sweep_folder)
    table = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}
    differs = 0
    for s, row in table.items():
        for m, (lo, hi) in row["ci95"].items():
            values = [pq[s][m][q] for q in sorted(pq[s][m])]
            want = stats.bootstrap_ci(values, SWEEP_EVALUATION["bootstrap"], SWEEP_EVALUATION["seed"])
            assert (lo, hi) == pytest.approx(want, abs=1e-6), (s, m)
            differs += tuple(round(x, 6) for x in stats.bootstrap_ci(values, 2000, 42)) != (lo, hi)
    assert differs > 5


def test_the_pareto_front_and_the_quality_axis_from_their_definitions(sweep_folder):
    rf = RunFolder.open(sweep_folder)
    table = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}
    points = quality_cost(rf.table(), rf.stages)
    for p in points:
        assert p.quality == table[p.stage]["nDCG@10"]
        dominated = any(o.seconds_per_query <= p.seconds_per_query and o.quality >= p.quality
                        and (o.seconds_per_query < p.seconds_per_query or o.quality > p.quality) for o in points)  # fmt: skip
        assert p.pareto == (not dominated), p.stage
    assert {p.pareto for p in points} == {True, False}  # both kinds occur, so a flipped test shows
    # a reranker's work: the pairs it scored (every query's candidates up to its depth) per scored query
    bm25 = read_trec_run(sweep_folder / "runs" / "bm25.trec")
    pairs = sum(min(40, len(docs)) for docs in bm25.values())
    assert next(p for p in points if p.stage == "shuffle40").work_per_query == pytest.approx(pairs / table["bm25"]["queries"])
    assert next(p for p in points if p.stage == "bm25").work_per_query is None


def test_cascade_latency_is_the_percentiles_of_each_query_s_summed_latency():
    def rec(lat):
        return type("R", (), {"latency_ms": lat})()

    a, b = rec({"q1": 10.0, "q2": 30.0, "q3": 20.0}), rec({"q1": 5.0, "q2": 1.0, "q3": 40.0})
    assert cascade_latency([a, b]) == stats.latency_percentiles([15.0, 31.0, 60.0])
    assert cascade_latency([a, rec(None)]) is None and cascade_latency([a, rec({"q1": 1.0})]) is None
    assert cascade_latency([]) is None


def test_the_explorer_data_holds_each_stage_and_query_as_the_report_draws_them(folder, sweep_folder):
    rf, manifest, rank = folder
    pq = per_query(sweep_folder)
    queries = sorted(pq["bm25"]["nDCG@10"])
    texts = read_texts(sweep_folder / "texts.json")
    views = build(manifest.stages, rf.runs(), rf.qrels(), pq, "nDCG@10", queries, 1, texts)
    data = explorer_json(views, manifest.stages, "nDCG@10", {3: "E", 2: "S", 1: "C", 0: "I"}, texts)
    assert [s["name"] for s in data["stages"]] == [s.name for s in manifest.stages]
    assert [s["depth"] for s in data["stages"]] == [s.candidate_depth if s.is_reranker else None for s in manifest.stages]
    for q, v in zip(data["queries"], views):
        assert q["id"] == v.qid and q["text"] == texts["queries"][v.qid] != ""
        for s, value, change in zip(manifest.stages, q["values"], q["changes"]):
            assert value == round(pq[s.name]["nDCG@10"][v.qid], 4)
            assert change == (None if not s.inputs else round(pq[s.name]["nDCG@10"][v.qid] - pq[s.inputs[0]]["nDCG@10"][v.qid], 4))
    assert any(c not in (None, 0.0) for q in data["queries"] for c in q["changes"])


def test_show_marks_a_fused_document_s_ranks_in_each_input_and_a_query_without_text():
    top = [Shown("d1", 3, [2, None]), Shown("d2", None, [None, 1]), Shown("d3", 0, [None, None]), Shown("d4", 1, [3, 3])]
    view = QueryView("q9", "", 4, 2, [StageView("rrf", ["a", "b"], 0.5, 0.1, top)])
    text = query_text(view, "nDCG@10", {3: "E", 1: "C", 0: "I"}, {"d1": "red shoes"})
    assert text.splitlines()[0] == "query q9: (no text saved)"
    lines = [ln.split() for ln in text.splitlines() if re.match(r"\s+\d+\s", ln)]
    assert lines[0] == ["1", "E", "from", "2/-", "d1", "red", "shoes"]
    assert lines[1][:5] == ["2", "?", "from", "-/1", "d2"] and lines[2][:5] == ["3", "I", "from", "-/-", "d3"]
    assert lines[3][:5] == ["4", "C", "from", "3/3", "d4"]
    one = QueryView("q9", "t", 1, 1, [StageView("ce", ["a"], 0.5, 0.1, [Shown("d5", None, [None])])])
    doc_line = next(ln for ln in query_text(one, "nDCG@10", {}, {}).splitlines() if "d5" in ln)
    assert doc_line.split()[:4] == ["1", "?", "new", "d5"]


def test_the_latency_pareto_front_is_quality_against_p95_cascade_latency():
    """A stage is on the latency front when no other is at least as good for at most its p95 latency
    (summed per query over its cascade) and better in one. Here the p50s order the stages the other way
    round, and compute seconds too, so a front drawn on p50 or on seconds shows."""
    from types import SimpleNamespace

    from stagebench.results.cost import cascade_latency

    qs = [f"q{i}" for i in range(20)]

    def stage(name, inputs, lat, seconds):
        return SimpleNamespace(name=name, inputs=inputs, latency_ms=dict(zip(qs, lat)), computed_seconds=seconds,
                               stats=None, candidate_depth=None)  # fmt: skip

    stages = [stage("a", [], [1.0] * 20, 1.0),
              stage("b", ["a"], [0.0] * 18 + [90.0, 95.0], 2.0),  # fast for most queries, slow for a few: low p50, high p95
              stage("c", ["a"], [5.0] * 20, 9.0)]  # fmt: skip
    quality = {"a": 0.30, "b": 0.60, "c": 0.60}
    rows = [SimpleNamespace(stage=s.name, queries=20, metrics={"nDCG@10": quality[s.name]}) for s in stages]
    points = {p.stage: p for p in quality_cost(SimpleNamespace(rows=rows, metrics=["nDCG@10"]), stages)}
    by = {s.name: s for s in stages}
    lat = {n: cascade_latency([by["a"]] + ([by[n]] if n != "a" else [])) for n in by}
    assert lat["b"][0] < lat["c"][0] and lat["b"][1] > lat["c"][1]  # p50 and p95 disagree
    for n, p in points.items():
        assert p.latency_ms == lat[n]
        dominated = any(lat[o][1] <= lat[n][1] and quality[o] >= quality[n] and (lat[o][1] < lat[n][1] or quality[o] > quality[n])
                        for o in by if o != n)  # fmt: skip
        assert p.pareto_latency == (not dominated), n
    assert {n for n, p in points.items() if p.pareto_latency} == {"a", "c"}
    assert {n for n, p in points.items() if p.pareto} == {"a", "b"}  # on compute seconds b (3 s) beats c (10 s)
