"""Definition tests (issue 72): each a hand-made case whose answer is worked out from the definition
the docs give, not from the code's output, so that the realistic bug named in the test's name
changes the answer. `make planted` plants each of these bugs (benchmarks/planted.py)."""

from __future__ import annotations

import pytest

from stagebench.data.irds import DOC_TEMPLATES, _template
from stagebench.errors import StagebenchError
from stagebench.judgments.planning import Hole, depth_pooling
from stagebench.judgments.pool import HOLE, Judgment, filled_qrels
from stagebench.judgments.views import pair_query_bounds, pair_settled, tau
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
