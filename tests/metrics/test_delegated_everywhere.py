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
    rbp = parse_measure("RBP(rel=1,p=0.8)")
    assert isinstance(rbp, Delegated) and rbp.provider == "cwl_eval" and rbp.declared is None
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
    assert "computed by ir_measures" in notes and "RBP(rel=1) (cwl_eval), Bpref (pytrec_eval)" in notes
    rows = {r.stage: r for r in table.rows}
    assert set(rows["bm25"].judged_only) == {"nDCG@10", "ERR@10"}  # no judged-only view of ir_measures' measures
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


def test_a_measure_only_a_provider_outside_ir_measures_default_pipeline_computes_is_computed_by_it():
    """RBP: only trectools computes it in ir_measures 0.4, and ir_measures' default pipeline calls it
    "unsupported"; each delegated measure is computed by the provider it was resolved to, beside one
    of another provider, and equals that provider's own answer."""
    pytest.importorskip("trectools", reason="RBP's only provider (pip install 'ir-measures[trectools]')")
    import ir_measures

    from stagebench.metrics import evaluate

    qrels = {"q1": {"a": 2, "b": 0, "c": 1}, "q2": {"a": 1, "d": 3}}
    run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"d": 2.0, "a": 1.0, "x": 0.5}}
    ev = evaluate(qrels, run, ["RBP(p=0.8)", "Bpref"])
    assert [m.provider for m in ev.measures] == ["trectools", "pytrec_eval"]
    rbp = ir_measures.parse_measure("RBP(p=0.8)")
    want = {m.query_id: m.value for m in ir_measures.providers.registry["trectools"].evaluator([rbp], qrels).iter_calc(run)}
    assert ev.per_query[ev.measures[0].name] == pytest.approx(want, abs=1e-12)
