"""Definition tests (issue 72): each a hand-made case whose answer is worked out from the definition
the docs give, not from the code's output, so that the realistic bug named in the test's name
changes the answer. `make planted` plants each of these bugs (benchmarks/planted.py)."""

from __future__ import annotations

import pytest

from stagebench.data.irds import DOC_TEMPLATES, _template
from stagebench.errors import StagebenchError
from stagebench.api.ground import pool_scores
from stagebench.judgments.planning import Hole, depth_pooling
from stagebench.judgments.pool import HOLE, Judgment, filled_qrels
from stagebench.judgments.views import pair_settled, tau
from stagebench.metrics.holes import pair_query_bounds
from stagebench.judgments.worksheet import read_worksheet
from stagebench.metrics import parse_measure
from stagebench.params import read_yaml

SCALE = {3: "E", 2: "S", 1: "C", 0: "I"}


def test_a_judges_grade_never_replaces_a_human_label_in_the_filled_qrels():
    # docs/metrics.md: "human labels are never replaced"; the judge fills holes only
    filled, added = filled_qrels({"q": {"d": 1}}, [Judgment("q", "d", HOLE, 3, "ok"), Judgment("q", "h", HOLE, 2, "ok")])
    assert filled == {"q": {"d": 1, "h": 2}} and added == [("q", "h", 2)]


def test_a_pair_whose_difference_can_still_be_zero_is_not_settled():
    # settled: the bounds of the difference exclude 0; two equal rankings differ by exactly 0 at both ends
    ranked = {"a": {"q": ["j1", "h1"]}, "b": {"q": ["j1", "h1"]}}
    assert pair_settled(ranked, {"q": {"j1": 3}}, ["q"], parse_measure("nDCG@2"), 3, 1, "linear") == {("a", "b"): 0}


def test_the_bounds_of_a_difference_of_unpaired_measures_pair_each_low_with_the_others_high():
    # RR@2, not paired: a = RR of [h1, j1] in {1/2, 1}, b = RR of [h2, j1] in {1/2, 1}, the holes apart:
    # a - b over every grading spans [1/2 - 1, 1 - 1/2]
    lo, hi = pair_query_bounds(parse_measure("RR@2"), ["h1", "j1"], ["h2", "j1"], {"j1": 1}, 3, 1, "linear")
    assert (lo, hi) == pytest.approx((-0.5, 0.5))


def test_depth_pooling_orders_a_hole_by_its_best_rank_over_the_stages():
    # the classic pool takes every stage's rank 1 first: a hole one stage ranks 1st comes before one
    # every stage ranks 2nd, whatever its rank in the other stages
    first = Hole("q", "x", {"s1": 1, "s2": 9})
    second = Hole("q", "y", {"s1": 2, "s2": 2})
    assert depth_pooling([second, first], 1) == [first]


def test_a_worksheet_row_naming_a_query_the_folder_lacks_is_refused(tmp_path):
    sheet = tmp_path / "w.csv"
    sheet.write_text("qid,docid,grade\nq1,d1,3\nq9,d2,2\n", encoding="utf-8")
    graded, _, bad = read_worksheet(sheet, 0, SCALE, {"q1"}, "now")
    assert [(g.qid, g.docid) for g in graded] == [("q1", "d1")]
    assert bad == [f"{sheet}: line 3: query 'q9' is not a query of this results folder"]


def test_kendalls_tau_of_an_order_that_ties_everything_against_a_strict_one_is_zero():
    # views.tau: "an order that ties every stage says nothing: 1.0 against another such order, else 0.0"
    assert tau({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 3.0, "b": 2.0, "c": 1.0}) == 0.0
    assert tau({"a": 1.0, "b": 1.0}, {"a": 2.0, "b": 2.0}) == 1.0


def test_the_irds_default_text_template_needs_every_one_of_its_fields():
    # "the first default that fits": {title} {text} does not fit records that have only text
    assert _template(None, ["text"], DOC_TEMPLATES, "text_template", "x") == "{text}"
    assert _template(None, ["title", "text"], DOC_TEMPLATES, "text_template", "x") == "{title} {text}"


