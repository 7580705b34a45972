from __future__ import annotations

import pytest

from stagebench.runs import from_ranking, ranked_ids
from stagebench.stages.fusion import normalise, rrf, score_fusion


def test_rrf_matches_the_formula_and_uses_ranks_not_scores():
    a = {"q": {"x": 100.0, "y": 50.0, "z": 1.0}}  # ranks x1 y2 z3
    b = {"q": {"y": 0.9, "w": 0.8}}  # ranks y1 w2
    fused = rrf([a, b], k=60)["q"]
    assert fused["y"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["x"] == pytest.approx(1 / 61)
    assert fused["w"] == pytest.approx(1 / 62)
    assert fused["z"] == pytest.approx(1 / 63)
    # rescaling scores does not change RRF
    a2 = {"q": {d: s * 1000 - 7 for d, s in a["q"].items()}}
    assert rrf([a2, b], k=60) == rrf([a, b], k=60)


def test_rrf_runs_of_different_depths_and_weights():
    deep = from_ranking({"q": [f"d{i}" for i in range(100)]})
    shallow = from_ranking({"q": ["d99", "d0"]})
    fused = rrf([deep, shallow], k=60, weights=[1.0, 2.0])["q"]
    assert fused["d99"] == pytest.approx(1 / 160 + 2 / 61)  # found by both
    assert fused["d50"] == pytest.approx(1 / 111)  # only in the deep run: no contribution from the other
    assert len(fused) == 100
    cut = rrf([deep, shallow], k=60, depth=10)["q"]
    assert "d50" not in cut and cut["d99"] == pytest.approx(2 / 61 / 2)  # only shallow's rank 1 counts


def test_query_present_in_one_run_only():
    fused = rrf([{"q1": {"a": 1.0}}, {"q2": {"b": 1.0}}])
    assert set(fused) == {"q1", "q2"}
    # the first run lacks q2: the second still contributes to it
    assert rrf([{"q1": {"a": 1.0}}, {"q1": {"a": 1.0}, "q2": {"b": 1.0}}], k=0) == {"q1": {"a": 2.0}, "q2": {"b": 1.0}}
    fused = score_fusion([{"q1": {"a": 1.0}}, {"q1": {"a": 3.0}, "q2": {"b": 5.0}}], norm="none")
    assert fused == {"q1": {"a": 4.0}, "q2": {"b": 5.0}}


def test_weights_must_match_the_inputs():
    with pytest.raises(ValueError):
        rrf([{"q": {"a": 1.0}}, {"q": {"a": 1.0}}], weights=[1.0])


def test_score_fusion_minmax_combsum_and_combmnz():
    a = {"q": {"x": 10.0, "y": 5.0, "z": 0.0}}
    b = {"q": {"y": 2.0, "w": 1.0}}
    s = score_fusion([a, b], "combsum", "minmax")["q"]
    assert s == pytest.approx({"x": 1.0, "y": 0.5 + 1.0, "z": 0.0, "w": 0.0})
    m = score_fusion([a, b], "combmnz", "minmax")["q"]
    assert m["y"] == pytest.approx(3.0) and m["x"] == pytest.approx(1.0)


def test_normalisation_edge_cases():
    assert normalise({"a": 3.0, "b": 3.0}, "minmax") == {"a": 1.0, "b": 1.0}
    assert normalise({"a": 3.0, "b": 3.0}, "zscore") == {"a": 0.0, "b": 0.0}
    assert normalise({"a": 3.0, "b": -2.5}, "none") == {"a": 3.0, "b": -2.5}
    assert normalise({}, "minmax") == {}
    z = normalise({"a": 1.0, "b": 3.0}, "zscore")
    assert z["a"] == pytest.approx(-1.0) and z["b"] == pytest.approx(1.0)


def test_fusion_stages_apply_their_params():
    from stagebench.stages.base import StageContext
    from stagebench.stages.fusion import RRFParams, RRFStage, ScoreFusionParams, ScoreFusionStage, check_weights

    a = from_ranking({"q": ["x", "y", "z", "w"]})
    b = from_ranking({"q": ["z", "y", "v"]})
    ctx = StageContext(dataset=None)
    got = RRFStage("f", RRFParams(k=1.0, weights=[2.0, 1.0], depth=2, top_k=2))(ctx, [a, b])
    assert got == {"q": dict(list(sorted(rrf([a, b], 1.0, [2.0, 1.0], 2)["q"].items(), key=lambda kv: -kv[1]))[:2])}
    assert got["q"] == pytest.approx({"y": 1.0, "x": 1.0})  # x: 2/2; y: 2/3 + 1/3 (z: 1/2 is cut)
    assert list(ranked_ids(got["q"])) == ["y", "x"]  # the tie goes to the higher doc id
    full = RRFStage("f", RRFParams())(ctx, [a, b])
    assert set(full["q"]) == {"x", "y", "z", "w", "v"}
    fused = ScoreFusionStage("s", ScoreFusionParams(method="combmnz", norm="none", top_k=1))(ctx, [a, b])
    assert fused == {"q": {"x": -1.0}}  # raw scores -rank: x -1 (one input); y, z (-2 - 2) x 2 = -8; w -4; v -3
    assert check_weights([1.0], ["a", "b"]) == [("weights", "has 1 values for 2 inputs (a, b): give one per input")]
    assert check_weights([0.0, 0.0], ["a", "b"]) == [("weights", "are all 0: every fused score would be 0")]
    assert check_weights([1.0, 0.0], ["a", "b"]) == [] and check_weights(None, ["a"]) == []
    assert RRFStage.check_params(RRFParams(weights=[1.0]), ["a", "b"]) and not RRFStage.check_params(RRFParams(), ["a"])


def test_zscore_divides_by_the_standard_deviation():
    z = normalise({"a": 0.0, "b": 4.0}, "zscore")  # mean 2, sd 2
    assert z == pytest.approx({"a": -1.0, "b": 1.0})
    z = normalise({"a": 0.0, "b": 4.0, "c": 8.0}, "zscore")  # sd = sqrt(32/3)
    assert z["c"] == pytest.approx(4.0 / (32 / 3) ** 0.5)
