"""The depth table, checked from its definitions on a real run (tests/conftest.py ``sweep_folder``:
BM25, a plug-in with ``depths: [5, 10, 20, 40]``, and the same plug-in as separate stages at
``top_n: 5`` and ``top_n: 40``), each figure recomputed here from the run files and qrels without the
code under test: nDCG from its formula, pool recall by counting, the oracle by brute force over
every reordering of the pool, Holm from its definition, the pairs by counting candidates."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest

from stagebench import stats
from stagebench.metrics import parse_measure
from stagebench.record import Manifest
from stagebench.report.tables import render_text
from stagebench.results.depth import depth_sweep
from stagebench.results.scoring import score_folder
from stagebench.table import StageTable
from stagebench.results.folder import RunFolder
from stagebench.runs import ranked_ids, read_trec_qrels, read_trec_run
from tests.conftest import SWEEP_DEPTHS, SWEEP_EVALUATION

GAIN = {int(g): float(v) for g, v in SWEEP_EVALUATION["gain"].items()}
NDCG10 = parse_measure("nDCG@10")
REL = 1  # the evaluation's relevance threshold (the default)


def dcg(gains) -> float:
    return sum(g / math.log2(i + 1) for i, g in enumerate(gains, start=1))


def ndcg10(ranking: list[str], judged: dict[str, int]) -> float:
    """nDCG@10 from its definition: gains from the table, unjudged 0, the ideal from every judgment."""
    ideal = dcg(sorted((GAIN[g] for g in judged.values()), reverse=True)[:10])
    return dcg([GAIN[judged[d]] if d in judged else 0.0 for d in ranking[:10]]) / ideal if ideal else 0.0


def oracle_brute_force(ranking: list[str], judged: dict[str, int], depth: int) -> float:
    """The best nDCG@10 any reordering of the top ``depth`` reaches (the tail stays)."""
    pool, tail = ranking[:depth], ranking[depth:]
    return max(ndcg10(list(p) + tail, judged) for p in itertools.permutations(pool))


def oracle_by_gains(ranking: list[str], judged: dict[str, int], depth: int) -> float:
    """The same for a deep pool: the pool's gains, largest first, then the tail's (a reordering only
    moves gains; the largest first is the best DCG by the rearrangement inequality)."""
    pool = sorted((GAIN[judged[d]] if d in judged else 0.0 for d in ranking[:depth]), reverse=True)
    tail = [GAIN[judged[d]] if d in judged else 0.0 for d in ranking[depth:]]
    ideal = dcg(sorted((GAIN[g] for g in judged.values()), reverse=True)[:10])
    return dcg((pool + tail)[:10]) / ideal


def holm(ps: list[float]) -> list[float]:
    """Holm-Bonferroni from its definition: the i-th smallest p times (m - i), never below the one before, at most 1."""
    m, out, running = len(ps), [0.0] * len(ps), 0.0
    for i, k in enumerate(sorted(range(m), key=lambda k: ps[k])):
        running = max(running, min(1.0, (m - i) * ps[k]))
        out[k] = running
    return out


@pytest.fixture(scope="module")
def sweep(sweep_folder):
    table = {r["stage"]: r for r in json.loads((sweep_folder / "stage_table.json").read_text())}
    runs = {p.stem: read_trec_run(p) for p in (sweep_folder / "runs").glob("*.trec")}
    qrels = read_trec_qrels(sweep_folder / "qrels.trec")
    queries = sorted(q for q, j in qrels.items() if any(g > 0 for g in j.values()))
    return table, runs, qrels, queries


@pytest.fixture(scope="module")
def recorded(sweep_folder):
    """The sweep stage's record and the evaluation, from the verified manifest."""
    folder = RunFolder.open(sweep_folder)
    return next(s for s in folder.stages if s.name == "shuffle"), folder.manifest.evaluation


def computed(sweep, recorded, alpha: float | None = None) -> list[dict]:
    """The depth table as :func:`depth_sweep` computes it from the folder's runs (each test calls the
    code under test itself; the written table is checked to be this, below)."""
    table, runs, qrels, queries = sweep
    record, ev = recorded
    ev = ev if alpha is None else dataclasses.replace(ev, alpha=alpha)
    return [c.to_json() for c in depth_sweep(record, runs, qrels, queries, REL, ev.gain, ev, NDCG10)]


