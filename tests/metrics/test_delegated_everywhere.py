"""A measure ir_measures knows works everywhere a native one does (issue 68): a config's table with its
significance marks, ``stagebench.evaluate``, segments; trec_eval's names of stagebench's own measures are
read as those measures. Values against ir_measures computed here, to 1e-9."""

from __future__ import annotations

import csv

import pytest

import stagebench
from stagebench.metrics import Delegated, Measure, parse_measure

irm = pytest.importorskip("ir_measures", reason="the interop extra is not installed (pip install 'stagebench[interop]')")


def test_trec_eval_names_are_stagebench_measures_and_ir_measures_names_are_delegated():
    assert parse_measure("ndcg_cut_10").name == "nDCG@10" and parse_measure("P_5").name == "P@5"
    assert parse_measure("recip_rank").name == "RR" and parse_measure("map").name == "AP"
    assert parse_measure("map_cut_100").name == "AP@100" and parse_measure("recall_1000").name == "R@1000"
    assert isinstance(parse_measure("ERR@10"), Measure)  # native
    assert parse_measure("num_rel_ret").name == "Hits" and parse_measure("rbp").name == "RBP(p=0.9,graded=True)"
    rbp = parse_measure("RBP(rel=1,p=0.8)")  # native since issue 77: the docs' example needs no provider
    assert isinstance(rbp, Measure) and rbp.name == "RBP(rel=1)"
    bpref = parse_measure("bpref")  # trec_eval's name of a measure ir_measures computes
    assert isinstance(bpref, Delegated) and bpref.name == "Bpref" and bpref.provider == "pytrec_eval"
    with pytest.raises(stagebench.StagebenchError, match=r"trec_eval's gm_map has no name in stagebench or ir_measures"):
        parse_measure("gm_map")
    with pytest.raises(stagebench.StagebenchError, match="unknown family 'Nonsense'"):
        parse_measure("Nonsense@10")


def test_a_config_table_gives_delegated_measures_their_significance_and_ir_measures_values(tmp_path, tiny_synthetic):
    cfg = {"name": "d", "output": str(tmp_path / "d"), "cache_dir": str(tmp_path / "cache"),
           "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"},
           "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 50}},
                      {"name": "flat", "type": "bm25", "params": {"k1": 0.3, "b": 0.1, "top_k": 50}}],
           "evaluation": {"metrics": ["ndcg_cut_10", "ERR@10", "RBP(rel=1,p=0.8)", "Bpref"], "permutations": 200,
                          "latency_queries": 0}}  # fmt: skip
    result = stagebench.run(cfg)
    table = result.stage_table
    assert table.metrics == ["nDCG@10", "ERR@10", "RBP(rel=1)", "Bpref"]
    notes = " ".join(table.notes)
    assert "computed by ir_measures" in notes and "Bpref (pytrec_eval)" in notes and "RBP(rel=1) (" not in notes
    rows = {r.stage: r for r in table.rows}
    assert set(rows["bm25"].judged_only) == {"nDCG@10", "ERR@10", "RBP(rel=1)"}  # none of ir_measures' measures
    # no bounds for Bpref: the holes settle none of its orders, so its every mark carries a "?"
    assert all(sorted(r.unsettled["Bpref"]) == sorted(o.id for o in table.rows if o is not r) for r in table.rows)
    assert all(m in rows["bm25"].ci95 for m in table.metrics)  # intervals and significance from per-query values
    per_query = {}
    with open(result.output / "per_query.csv", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):  # stage, qid, one column per measure (6 decimals)
            per_query |= {(r["stage"], m, r["qid"]): float(r[m]) for m in table.metrics}
    qrels = stagebench.api.read_trec_qrels(result.output / "qrels.trec")
    for stage in ("bm25", "flat"):
        run = stagebench.api.read_trec_run(result.output / "runs" / f"{stage}.trec")
        theirs = {(str(m.measure), m.query_id): m.value for m in irm.iter_calc(
            [irm.parse_measure("RBP(rel=1,p=0.8)"), irm.Bpref, irm.nDCG @ 10], qrels, run)}  # fmt: skip
        compared = 0
        for (name, q), v in theirs.items():
            if (stage, name, q) in per_query:  # the table's file, 6 decimals
                assert per_query[(stage, name, q)] == pytest.approx(v, abs=1e-6), (stage, name, q)
                compared += 1
        assert compared >= 3 * 20, compared
        ev = stagebench.evaluate(qrels, run, ["RBP(rel=1,p=0.8)", "Bpref"])
        assert ev.per_query["Bpref"] == pytest.approx({q: theirs.get(("Bpref", q), 0.0) for q in ev.scored_queries}, abs=1e-9)


def test_the_judging_round_on_a_folder_of_ir_measures_measures_is_one_line(tmp_path, tiny_synthetic):
    """Every measure delegated: the round has no measure with views to default to, and says so (it raised an
    IndexError); naming one of stagebench's own measures works."""
    cfg = {"name": "d", "output": str(tmp_path / "d"), "cache_dir": str(tmp_path / "cache"),
           "dataset": {"loader": "esci", "path": str(tiny_synthetic), "split": "test"},
           "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 50}},
                      {"name": "flat", "type": "bm25", "params": {"k1": 0.3, "b": 0.1, "top_k": 50}}],
           "evaluation": {"metrics": ["Bpref"], "permutations": 200, "latency_queries": 0}}  # fmt: skip
    folder = stagebench.run(cfg).output
    with pytest.raises(stagebench.StagebenchError, match="every measure of the folder is computed by ir_measures"):
        stagebench.api.plan_judgments(folder, 5, tmp_path / "sheet")
    assert stagebench.api.plan_judgments(folder, 5, tmp_path / "sheet", measure="nDCG@10").pairs == 5
