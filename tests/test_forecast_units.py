"""The forecast's unit of work (issue 95), by hand: a pair costs its characters capped at the model's
max_length (4 characters a token) plus one, and a batch costs its length times its longest pair - every
query's pairs sorted together for a stage that mixes queries, each query's in its order otherwise."""

from __future__ import annotations

from stagebench.data.dataset import Dataset
from stagebench.forecast import pair_chars, size


def _ds() -> Dataset:
    corpus = {"a": {"t": "x" * 9}, "b": {"t": "y" * 29}, "c": {"t": "z" * 4}}
    return Dataset(name="d", corpus=corpus, queries={"q1": "ab", "q2": "abcd"}, qrels={}, text_template="{t}")


def test_a_pairs_cost_is_its_capped_length_padded_as_its_batches_pad_it():
    ds = _ds()
    assert size("hello", None) == 6 and size("hello", 3) == 4
    run = {"q1": {"a": 1.0, "b": 0.5}, "q2": {"c": 1.0}}
    # sizes: q1+a = len("ab x*9") + 1 = 13, q1+b = 33, q2+c = len("abcd z*4") + 1 = 10
    assert pair_chars(ds, run, None) == 13 + 33 + 10
    assert pair_chars(ds, run, 20) == 13 + 21 + 10  # q1+b capped at 20 (+1)
    # batches of 2, every query's pairs sorted together: [33, 13] -> 2 x 33, [10] -> 10
    assert pair_chars(ds, run, None, batch=2, across=True) == 2 * 33 + 10
    # batches of 2, each query's own: q1 [13, 33] -> 2 x 33, q2 [10] -> 10; batches of 1: no padding
    assert pair_chars(ds, run, None, batch=2, across=False) == 2 * 33 + 10
    assert pair_chars(ds, run, None, batch=1, across=True) == 13 + 33 + 10
    run3 = {"q1": {"a": 1.0}, "q2": {"c": 1.0, "b": 0.5}}  # 13 | 10, len("abcd y*29")+1 = 35
    assert pair_chars(ds, run3, None, batch=2, across=True) == 2 * 35 + 10  # sorted: [35, 13], [10]
    assert pair_chars(ds, run3, None, batch=2, across=False) == 13 + 2 * 35  # q1 [13], q2 [10, 35]
