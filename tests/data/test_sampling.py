"""The ESCI sampling option reproduces search-ranking-stack's draw exactly: after the locale and
small_version filters, numpy.random.default_rng(seed).choice over the unique query ids in order of
first appearance, without replacement; every row of a drawn query kept. Checked on real ESCI rows
against the procedure written out with pandas and numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stagebench.config import parse_config
from stagebench.data.esci import EsciOptions, SampleOptions, load_esci
from stagebench.errors import ConfigError, DataError


def reference_ids(folder, n: int, seed: int) -> set[str]:
    ex = pd.read_parquet(folder / "shopping_queries_dataset_examples.parquet")
    ex = ex[ex["product_locale"] == "us"]
    ex = ex[ex["small_version"] == 1]
    unique = ex["query_id"].drop_duplicates().to_numpy()  # order of first appearance
    return {str(q) for q in np.random.default_rng(seed).choice(unique, size=n, replace=False)}


@pytest.mark.parametrize("n, seed", [(50, 42), (125, 42), (10, 7)])
def test_the_sample_is_the_numpy_choice_draw(esci_real, n, seed):
    opts = EsciOptions(path=str(esci_real), locale="us", split=None, small_version=True, corpus_scope="judged",
                       sample=SampleOptions(queries=n, seed=seed))  # fmt: skip
    ds = load_esci(opts)
    want = reference_ids(esci_real, n, seed)
    assert set(ds.qrels) == want
    ex = pd.read_parquet(esci_real / "shopping_queries_dataset_examples.parquet")
    rows = ex[(ex["product_locale"] == "us") & (ex["small_version"] == 1) & ex["query_id"].astype(str).isin(want)]
    assert sum(len(d) for d in ds.qrels.values()) == len(rows)  # every row of a drawn query
    assert set(ds.corpus) <= set(rows["product_id"].astype(str))  # judged-only scope


def test_a_sample_larger_than_the_queries_left_is_one_line(esci_real):
    opts = EsciOptions(path=str(esci_real), split=None, small_version=True, sample=SampleOptions(queries=126))
    with pytest.raises(DataError, match="sample.queries 126 is more than the 125 queries left after the filters"):
        load_esci(opts)


def test_sample_is_declared_in_the_config():
    raw = {"name": "t", "dataset": {"loader": "esci", "path": "x", "sample": {"queries": 500, "seed": 42}},
           "stages": [{"name": "b", "type": "bm25"}]}
    c = parse_config(raw)
    assert c.dataset.options.sample == SampleOptions(queries=500, seed=42, method="numpy_choice")
    raw["dataset"]["sample"] = {"queries": 500, "method": "shuffle"}
    with pytest.raises(ConfigError, match="dataset.sample.method"):
        parse_config(raw)


def test_the_srs_text_template_by_name():
    from stagebench.data.text import render

    fields = {"title": "Shoe", "brand": "Acme", "color": "red", "bullet_points": "light  mesh", "description": "d" * 600}
    assert render("srs", fields) == "Shoe Brand: Acme light mesh " + "d" * 500
    assert render("srs", {"title": "Shoe", "brand": "", "bullet_points": None, "description": ""}) == "Shoe"
