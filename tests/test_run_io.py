"""TREC run and qrels files, BEIR qrels: duplicate lines are errors naming file and line."""

from __future__ import annotations

import re

import pytest

from stagebench.data.jsonl import _read_beir_qrels
from stagebench.errors import DataError
from stagebench.runs import read_trec_qrels, read_trec_run, write_trec_run


def test_a_duplicate_line_in_a_run_is_an_error(tmp_path):
    p = tmp_path / "run.trec"
    p.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq1 Q0 d1 3 0.5 t\n")
    with pytest.raises(DataError, match=rf"{p}:3: duplicate line for query 'q1' document 'd1'"):
        read_trec_run(p)


@pytest.mark.parametrize("second,extra", [("q1 0 d1 2", ""), ("q1 0 d1 1", " with grade 2, here 1")])
def test_a_document_judged_twice_in_trec_qrels_is_an_error(tmp_path, second, extra):
    p = tmp_path / "qrels"
    p.write_text(f"q1 0 d1 2\nq1 0 d2 0\n{second}\n")
    with pytest.raises(DataError, match=rf"{p}:3: query 'q1' document 'd1' is judged twice \(first on line 1{extra}\)"):
        read_trec_qrels(p)


def test_a_document_judged_twice_in_beir_qrels_is_an_error(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t1\n")
    with pytest.raises(DataError, match=rf"{p}:3: duplicate judgment for query 'q1' document 'd1' \(first on line 2\)"):
        _read_beir_qrels(p)


def test_runs_round_trip_exactly_with_the_tie_rule(tmp_path):
    run = {"q1": {"a": 1.0, "b": 1.0, "c": 0.1 + 0.2}, "q2": {"z": -3.5}}
    write_trec_run(run, tmp_path / "r.trec")
    assert read_trec_run(tmp_path / "r.trec") == run
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert [ln.split()[2] for ln in lines[:3]] == ["b", "a", "c"]  # ties: doc id descending


def test_qrels_forms_and_the_header_rule(tmp_path):
    p = tmp_path / "q"
    p.write_text("q1 0 d1 2\nq1 0 d2 0\n\nq2 0 d3 1\n")
    assert read_trec_qrels(p) == {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    p.write_text("query-id corpus-id score\nq1 d1 2\nq2 d3 1\n")  # 3 columns with a header line
    assert read_trec_qrels(p) == {"q1": {"d1": 2}, "q2": {"d3": 1}}
    p.write_text("q1 d1 2\nquery-id corpus-id score\n")  # a header is only ever line 1
    with pytest.raises(DataError, match=rf"{p}:2: grade 'score' is not an integer"):
        read_trec_qrels(p)
    p.write_text("q1 0 d1 2 extra\n")
    with pytest.raises(DataError, match=rf"{p}:1: expected 'qid iter docid grade', got 5 columns"):
        read_trec_qrels(p)
    p.write_text("q1 d1\n")
    with pytest.raises(DataError, match=rf"{p}:1: expected 'qid iter docid grade', got 2 columns"):
        read_trec_qrels(p)
    with pytest.raises(DataError, match=rf"{tmp_path / 'none'}: qrels file not found"):
        read_trec_qrels(tmp_path / "none")


def test_run_file_errors_name_file_and_line(tmp_path):
    p = tmp_path / "r"
    for text, msg in [("q1 Q0 d1 1 2.0\n", ":1: expected 6 columns"), ("q1 Q0 d1 1 x t\n", ":1: score 'x' is not a number"),
                      ("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 nan t\n", ":2: score 'nan' is not a finite number"),
                      ("\nq1 Q0 d1 1 inf t\n", ":2: score 'inf' is not a finite number")]:  # fmt: skip
        p.write_text(text)
        with pytest.raises(DataError, match=re.escape(f"{p}{msg}")):
            read_trec_run(p)
    p.write_text("q1 Q0 d1 1 2.0 t\n\nq2 Q0 d1 1 -1e300 t\n")
    assert read_trec_run(p) == {"q1": {"d1": 2.0}, "q2": {"d1": -1e300}}
    p.write_bytes(b"q1 Q0 d1 1 2.0 t\n\xff\xfe\n")
    with pytest.raises(DataError, match=":2: the run file is not UTF-8 text \\(byte 0xff at byte offset 17"):
        read_trec_run(p)
    with pytest.raises(DataError, match="run file not found"):
        read_trec_run(tmp_path / "none")