def test_the_written_depth_table_is_the_sweep_of_the_folder_s_runs(sweep, recorded):
    table = sweep[0]
    cells = computed(sweep, recorded)
    assert table["shuffle"]["depths"] == cells
    assert [c["depth"] for c in cells] == SWEEP_DEPTHS
    # stored as the table stores every figure: six decimals, p-values to four significant digits
    for c in cells:
        for k in ("pool_recall", "input_ndcg10", "achieved_ndcg10", "oracle_ndcg10", "headroom_captured"):
            assert isinstance(c[k], float) and round(c[k], 6) == c[k], (k, c[k])
        assert c["p_value"] == float(f"{c['p_value']:.4g}") and isinstance(c["significant"], bool)
    assert any(len(repr(c[k]).split(".")[1]) == 6 for c in cells for k in ("oracle_ndcg10", "achieved_ndcg10"))


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def test_each_depth_is_the_run_of_a_stage_with_that_top_n(sweep, recorded):
    table, runs, qrels, queries = sweep
    assert runs["shuffle@5"] == runs["shuffle5"] and runs["shuffle@40"] == runs["shuffle40"]
    assert runs["shuffle@10"] == runs["shuffle"]
    by_depth = {c["depth"]: c for c in computed(sweep, recorded)}
    for n, stage in ((5, "shuffle5"), (40, "shuffle40"), (10, "shuffle")):
        assert by_depth[n]["achieved_ndcg10"] == pytest.approx(table[stage]["nDCG@10"], abs=1e-6)
        assert by_depth[n]["pool_recall"] == table[stage]["ceiling"]["pool_recall"]
        assert by_depth[n]["oracle_ndcg10"] == table[stage]["ceiling"]["oracle_ndcg10"]


def test_each_depth_s_ceiling_is_computed_at_that_depth(sweep, recorded):
    table, runs, qrels, queries = sweep
    inp = {q: ranked_ids(runs["bm25"].get(q, {})) for q in queries}
    cells = computed(sweep, recorded)
    for cell in cells:
        n = cell["depth"]
        recall = mean(sum(qrels[q].get(d, -1) >= REL for d in inp[q][:n]) / sum(g >= REL for g in qrels[q].values())
                      for q in queries)  # fmt: skip
        assert cell["pool_recall"] == pytest.approx(recall, abs=1e-6), n
        oracle = mean(oracle_by_gains(inp[q], qrels[q], n) for q in queries)
        assert cell["oracle_ndcg10"] == pytest.approx(oracle, abs=1e-6), n
        achieved = mean(ndcg10(ranked_ids(runs[f"shuffle@{n}"].get(q, {})), qrels[q]) for q in queries)
        assert cell["achieved_ndcg10"] == pytest.approx(achieved, abs=1e-6), n
        assert cell["input_ndcg10"] == pytest.approx(mean(ndcg10(inp[q], qrels[q]) for q in queries), abs=1e-6)
        room = oracle - cell["input_ndcg10"]
        assert cell["headroom_captured"] == pytest.approx((achieved - cell["input_ndcg10"]) / room, abs=1e-5)
    recalls = [c["pool_recall"] for c in cells]
    assert len(set(recalls)) == len(recalls)  # the depths differ, so a figure taken at one depth shows


def test_the_oracle_is_the_best_reordering_of_the_pool_under_the_gain_map(sweep, recorded):
    """Brute force over all 120 orders of a 5-deep pool. The gain table ranks S (2) above E (3), so an
    oracle that sorts by grade instead of gain is beaten by some order (checked to happen here)."""
    table, runs, qrels, queries = sweep
    inp = {q: ranked_ids(runs["bm25"].get(q, {})) for q in queries}
    best = mean(oracle_brute_force(inp[q], qrels[q], 5) for q in queries)
    assert computed(sweep, recorded)[0]["oracle_ndcg10"] == pytest.approx(best, abs=1e-6)
    assert table["shuffle5"]["ceiling"]["oracle_ndcg10"] == pytest.approx(best, abs=1e-6)

    def by_grade(q):
        pool = sorted(inp[q][:5], key=lambda d: -qrels[q].get(d, 0))
        return ndcg10(pool + inp[q][5:], qrels[q])

    assert mean(by_grade(q) for q in queries) < best - 1e-6  # the data can tell gain from grade


