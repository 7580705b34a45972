"""Several run files side by side (issue 70): `stagebench eval QRELS RUN RUN ...` as ranx compare and
pt.Experiment give it - every run's means over the same queries, each pair tested, the views beside."""

from __future__ import annotations

import math

import ir_measures
import pytest

from stagebench import api
from stagebench.cli import main
from stagebench.errors import StagebenchError
from stagebench.runs import write_trec_qrels, write_trec_run


@pytest.fixture
def files(tmp_path):
    """30 queries, 3 relevant documents each at grades 3, 2, 1 and two irrelevant: ``good`` ranks them
    best first, ``bad`` worst first, ``same`` is ``good`` again; ``bad`` misses query q29."""
    qrels = {f"q{i}": {"d3": 3, "d2": 2, "d1": 1, "d0": 0, "e0": 0} for i in range(30)}
    order = ["d3", "d2", "d1", "d0", "e0", "hole"]
    good = {q: {d: float(10 - r) for r, d in enumerate(order)} for q in qrels}
    bad = {q: {d: float(r) for r, d in enumerate(order)} for q in qrels if q != "q29"}
    paths = {"qrels": tmp_path / "qrels.trec"}
    write_trec_qrels(qrels, paths["qrels"])
    for name, run in (("good", good), ("bad", bad), ("same", good)):
        paths[name] = tmp_path / f"{name}.trec"
        write_trec_run(run, paths[name])
    return paths


def test_several_runs_side_by_side_with_their_significant_pairs_and_the_means_ir_measures_gives(files):
    exp = api.compare_runs(files["qrels"], [files["good"], files["bad"], files["same"]], ["nDCG@5", "RR@10"],
                           permutations=2000)  # fmt: skip
    assert exp.runs == ["good", "bad", "same"]
    qrels = list(ir_measures.read_trec_qrels(str(files["qrels"])))
    for name in exp.runs:
        want = ir_measures.calc_aggregate([ir_measures.nDCG @ 5], qrels, list(ir_measures.read_trec_run(str(files[name]))))
        assert exp.mean(name, "nDCG@5") == pytest.approx(want[ir_measures.nDCG @ 5], abs=1e-9)  # bad's q29: 0 in both
    assert sorted(exp.better_than("good", "nDCG@5")) == ["bad"] and exp.better_than("same", "nDCG@5") == ["bad"]
    assert exp.better_than("bad", "nDCG@5") == []  # and good vs same: equal on every query, never significant


