from __future__ import annotations

import json

import pytest

from stagebench.data.jsonl import BeirOptions, SrsJsonlOptions, load_beir, load_srs_jsonl
from stagebench.data.text import render, strip_html
from stagebench.data.trec import TrecOptions, load_trec
from stagebench.errors import DataError


def test_beir_reads_cranfield(cranfield):
    ds = load_beir(BeirOptions(path=str(cranfield)))
    assert len(ds.corpus) == 1400
    assert len(ds.queries) == 225
    assert sum(len(v) for v in ds.qrels.values()) == 1837
    assert max(g for v in ds.qrels.values() for g in v.values()) == 4


def test_trec_loader(tmp_path):
    (tmp_path / "qrels.txt").write_text("1 0 d1 2\n1 0 d2 0\n2 0 d3 1\n")
    (tmp_path / "topics.txt").write_text("<top>\n<num> Number: 1\n<title> red shoes\n</top>\n<top><num>2<title>blue hat</top>\n")
    (tmp_path / "corpus.tsv").write_text("d1\tred running shoes\nd2\tblue shoes\nd3\tblue <b>hat</b>\n")
    ds = load_trec(TrecOptions(qrels=str(tmp_path / "qrels.txt"), topics=str(tmp_path / "topics.txt"),
                               corpus=str(tmp_path / "corpus.tsv")))  # fmt: skip
    assert ds.queries == {"1": "red shoes", "2": "blue hat"}
    assert ds.doc_text["d3"] == "blue hat"


def test_srs_jsonl_triplet(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"product_id": "p1", "product_text": "red shoe", "product_title": "Red"}) + "\n"
        + json.dumps({"product_id": "p2", "product_text": "blue hat"}) + "\n"
    )
    (tmp_path / "queries.jsonl").write_text(json.dumps({"query_id": 1, "query": "red shoes"}) + "\n")
    (tmp_path / "qrels.jsonl").write_text(json.dumps({"query_id": 1, "product_id": "p1", "relevance": 3}) + "\n")
    ds = load_srs_jsonl(SrsJsonlOptions(path=str(tmp_path)))
    assert ds.qrels == {"1": {"p1": 3}} and ds.doc_text == {"p1": "red shoe", "p2": "blue hat"}


def test_beir_duplicate_doc_id(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "1", "text": "x"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n")
    with pytest.raises(DataError, match=r"corpus.jsonl:2: duplicate document id 'a'"):
        load_beir(BeirOptions(path=str(tmp_path)))


def test_strip_html_and_template():
    assert strip_html("<p>Soft&amp;warm<br/>cotton</p><script>x()</script>") == "Soft&warm cotton"
    assert render("{title} {brand} {color}", {"title": "Mug", "brand": None, "color": "red"}) == "Mug red"
