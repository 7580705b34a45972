"""The columnar corpus (stagebench.data.corpus): the same documents and texts as the dicts it
replaced, read by position, across chunk boundaries."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stagebench.data.corpus import CHUNK, Corpus, TextColumn
from stagebench.data.dataset import Dataset
from stagebench.data.text import render


def docs(n: int) -> dict[str, dict[str, str]]:
    return {f"p{i}": {"title": f"title {i}", "brand": "" if i % 3 else f"brand{i}", "color": "red"} for i in range(n)}


def test_a_corpus_is_the_mapping_it_was_built_from():
    d = docs(50)
    c = Corpus.from_dict(d)
    assert len(c) == 50 and list(c) == list(d) and c.fields == ("title", "brand", "color")
    assert dict(c.items()) == d and c == d
    assert "p7" in c and "p50" not in c and c.get("p50") is None and c["p3"] == d["p3"]
    with pytest.raises(KeyError):
        c["nope"]


def test_fields_absent_from_some_documents_read_as_empty():
    c = Corpus.from_dict({"a": {"title": "x"}, "b": {"brand": "y"}})
    assert c["a"] == {"title": "x", "brand": ""} and c["b"] == {"title": "", "brand": "y"}


def test_text_columns_read_by_position_across_chunks():
    n = CHUNK * 2 + 17
    values = [f"t{i}" for i in range(n)]
    col = TextColumn.build(values)
    assert col.column.num_chunks == 3 and len(col) == n
    for i in (0, CHUNK - 1, CHUNK, 2 * CHUNK, n - 1, -1):
        assert col[i] == values[i]
    assert col[CHUNK - 2 : CHUNK + 2] == values[CHUNK - 2 : CHUNK + 2]
    assert list(col) == values and col == values
    with pytest.raises(IndexError):
        col[n]
    # an Arrow array of another chunking is cut again at CHUNK rows
    odd = TextColumn(pa.chunked_array([pa.array(values[:5]), pa.array(values[5:])]))
    assert odd.column.num_chunks == 3 and odd[CHUNK + 3] == values[CHUNK + 3]


def test_from_arrow_cleans_every_value_and_take_keeps_the_order():
    ids = pa.array(["a", "b", "c"])
    c = Corpus.from_arrow(ids, {"title": pa.array(["<b>X</b> &amp; y", None, "z"])},
                          clean=lambda v: v.replace("<b>", "").replace("</b>", "").replace("&amp;", "&") if v else "")
    assert [c[d]["title"] for d in c] == ["X & y", "", "z"]
    kept = c.take([True, False, True])
    assert list(kept) == ["a", "c"] and kept["c"] == {"title": "z"}


def test_a_dataset_renders_the_same_texts_as_per_document_dicts():
    d = docs(CHUNK + 5)
    template = "{title} {brand} {color}"
    ds = Dataset("t", d, {"q": "red"}, {"q": {"p1": 3}}, template)
    assert isinstance(ds.corpus, Corpus)
    expected = [render(template, f) for f in d.values()]
    assert list(ds.doc_texts) == expected and ds.doc_ids == list(d)
    assert ds.doc_text["p65540"] == render(template, d["p65540"]) and ds.doc_text.get("zz", "") == ""
    assert dict(ds.doc_text.items()) == dict(zip(d, expected))
    judged = ds.judged_only()
    assert list(judged.corpus) == ["p1"] and list(judged.doc_texts) == [expected[1]]
    assert judged.fingerprint != ds.fingerprint