def test_the_command_prints_the_table_with_marks_views_and_bounds(files, capsys):
    assert main(["eval", str(files["qrels"]), str(files["good"]), str(files["bad"]), "-m", "nDCG@5",
                 "--permutations", "500"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "a   good" in out and "^b" in out and "judged only" in out and "bounds" in out
    assert main(["eval", str(files["qrels"]), str(files["good"]), str(files["bad"]), "-m", "nDCG@5", "--json"]) == 2
    assert "several runs: --json" in capsys.readouterr().err
    with pytest.raises(StagebenchError, match="--rel 0"):
        api.compare_runs(files["qrels"], [files["good"], files["bad"]], ["nDCG@5"], relevance_threshold=0)


def test_a_baseline_tests_every_run_against_it_alone_with_intervals_and_wins(files, capsys):
    """pt.Experiment's baseline=: bad and same against good, Holm over those 2; each difference with its
    bootstrap interval and wins/ties/losses; --per-query prints every run's values."""
    exp = api.compare_runs(files["qrels"], [files["good"], files["bad"], files["same"]], ["nDCG@5"], permutations=500,
                           baseline="good")  # fmt: skip
    assert [(t.a, t.b) for t, _ in exp.tests["nDCG@5"]] == [("bad", "good"), ("same", "good")]
    rows = {r[0]: r for r in exp.against_baseline()}
    assert rows["bad"][2] == f"{exp.mean('bad', 'nDCG@5') - exp.mean('good', 'nDCG@5'):+.4f}"
    assert rows["bad"][5] == "0/0/30" and rows["same"][5] == "0/30/0"  # bad loses every query (q29: 0 against good's)
    assert "Holm-Bonferroni over the 2 comparisons with the baseline" in exp.text()
    assert main(["eval", str(files["qrels"]), str(files["good"]), str(files["bad"]), "-m", "nDCG@5", "--baseline",
                 str(files["good"]), "--permutations", "200", "--per-query"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "against the baseline good" in out and sum(line.startswith("bad\tnDCG@5\t") for line in out.splitlines()) == 30
    assert main(["eval", str(files["qrels"]), str(files["good"]), str(files["bad"]), "-m", "nDCG@5", "--baseline", "nope"]) == 2
    assert "--baseline nope: not one of the runs (good, bad, or their files)" in capsys.readouterr().err


def test_the_marks_come_from_the_randomization_test_the_header_names(tmp_path, capsys):
    """Five queries, ``up`` ahead of ``down`` on every one by 0.37-0.57 nDCG@5: the paired t-test calls it
    (p < 0.001), the exact two-sided sign-flip test cannot (p = 2/32 = 0.0625: only the all-plus and
    all-minus flips are as extreme), so a table that says "paired randomization test" marks nothing."""
    from stagebench.stats import exact_randomization_p

    qrels = {f"q{i}": {"r": 1, **{f"n{j}": 0 for j in range(4)}} for i in range(5)}
    down_rank = [2, 3, 2, 4, 3]  # where ``down`` puts the relevant document: nDCG@5 = 1 / log2(rank + 1)
    up = {q: {"r": 9.0, **{f"n{j}": float(5 - j) for j in range(4)}} for q in qrels}
    down = {}
    for q, rank in zip(qrels, down_rank):
        order = [f"n{j}" for j in range(4)]
        order.insert(rank - 1, "r")
        down[q] = {d: float(9 - i) for i, d in enumerate(order)}
    write_trec_qrels(qrels, tmp_path / "qrels.trec")
    write_trec_run(up, tmp_path / "up.trec")
    write_trec_run(down, tmp_path / "down.trec")
    exp = api.compare_runs(tmp_path / "qrels.trec", [tmp_path / "up.trec", tmp_path / "down.trec"], ["nDCG@5"],
                           permutations=4000)  # fmt: skip
    [(t, p)] = exp.tests["nDCG@5"]
    ups, downs = [1.0] * 5, [1 / math.log2(r + 1) for r in down_rank]
    assert t.p_t < 0.001 and p == pytest.approx(exact_randomization_p(ups, downs), abs=0.01) and p > 0.05
    assert exp.better_than("up", "nDCG@5") == []
    assert main(["eval", str(tmp_path / "qrels.trec"), str(tmp_path / "up.trec"), str(tmp_path / "down.trec"),
                 "-m", "nDCG@5", "--permutations", "4000"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "paired randomization test" in out and "^b" not in out
    # the same pair marked by the t-test when it is asked for: the header says so, the Holm fields are filled
    exp_t = api.compare_runs(tmp_path / "qrels.trec", [tmp_path / "up.trec", tmp_path / "down.trec"], ["nDCG@5"],
                             permutations=4000, test="ttest")  # fmt: skip
    [(t, p)] = exp_t.tests["nDCG@5"]
    assert p == t.p_t_holm == t.p_t and t.p_rand_holm == t.p_rand and exp_t.better_than("up", "nDCG@5") == ["down"]
    assert main(["eval", str(tmp_path / "qrels.trec"), str(tmp_path / "up.trec"), str(tmp_path / "down.trec"),
                 "-m", "nDCG@5", "--test", "ttest"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "paired t-test, Holm-Bonferroni" in out and "^b" in out


def test_the_holm_fields_of_every_pair_are_its_adjusted_p_and_the_baseline_interval_is_adjusted_as_they_are(files):
    """Each PairTest carries both tests' Holm-adjusted p (pt.Experiment's t-test p, adjusted, where a user looks);
    the baseline table's interval is simultaneous over the comparisons Holm is over (2 here: 97.5%)."""
    from stagebench.stats import bootstrap_ci, holm

    exp = api.compare_runs(files["qrels"], [files["good"], files["bad"], files["same"]], ["nDCG@5"], permutations=500,
                           baseline="good")  # fmt: skip
    tests = [t for t, _ in exp.tests["nDCG@5"]]
    assert [t.p_t_holm for t in tests] == holm([t.p_t for t in tests])
    assert [t.p_rand_holm for t in tests] == holm([t.p_rand for t in tests])
    assert exp.level == pytest.approx(0.975)
    ea, eb = exp.views["bad"].irrelevant, exp.views["good"].irrelevant
    diffs = [ea.per_query["nDCG@5"][q] - eb.per_query["nDCG@5"][q] for q in ea.scored_queries]
    lo, hi = bootstrap_ci(diffs, 2000, 42, level=0.975)
    assert {r[0]: r for r in exp.against_baseline()}["bad"][3] == f"[{lo:+.4f}, {hi:+.4f}]"
    assert "97.5% CI" in exp.text()


def test_eval_reads_a_gain_table_as_trec_eval_does(capsys):
    """trec_eval 10's own case: -m ndcg.1=3,2=9,4=4.5 on its test files gives 0.4021 (out.test.meas_params)."""
    import json

    from tests.conftest import shared_path

    t = shared_path("trec_eval_tests")
    assert main(["eval", str(t / "qrels.test"), str(t / "results.test"), "-m", "nDCG", "--gain", "1=3,2=9,4=4.5",
                 "--queries", "run", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["nDCG"] == pytest.approx(0.4021, abs=5e-5)
    with pytest.raises(SystemExit) as exc:  # argparse's own one line, exit 2
        main(["eval", str(t / "qrels.test"), str(t / "results.test"), "-m", "nDCG", "--gain", "1=x"])
    assert exc.value.code == 2 and "'1=x': a table cell is GRADE=GAIN" in capsys.readouterr().err
