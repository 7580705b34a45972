from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from stagebench.data.esci import EXAMPLES_FILE, PRODUCTS_FILE, EsciHfOptions, EsciOptions, load_esci, load_esci_hf
from stagebench.errors import DataError


def test_real_rows_load_with_filters_html_and_nulls(esci_real):
    ds = load_esci(EsciOptions(path=str(esci_real), split=None))
    assert len(ds.queries) == 250
    assert sum(len(v) for v in ds.qrels.values()) == 685
    assert ds.label_names == {3: "E", 2: "S", 1: "C", 0: "I"}
    grades = pd.Series([g for v in ds.qrels.values() for g in v.values()]).value_counts().to_dict()
    assert grades == {3: 623, 2: 49, 0: 12, 1: 1}
    raw = pd.read_parquet(esci_real / PRODUCTS_FILE)
    with_html = raw[raw.product_description.fillna("").str.contains("<")]
    assert len(with_html) > 0
    for pid in with_html.product_id:
        desc = ds.corpus[pid]["description"]
        assert not re.search(r"</?[A-Za-z][^>]*>", desc), desc  # no tag survives stripping
        assert desc and "  " not in desc  # text kept, whitespace collapsed
    nulls = raw[raw.product_brand.isna()]
    assert len(nulls) > 0 and all(ds.corpus[p]["brand"] == "" for p in nulls.product_id)
    assert all(t and "None" not in t for t in ds.doc_texts)


def test_real_rows_split_and_small_version(esci_real):
    test = load_esci(EsciOptions(path=str(esci_real), split="test"))
    train = load_esci(EsciOptions(path=str(esci_real), split="train"))
    assert len(test.queries) + len(train.queries) == 250
    small = load_esci(EsciOptions(path=str(esci_real), split=None, small_version=True))
    ex = pd.read_parquet(esci_real / EXAMPLES_FILE)
    assert sum(len(v) for v in small.qrels.values()) == int((ex.small_version == 1).sum())


def test_judged_scope_keeps_only_judged_products(esci_real):
    ds = load_esci(EsciOptions(path=str(esci_real), split="test", corpus_scope="judged"))
    judged = {d for v in ds.qrels.values() for d in v}
    assert set(ds.corpus) == judged & set(ds.corpus)
    assert ds.corpus_scope == "judged"


def test_word_labels_and_custom_label_table(tmp_path, esci_real):
    ex = pd.read_parquet(esci_real / EXAMPLES_FILE)
    ex["esci_label"] = ex.esci_label.map({"E": "Exact", "S": "Substitute", "C": "Complement", "I": "Irrelevant"})
    ex.to_parquet(tmp_path / EXAMPLES_FILE)
    shutil.copy(esci_real / PRODUCTS_FILE, tmp_path / PRODUCTS_FILE)
    ds = load_esci(EsciOptions(path=str(tmp_path), split=None))
    assert sum(g == 3 for v in ds.qrels.values() for g in v.values()) == 623
    ds2 = load_esci(EsciOptions(path=str(tmp_path), split=None,
                                labels={"Exact": 1, "Substitute": 0, "Complement": 0, "Irrelevant": 0}))  # fmt: skip
    assert max(g for v in ds2.qrels.values() for g in v.values()) == 1


def _write(tmp_path: Path, esci_real: Path, edit_ex=None, edit_pr=None) -> Path:
    ex = pd.read_parquet(esci_real / EXAMPLES_FILE)
    pr = pd.read_parquet(esci_real / PRODUCTS_FILE)
    ex = edit_ex(ex) if edit_ex else ex
    pr = edit_pr(pr) if edit_pr else pr
    ex.to_parquet(tmp_path / EXAMPLES_FILE)
    pr.to_parquet(tmp_path / PRODUCTS_FILE)
    return tmp_path


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"shopping_queries_dataset_examples.parquet: file not found"):
        load_esci(EsciOptions(path=str(tmp_path)))