def test_depth_p_values_are_holm_over_the_depths_with_the_configured_test(sweep, recorded):
    table, runs, qrels, queries = sweep
    inp = [ndcg10(ranked_ids(runs["bm25"].get(q, {})), qrels[q]) for q in queries]
    raw = []
    for n in SWEEP_DEPTHS:
        out = [ndcg10(ranked_ids(runs[f"shuffle@{n}"].get(q, {})), qrels[q]) for q in queries]
        raw.append(stats.randomization_test(out, inp, SWEEP_EVALUATION["permutations"], SWEEP_EVALUATION["seed"]))
    want = holm(raw)
    cells = computed(sweep, recorded)
    assert [c["p_value"] for c in cells] == pytest.approx(want, rel=1e-3)
    assert [c["significant"] for c in cells] == [p < SWEEP_EVALUATION["alpha"] for p in want]
    # the preconditions that make this test able to fail: Holm changes some p-value, some depth is
    # significant after it, and another seed gives other p-values
    assert any(abs(h - p) > 1e-3 for h, p in zip(want, raw))
    alpha = SWEEP_EVALUATION["alpha"]
    assert any(want[i] < alpha for i in range(len(want)))
    out5 = [ndcg10(ranked_ids(runs["shuffle@5"].get(q, {})), qrels[q]) for q in queries]
    assert stats.randomization_test(out5, inp, SWEEP_EVALUATION["permutations"], 42) != raw[0]


def test_pairs_per_depth_count_the_candidates_scored(sweep, recorded):
    table, runs, qrels, queries = sweep
    bm25 = runs["bm25"]
    for cell in computed(sweep, recorded):
        assert cell["pairs"] == sum(min(cell["depth"], len(docs)) for docs in bm25.values()), cell["depth"]


def test_a_depth_is_significant_by_its_holm_p_value_not_its_raw_one(sweep, recorded):
    """At an alpha between the raw and the Holm-corrected p-values of the deep depths, they are not
    significant (at the table's own alpha, 0.04, they are: the test above)."""
    table, runs, qrels, queries = sweep
    cells = computed(sweep, recorded, alpha=0.005)
    assert [c["p_value"] for c in cells] == [c["p_value"] for c in computed(sweep, recorded)]
    assert min(c["p_value"] for c in cells) >= 0.005 and not any(c["significant"] for c in cells)
    assert all(c["significant"] is False for c in cells)
    raw = [stats.randomization_test([ndcg10(ranked_ids(runs[f"shuffle@{n}"].get(q, {})), qrels[q]) for q in queries],
                                    [ndcg10(ranked_ids(runs["bm25"].get(q, {})), qrels[q]) for q in queries],
                                    SWEEP_EVALUATION["permutations"], SWEEP_EVALUATION["seed"]) for n in SWEEP_DEPTHS]  # fmt: skip
    assert any(p < 0.005 for p in raw)  # so a mark from the raw p would show


def test_a_changed_depths_list_is_another_run_not_the_cached_one(sweep_folder, small_synthetic, tmp_path):
    """Through the sweep's own (warm) cache, a reranker with other ``depths`` gives the depth table a
    run with no cache gives: the list is part of what the stage computes."""
    import stagebench

    def table(cache, out):
        stagebench.run({
            "name": "d", "output": str(out), "cache_dir": str(cache),
            "dataset": {"loader": "esci", "path": str(small_synthetic), "split": "test"},
            "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 60}},
                       {"name": "shuffle", "type": "plugin", "target": "tests.shuffle_plugin:HashShuffle",
                        "inputs": ["bm25"], "params": {"top_n": 10, "depths": [5, 30], "keep": False}}],
            "evaluation": SWEEP_EVALUATION,
        })  # fmt: skip
        return {r["stage"]: r for r in json.loads((out / "stage_table.json").read_text())}["shuffle"]["depths"]

    warm = table(sweep_folder.parent / "cache", tmp_path / "warm")
    assert [c["depth"] for c in warm] == [5, 30]
    assert warm == table(tmp_path / "empty-cache", tmp_path / "fresh")


def test_a_query_a_run_returned_nothing_for_scores_zero_in_the_sweep(sweep, recorded):
    """A stage may return nothing for a query (its file cannot hold an empty ranking): that query
    scores 0 in the input and in each depth's run, as every measure scores it."""
    table, runs, qrels, queries = sweep
    record, ev = recorded
    q = queries[0]
    emptied = {name: {k: v for k, v in run.items() if k != q} for name, run in runs.items()}
    cells = [c.to_json() for c in depth_sweep(record, emptied, qrels, queries, REL, ev.gain, ev, NDCG10)]
    for cell in cells:
        n = cell["depth"]
        achieved = mean(ndcg10(ranked_ids(emptied[f"shuffle@{n}"].get(x, {})), qrels[x]) for x in queries)
        assert cell["achieved_ndcg10"] == pytest.approx(achieved, abs=1e-6)
        assert cell["input_ndcg10"] == pytest.approx(mean(ndcg10(ranked_ids(emptied["bm25"].get(x, {})), qrels[x])
                                                          for x in queries), abs=1e-6)  # fmt: skip


