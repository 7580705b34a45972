"""Gain maps for nDCG: a hand-computed example for each, agreement with a direct computation on
random cases, the ideal order under the same map, and the errors."""

from __future__ import annotations

import math
import random

import pytest

from stagebench.config import parse_config
from stagebench.errors import ConfigError, StagebenchError
from stagebench.metrics import compute, evaluate

LOG2_3 = math.log2(3)  # the discount at rank 2
# one query, ESCI grades E=3, S=2, C=1, I=0; the ranking puts S, then E, then C, then I
QRELS = {"q": {"s": 2, "e": 3, "c": 1, "i": 0}}
RUN = {"q": {"s": 4.0, "e": 3.0, "c": 2.0, "i": 1.0}}


def dcg(gains: list[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


@pytest.mark.parametrize("gain, ranked_gains, ideal_gains", [
    ("linear", [2, 3, 1, 0], [3, 2, 1, 0]),
    ("exponential", [3, 7, 1, 0], [7, 3, 1, 0]),
    # esci-data's trec_eval gains: E=1, S=0.01, C=0.1, I=0 - the ideal puts C above S
    ("esci", [0.01, 1.0, 0.1, 0.0], [1.0, 0.1, 0.01, 0.0]),
    ({3: 1.0, 2: 0.1, 1: 0.01, 0: 0.0}, [0.1, 1.0, 0.01, 0.0], [1.0, 0.1, 0.01, 0.0]),
])  # fmt: skip
def test_hand_computed_ndcg_under_each_gain_map(gain, ranked_gains, ideal_gains):
    got = evaluate(QRELS, RUN, ["nDCG@3", "nDCG"], gain=gain).per_query
    assert got["nDCG@3"]["q"] == pytest.approx(dcg(ranked_gains[:3]) / dcg(ideal_gains[:3]))
    assert got["nDCG"]["q"] == pytest.approx(dcg(ranked_gains) / dcg(ideal_gains))


def test_the_esci_example_by_hand():
    # ranked S, E, C: 0.01/1 + 1/log2(3) + 0.1/2 = 0.690930; ideal E, C, S: 1 + 0.1/log2(3) + 0.01/2 = 1.068093
    want = (0.01 + 1 / LOG2_3 + 0.1 / 2) / (1 + 0.1 / LOG2_3 + 0.01 / 2)
    assert evaluate(QRELS, RUN, ["nDCG@3"], gain="esci").means["nDCG@3"] == pytest.approx(want)
    assert round(want, 6) == 0.646882  # 0.690930 / 1.068093


def test_random_cases_agree_with_a_direct_computation():
    rng = random.Random(3)
    maps = ["linear", "exponential", "esci", {0: 0.0, 1: 0.3, 2: 0.05, 3: 2.0}]
    for _ in range(300):
        qrels = {"q": {f"d{i}": rng.randint(0, 3) for i in rng.sample(range(30), rng.randint(1, 20))}}
        qrels["q"][next(iter(qrels["q"]))] = rng.randint(1, 3)
        run = {"q": {f"d{i}": float(rng.randint(0, 9)) + i / 100 for i in rng.sample(range(30), rng.randint(1, 25))}}
        k = rng.choice([1, 3, 5, 10, 20])
        for gm in maps:
            g = compute.gain_map(gm)
            order = sorted(run["q"], key=lambda d: (-run["q"][d], d))  # distinct scores here
            ranked_gains = [g(qrels["q"][d]) if d in qrels["q"] else 0.0 for d in order][:k]
            ideal = sorted((g(x) for x in qrels["q"].values()), reverse=True)[:k]
            want = dcg(ranked_gains) / dcg(ideal) if dcg(ideal) > 0 else 0.0
            assert evaluate(qrels, run, [f"nDCG@{k}"], gain=gm).means[f"nDCG@{k}"] == pytest.approx(want)


def test_two_gains_in_one_table_and_names():
    ev = evaluate(QRELS, RUN, ["nDCG@3", "ndcg_burges@3", "nDCG(gain=esci)@3"])
    assert [m.name for m in ev.measures] == ["nDCG@3", "nDCG_Burges@3", "nDCG(gain=esci)@3"]
    assert ev.means["nDCG_Burges@3"] == pytest.approx(dcg([3, 7, 1]) / dcg([7, 3, 1]))
    assert ev.means["nDCG(gain=esci)@3"] == pytest.approx(evaluate(QRELS, RUN, ["nDCG@3"], gain="esci").means["nDCG@3"])


def test_f1_and_hits_by_hand():
    ev = evaluate(QRELS, RUN, ["F1@2", "Hits@2", "hits@4", "Hit@2", "F1(rel=3)@2"])
    # top 2 = s (2), e (3): both relevant at rel 1; 3 relevant in all -> P 1, R 2/3
    assert ev.means["Hits@2"] == 2.0 and ev.means["Hits@4"] == 3.0 and ev.means["Hit@2"] == 1.0
    assert ev.means["F1@2"] == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))
    assert ev.means["F1(rel=3)@2"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)


def test_gain_errors():
    with pytest.raises(StagebenchError, match=r"no gain for grade\(s\) \[0\], which the qrels hold"):
        evaluate(QRELS, RUN, ["nDCG@3"], gain={3: 1.0, 2: 0.5, 1: 0.1})
    for bad, msg in [({3: -1.0}, "must be a finite number >= 0"), ({"x": 1.0}, "grades are integers"), ("log", "unknown gain")]:
        with pytest.raises(StagebenchError, match=msg):
            evaluate(QRELS, RUN, ["nDCG@3"], gain=bad)
    raw = {"name": "t", "dataset": {"loader": "esci", "path": "x"}, "stages": [{"name": "b", "type": "bm25"}],
           "evaluation": {"gain": {3: 1.0, 2: "lots"}}}
    with pytest.raises(ConfigError, match="evaluation.gain"):
        parse_config(raw)
    raw["evaluation"]["gain"] = {3: 1.0, 2: 0.1, 1: 0.01, 0: 0.0}
    assert parse_config(raw).evaluation.gain == {3: 1.0, 2: 0.1, 1: 0.01, 0: 0.0}
    raw["evaluation"]["gain"] = "esci"
    assert parse_config(raw).evaluation.gain == "esci"
    assert compute.gain_map({"3": 1, "0": 0}).table == ((0, 0.0), (3, 1.0))  # JSON's string keys