def test_missing_required_column(tmp_path, esci_real):
    _write(tmp_path, esci_real, edit_ex=lambda e: e.drop(columns=["esci_label"]))
    with pytest.raises(DataError, match=r"examples.parquet: missing required column\(s\) esci_label"):
        load_esci(EsciOptions(path=str(tmp_path), split=None))


def test_unknown_label_names_the_row(tmp_path, esci_real):
    def edit(e):
        e.loc[e.index[5], "esci_label"] = "X"
        return e

    _write(tmp_path, esci_real, edit_ex=edit)
    with pytest.raises(DataError, match=r"example_id \d+: unknown esci_label 'X'"):
        load_esci(EsciOptions(path=str(tmp_path), split=None))


def test_duplicate_judgment_and_duplicate_product(tmp_path, esci_real):
    _write(tmp_path, esci_real, edit_ex=lambda e: pd.concat([e, e.iloc[[0]]]))
    with pytest.raises(DataError, match="duplicate judgment for query_id"):
        load_esci(EsciOptions(path=str(tmp_path), split=None))
    _write(tmp_path, esci_real, edit_pr=lambda p: pd.concat([p, p.iloc[[3]]]))
    with pytest.raises(DataError, match=r"products.parquet: duplicate product \(product_id="):
        load_esci(EsciOptions(path=str(tmp_path), split=None))


def test_empty_query_text(tmp_path, esci_real):
    def edit(e):
        e.loc[e.index[0], "query"] = "   "
        return e

    _write(tmp_path, esci_real, edit_ex=edit)
    with pytest.raises(DataError, match="empty or null query text"):
        load_esci(EsciOptions(path=str(tmp_path), split=None))


def test_qrels_naming_absent_products_warn_and_count(tmp_path, esci_real):
    _write(tmp_path, esci_real, edit_pr=lambda p: p.iloc[10:])
    ds = load_esci(EsciOptions(path=str(tmp_path), split=None))
    assert ds.qrels_docs_missing >= 10
    assert any("absent from" in w for w in ds.warnings)


def test_hf_loader_reads_merged_rows_from_local_parquet(tmp_path, esci_real):
    ex = pd.read_parquet(esci_real / EXAMPLES_FILE)
    pr = pd.read_parquet(esci_real / PRODUCTS_FILE)
    merged = ex.merge(pr, on=["product_id", "product_locale"], how="left")
    merged["esci_label"] = merged.esci_label.map({"E": "Exact", "S": "Substitute", "C": "Complement", "I": "Irrelevant"})
    merged.to_parquet(tmp_path / "train-00000.parquet")
    ds = load_esci_hf(EsciHfOptions(path=str(tmp_path), split=None))
    ref = load_esci(EsciOptions(path=str(esci_real), split=None))
    assert ds.qrels == ref.qrels
    assert ds.doc_text == {d: ref.doc_text[d] for d in ds.corpus}


def test_hf_loader_takes_the_split_from_file_names_like_tasksource(tmp_path, esci_real):
    """tasksource/esci has no split column: its parquet files are named by split."""
    ex = pd.read_parquet(esci_real / EXAMPLES_FILE)
    pr = pd.read_parquet(esci_real / PRODUCTS_FILE)
    merged = ex.merge(pr, on=["product_id", "product_locale"], how="left")
    for split in ("train", "test"):
        merged[merged.split == split].drop(columns=["split"]).to_parquet(tmp_path / f"{split}-00000-of-00001.parquet")
    test = load_esci_hf(EsciHfOptions(path=str(tmp_path), split="test"))
    ref = load_esci(EsciOptions(path=str(esci_real), split="test"))
    assert test.qrels == ref.qrels
    (tmp_path / "other.parquet").write_bytes((tmp_path / "test-00000-of-00001.parquet").read_bytes())
    for f in tmp_path.glob("t*.parquet"):
        f.unlink()
    with pytest.raises(DataError, match="cannot be told from the file name"):
        load_esci_hf(EsciHfOptions(path=str(tmp_path), split="test"))
