"""The oracle pool: every relevant product in each query's pool, the input's order kept, the pool's
size, and a query's pool a function of its own seed, id and judgments - checked from the
definition, and through a real run whose reranker's pool recall is 1."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from stagebench.stages.oracle import oracle_pool


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 40), depth=st.integers(1, 30), grades=st.lists(st.integers(0, 3), max_size=60),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_every_relevant_product_is_in_the_pool_and_nothing_is_invented(n, depth, grades, seed):
    ranking = [f"d{i}" for i in range(n)]
    judged = {f"d{i * 2 % 70}": g for i, g in enumerate(grades)}  # some judged products are retrieved, some not
    pool, added = oracle_pool("q", ranking, judged, depth, 1, seed)
    relevant = {d for d, g in judged.items() if g >= 1}
    assert relevant <= set(pool) and len(set(pool)) == len(pool)
    assert set(pool) <= set(ranking[:depth]) | relevant  # from the input's top depth, or judged relevant
    assert added == len(relevant - set(ranking[:depth]))
    assert len(pool) == max(min(depth, len(set(ranking[:depth]) | relevant)), len(relevant))
    kept = [d for d in pool if d in set(ranking[:depth])]
    assert kept == [d for d in ranking[:depth] if d in set(kept)]  # the input's candidates keep their order
    dropped = [d for d in ranking[:depth] if d not in set(pool)]
    assert not (set(dropped) & relevant)  # only non-relevant candidates make room ...
    assert all(ranking.index(d) > ranking.index(k) for d in dropped for k in kept if k not in relevant)  # ... the lowest


def test_a_querys_pool_depends_on_its_seed_id_and_judgments_only():
    ranking = [f"d{i}" for i in range(50)]
    judged = {f"x{i}": 2 for i in range(6)}
    a, _ = oracle_pool("q1", ranking, judged, 20, 1, 7)
    assert oracle_pool("q1", ranking, judged, 20, 1, 7)[0] == a
    assert oracle_pool("q1", ranking, dict(reversed(list(judged.items()))), 20, 1, 7)[0] == a  # not dict order
    others = {oracle_pool("q1", ranking, judged, 20, 1, s)[0].index("x0") for s in range(30)}
    assert len(others) > 5  # the ranks really are drawn
    # the injected ranks follow the definition: each missing product, in id order, inserted at randrange(len + 1)
    rng = random.Random("7:q1")
    expect = ranking[:14]
    for d in sorted(judged):
        expect.insert(rng.randrange(len(expect) + 1), d)
    assert a == expect


def test_a_reranker_over_the_oracle_pool_sees_every_relevant_product(tmp_path, small_synthetic):
    import json

    from stagebench.config import load_config
    from stagebench.pipeline import run_config

    cfg = tmp_path / "o.yaml"
    cfg.write_text(f"name: o\noutput: {tmp_path / 'o'}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {small_synthetic}, split: test}}\nstages:\n"
                   "  - {name: bm25, type: bm25, params: {top_k: 100}}\n"
                   "  - {name: oracle, type: oracle_pool, inputs: [bm25], params: {depth: 50}}\n"
                   "  - {name: on_bm25, type: plugin, target: 'examples.title_boost:TitleBoostReranker', inputs: [bm25], params: {top_n: 50}}\n"
                   "  - {name: on_oracle, type: plugin, target: 'examples.title_boost:TitleBoostReranker', inputs: [oracle], params: {top_n: 50}}\n"
                   "evaluation: {metrics: [nDCG@10, R@100], permutations: 200, bootstrap: 200}\n")  # fmt: skip
    result = run_config(load_config(cfg))
    ds = result.dataset
    assert max(sum(g >= 1 for g in j.values()) for j in ds.qrels.values()) <= 50  # so a pool of 50 holds them all
    for q, docs in result.runs["oracle"].items():
        relevant = {d for d, g in ds.qrels.get(q, {}).items() if g >= 1}
        assert relevant <= set(docs) and len(docs) == max(min(50, len(set(list(result.runs["bm25"].get(q, {}))[:50]) | relevant)), len(relevant))
    rows = {r["stage"]: r for r in json.loads((result.output / "stage_table.json").read_text())}
    assert rows["on_oracle"]["ceiling"]["pool_recall"] == 1.0 > rows["on_bm25"]["ceiling"]["pool_recall"]
    assert rows["on_oracle"]["nDCG@10"] >= rows["on_bm25"]["nDCG@10"]
    assert rows["oracle"]["type"] == "oracle_pool"  # labelled as such in the table