@pytest.mark.parametrize("key", ["on", "off", "yes", "no", "true", "false"])
def test_every_key_yaml_reads_as_a_boolean_is_refused(tmp_path, key):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: x\n{key}: 1\n", encoding="utf-8")
    with pytest.raises(StagebenchError, match=f"the key '{key}' is read by YAML as the boolean"):
        read_yaml(p)


def test_a_tie_between_trials_goes_to_the_config_s_own_params():
    from stagebench.fitting.tune import best_trial

    assert best_trial([0.5, 0.5, 0.4]) == 0  # trial 0 is the config's own params
    assert best_trial([0.4, 0.5, 0.5 + 1e-14]) == 1  # equal to 12 decimals: the earlier
    assert best_trial([0.4, 0.5, 0.6]) == 2


def test_a_simulated_round_counts_a_pair_settled_in_the_true_order_as_true():
    from stagebench.judgments.planning import replay_strategies

    # every hole answered: the pair is settled, and a (3 then 1) ranks above b (1 then 3) in truth
    ranked = {"a": {"q": ["h1", "j1"]}, "b": {"q": ["j1", "h1"]}}
    sim = replay_strategies(ranked, {"q": {"j1": 1}}, ["q"], parse_measure("nDCG@2"), 3, 1, "linear", {("q", "h1"): 3},
                   [1], 2, 1, "test")  # fmt: skip
    depth = next(r for r in sim.rows if r.strategy == "depth")
    assert (depth.settled, depth.settled_true) == (1, 1)
    assert sim.true_order["a"] > sim.true_order["b"]


def test_a_pair_settled_against_the_true_order_is_not_counted_as_true(monkeypatch):
    """Valid bounds never settle a pair wrongly, so the count is checked on a pair the bounds are made
    to settle the wrong way (b above a, where the truth has a above b)."""
    from stagebench.judgments import planning

    monkeypatch.setattr(planning, "pair_settled", lambda *a, **k: {("a", "b"): -1})
    ranked = {"a": {"q": ["h1", "j1"]}, "b": {"q": ["j1", "h1"]}}
    sim = planning.replay_strategies(ranked, {"q": {"j1": 1}}, ["q"], parse_measure("nDCG@2"), 3, 1, "linear",
                            {("q", "h1"): 3}, [1], 2, 1, "test")  # fmt: skip
    depth = next(r for r in sim.rows if r.strategy == "depth")
    assert (depth.settled, depth.settled_true) == (1, 0)


def test_the_rules_judge_grades_by_the_datasets_own_label_map(tiny_synthetic):
    """``labels`` maps the rules' E/S/C/I to grades (the loader's label table): a map where Exact is
    worth 1 gives 1 for an Exact pair, not ESCI's default 3."""
    import pandas as pd

    from stagebench.judge.ask import JudgeParams
    from stagebench.judge.rules import RulesJudge
    from stagebench.judge.scale import Scale

    rows = pd.read_parquet(next(tiny_synthetic.glob("*examples*.parquet")))
    exact = rows[rows["esci_label"] == "E"].iloc[0]
    irrelevant = rows[rows["esci_label"] == "I"].iloc[0]
    judge = RulesJudge(JudgeParams(backend="rules"), tiny_synthetic, {"E": 1, "S": 1, "C": 0, "I": 0})
    scale = Scale(((1, "relevant", ""), (0, "not", "")))
    pairs = [(str(exact["query_id"]), str(exact["product_id"])), (str(irrelevant["query_id"]), str(irrelevant["product_id"]))]
    asked = judge.grade(pairs, None, scale, None, None)
    assert [a.grade for a in asked.answers] == [1, 0]


def test_params_tuned_on_another_dataset_are_named_weak_where_they_are_copied():
    from stagebench.results.baselines import elsewhere

    stage = [("bm25", "data/synthetic-esci")]
    assert elsewhere(stage, "data/synthetic-esci") == []
    assert elsewhere(stage, "./data/synthetic-esci/") == []  # the same folder
    (note,) = elsewhere(stage, "../shared/data/cranfield")
    assert note.startswith("(!) weak baseline: bm25's params were tuned on data/synthetic-esci") and "cranfield" in note


