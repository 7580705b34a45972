from __future__ import annotations

import hashlib

import pandas as pd
import pytest

from stagebench.data.esci import EXAMPLES_FILE, PRODUCTS_FILE, EsciOptions, load_esci
from stagebench.data.synthetic import CATEGORIES, SyntheticSpec, generate


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("syn-full")
    stats = generate(out, SyntheticSpec())
    return out, stats


@pytest.mark.slow
def test_default_size_meets_the_spec(full):
    out, stats = full
    assert stats["products"] >= 20000 and stats["categories"] >= 30
    assert stats["queries"]["test"] >= 500 and stats["queries"]["train"] >= 2000
    ex = pd.read_parquet(out / EXAMPLES_FILE)
    pools = ex.groupby("query_id").size()
    assert pools.min() >= 15 and pools.max() <= 40
    test = load_esci(EsciOptions(path=str(out), split="test"))
    judged = {d for v in test.qrels.values() for d in v}
    assert len(test.corpus) - len(judged) > 5000  # unjudged products make up the rest


@pytest.mark.slow
def test_deterministic(full, embedded_dataset, tmp_path):
    """The default spec gives the same tables in another process: the embedded dataset `make data`
    generated (or, where the repo has none yet, the fixture's own generation)."""
    out, _ = full
    for f in (EXAMPLES_FILE, PRODUCTS_FILE):
        a = pd.read_parquet(out / f)
        b = pd.read_parquet(embedded_dataset / f)
        assert a.equals(b), f"{embedded_dataset / f} is not what the default spec generates now (make data regenerates it)"
    other = tmp_path / "other"
    generate(other, SyntheticSpec(seed=99, n_products=2000, n_test_queries=10, n_train_queries=0))
    assert hashlib.sha256((other / PRODUCTS_FILE).read_bytes()).digest() != hashlib.sha256((out / PRODUCTS_FILE).read_bytes()).digest()


def test_labels_follow_the_rules():
    import random

    from stagebench.data.synthetic import _make_products, _make_queries, _mismatches

    spec = SyntheticSpec(seed=5, n_products=3000, n_test_queries=60, n_train_queries=0)
    rng = random.Random(spec.seed)
    products = _make_products(spec, rng)
    rows = _make_queries(spec, products, rng)
    by_id = {p["product_id"]: p for p in products}
    seen = set()
    for r in rows:
        p, cat, cons = by_id[r["product_id"]], r["category"], r["constraints"]
        excluded = r["excluded"] is not None and p[r["excluded"][0]] == r["excluded"][1]  # a negation query's excluded value
        seen.add(r["esci_label"])
        if r["esci_label"] == "E":
            assert p["category"] == cat and _mismatches(p, cons) == 0 and not excluded
        elif r["esci_label"] == "S":
            assert p["category"] == cat and _mismatches(p, cons) == 1 and not excluded
        elif r["esci_label"] == "C":
            assert p["category"] in CATEGORIES[cat][5]
        else:
            other = p["category"] != cat and p["category"] not in CATEGORIES[cat][5]
            assert other or (p["category"] == cat and (_mismatches(p, cons) >= 2 or excluded))
    assert seen == {"E", "S", "C", "I"}
    # vocabulary mismatch on purpose: many queries use none of their category's catalog nouns
    queries = {r["query_id"]: (r["query"], r["category"]) for r in rows}
    no_catalog_noun = sum(1 for q, c in queries.values() if not any(n in q for n in CATEGORIES[c][0]))
    assert no_catalog_noun / len(queries) > 0.3


def test_html_and_nulls_present(small_synthetic):
    pr = pd.read_parquet(small_synthetic / PRODUCTS_FILE)
    assert pr.product_description.str.contains("<p>", na=False).any()
    assert pr.product_description.isna().any() and pr.product_brand.isna().any()


@pytest.fixture(scope="module")
def truth_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("syn-truth")
    generate(out, SyntheticSpec(seed=7, n_products=800, n_test_queries=30, n_train_queries=10))
    return out


def test_the_rules_grade_every_judged_pair_as_its_label_and_the_unjudged_ones_too(truth_folder):
    from stagebench.data.synthetic import truth

    t = truth(truth_folder)
    ex = pd.read_parquet(truth_folder / EXAMPLES_FILE)
    graded = [t.label(str(q), p) for q, p in zip(ex["query_id"], ex["product_id"])]
    assert graded == ex["esci_label"].tolist()  # exact agreement 1.0 on the judged pool
    assert len(ex) > 500
    # outside the pool every pair has a grade too (a pool holds at most 40 products of 800)
    products = pd.read_parquet(truth_folder / PRODUCTS_FILE)["product_id"].tolist()
    judged = set(zip(ex["query_id"].astype(str), ex["product_id"]))
    outside = [t.label(q, p) for q in t.intents for p in products if (q, p) not in judged]
    assert None not in outside and {"S", "C", "I"} <= set(outside)
    assert t.label("no-such-query", products[0]) is None and t.label("0", "no-such-product") is None


def test_the_rules_refuse_a_folder_generate_data_did_not_write(truth_folder, tmp_path):
    import shutil

    from stagebench.data.synthetic import RECORD, truth
    from stagebench.errors import StagebenchError

    with pytest.raises(StagebenchError, match=f"not a dataset stagebench generate-data wrote \\(no {RECORD}\\)"):
        truth(tmp_path)
    changed = tmp_path / "changed"
    shutil.copytree(truth_folder, changed)
    ex = pd.read_parquet(changed / EXAMPLES_FILE)
    ex.loc[0, "esci_label"] = "I" if ex.loc[0, "esci_label"] != "I" else "E"
    ex.to_parquet(changed / EXAMPLES_FILE, index=False)
    with pytest.raises(StagebenchError, match=f"{EXAMPLES_FILE} was changed after stagebench wrote it"):
        truth(changed)