def test_a_reranker_whose_scores_depend_on_the_head_it_is_shown_is_run_at_each_depth(small_synthetic, tmp_path):
    """A plug-in with only ``score(query, docs)`` may score a document by the list it is shown
    (tests/shuffle_plugin.py ``HeadHash``): each depth's run is then the run of a stage with that
    ``top_n``, never the deepest pass cut short."""
    import stagebench

    target = "tests.shuffle_plugin:HeadHash"
    result = stagebench.run({
        "name": "h", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
        "dataset": {"loader": "esci", "path": str(small_synthetic), "split": "test", "max_queries": 12},
        "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 40}},
                   {"name": "head", "type": "plugin", "target": target, "inputs": ["bm25"],
                    "params": {"top_n": 10, "depths": [5, 20]}},
                   {"name": "head5", "type": "plugin", "target": target, "inputs": ["bm25"], "params": {"top_n": 5}},
                   {"name": "head20", "type": "plugin", "target": target, "inputs": ["bm25"], "params": {"top_n": 20}}],
        "evaluation": {"metrics": ["nDCG@10"], "permutations": 100, "bootstrap": 100, "latency_queries": 0},
    })  # fmt: skip
    runs = {p.stem: read_trec_run(p) for p in (result.output / "runs").glob("*.trec")}
    assert runs["head@5"] == runs["head5"] and runs["head@20"] == runs["head20"]
    # the deepest pass cut short would differ: the same documents get other scores from a longer head
    from tests.shuffle_plugin import HeadHash

    docs = [f"product {i}" for i in range(20)]
    order = lambda s: sorted(range(len(s)), key=lambda i: -s[i])  # noqa: E731
    assert order(HeadHash().score("q", docs[:5])) != order(HeadHash().score("q", docs)[:5])


def rr10(ranking: list[str], judged: dict[str, int]) -> float:
    """RR@10 from its definition: one over the rank of the first document of grade >= 1 in the top 10."""
    return next((1.0 / i for i, d in enumerate(ranking[:10], start=1) if judged.get(d, 0) >= REL), 0.0)


def test_the_ceilings_and_the_sweep_are_read_in_the_measure_evaluation_ceiling_names(sweep_folder, sweep):
    """``evaluation.ceiling: RR@10``: every ceiling and depth cell is RR@10's (the oracle the best of every
    reordering of the pool, by brute force at N = 5), the table's JSON names it and reads back, and the
    text table's columns say RR@10."""
    _, runs, qrels, queries = sweep
    folder = RunFolder.open(sweep_folder)
    raw = json.loads(json.dumps(folder.manifest.raw))
    raw["evaluation"]["ceiling"] = "RR@10"
    table = score_folder(Manifest(raw), qrels, runs).table
    row = table.row("shuffle")
    inp = {q: ranked_ids(runs[row.inputs[0]].get(q, {})) for q in queries}
    five = next(c for c in row.depths if c.depth == 5)
    best = [max(rr10(list(p) + inp[q][5:], qrels[q]) for p in itertools.permutations(inp[q][:5])) for q in queries]
    assert five.measure == "RR@10" and five.oracle == pytest.approx(sum(best) / len(best), abs=1e-6)
    assert five.input == pytest.approx(sum(rr10(inp[q], qrels[q]) for q in queries) / len(queries), abs=1e-6)
    assert row.ceiling.measure == "RR@10" and row.ceiling.achieved == pytest.approx(row.metrics["RR@10"], abs=1e-6)
    back = StageTable.from_json(table.to_json(), table.metrics)
    assert back.row("shuffle").ceiling == row.ceiling and back.row("shuffle").depths == row.depths
    assert '"input_rr10"' in table.to_json() and '"measure": "RR@10"' in table.to_json()
    assert "oracle RR@10" in render_text(table) and "nDCG@10" not in render_text(table).split("Recall ceiling")[1].split("\n")[1]