def test_a_query_id_in_both_the_tuning_and_the_test_split_never_tunes(tmp_path):
    """tune with queries: split: a query id the test split holds too is left out of tuning (its
    judgments would otherwise choose the params the table then reports on)."""
    import json

    from stagebench.config import parse_config
    from stagebench.data import LOADERS
    from stagebench.fitting.tune import held_queries

    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"word{i}"}) + "\n"
                                               for i in range(4)))  # fmt: skip
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": q}) + "\n" for q in ("q1", "q2", "q3")))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\nq3\td3\t1\n")
    cfg = parse_config({"name": "t", "dataset": {"loader": "beir", "path": str(root), "split": "test"},
                        "stages": [{"name": "bm25", "type": "bm25"}],
                        "tune": {"stages": ["bm25"], "queries": "split", "split": "train"}})  # fmt: skip
    test = LOADERS["beir"].load(cfg.dataset.options)
    held = held_queries(cfg, cfg.tune, test)
    assert held.mode == "split" and [d.decide_on for d in held.decisions] == [("q3",)]


def test_a_worksheet_grade_between_two_grades_is_refused_not_rounded(tmp_path):
    # the grade column holds a grade of the scale: 3, 3.0 or 3,0 are 3; 2.5 is none of them
    sheet = tmp_path / "w.csv"
    sheet.write_text('qid,docid,grade\nq1,d1,2.5\nq1,d2,3.0\nq1,d3,"1,0"\n', encoding="utf-8")
    graded, _, bad = read_worksheet(sheet, 0, SCALE, {"q1"}, "now")
    assert [(g.docid, g.grade) for g in graded] == [("d2", 3), ("d3", 1)]
    assert len(bad) == 1 and bad[0].startswith(f"{sheet}: line 2: grade '2.5' is not on the scale (3 = E, 2 = S, 1 = C, 0 = I")


def test_a_pair_whose_bounds_are_apart_is_settled_in_their_direction():
    # every document judged: the bounds of each nDCG@2 are one number, a's 1 and b's 1/log2(3) when
    # the relevant document is second; a over b settled (+1), b over a settled the other way (-1)
    judged = {"q": {"r": 1, "n": 0}}
    ranked = {"a": {"q": ["r", "n"]}, "b": {"q": ["n", "r"]}}
    assert pair_settled(ranked, judged, ["q"], parse_measure("nDCG@2"), 2, 1, "linear") == {("a", "b"): 1}
    flipped = {"b": ranked["b"], "a": ranked["a"]}
    assert pair_settled(flipped, judged, ["q"], parse_measure("nDCG@2"), 2, 1, "linear") == {("b", "a"): -1}
    # a hole below both judged documents leaves the order: a = [r, n, h], b = [n, r, h] at @3, apart whatever h is
    holed = {"a": {"q": ["r", "n", "h"]}, "b": {"q": ["n", "r", "h"]}}
    assert pair_settled(holed, judged, ["q"], parse_measure("nDCG@3"), 3, 1, "linear") == {("a", "b"): 1}


def test_the_grade_model_reads_a_rerankers_scores_of_its_pool_only():
    # a reranker of top_n 2 over the input [x, y, z]: its run scores x and y by its model and places z
    # below them (a placeholder); the grade model gets x and y, never z
    run = {"q": {"y": 4.2, "x": 3.1, "z": 3.1 - 1e-6}, "p": {"u": 0.5, "v": 0.4}}
    inputs = {"q": ["x", "y", "z"], "p": ["v", "u"]}
    assert pool_scores(run, inputs, 2) == {"q": {"y": 4.2, "x": 3.1}, "p": {"u": 0.5, "v": 0.4}}
    assert pool_scores(run, inputs, 1) == {"q": {"x": 3.1}, "p": {"v": 0.4}}
