"""The estimated view (issue 69): the estimator against a brute-force enumeration of every sample a
hand-made design can draw, the frame's values against stagebench's own nDCG on filled qrels, coverage
on a small simulated case with fixed seeds (a good and a useless grade model), and the sampling round
through a real worksheet and add-judgments, whole, with a row dropped, a probability edited, a row added."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from stagebench import api
from stagebench.errors import StagebenchError
from stagebench.judgments.estimate import estimate, frame, inclusion, predict
from stagebench.judgments.coverage import simulate_rounds
from stagebench.judgments.design import DESIGNS, Sampler
from stagebench.judgments.sampling import ESTIMATE, Record, design_path
from stagebench.judgments.pool import filled_qrels
from stagebench.api.ground import ground
from stagebench.metrics import evaluate, parse_measure
from stagebench.metrics.compute import gain_map

LINEAR = gain_map("linear")
# q1's ideal is fixed (3 judged Exacts at k=3): each hole a unit; q2's is not: the query is one unit
QRELS = {"q1": {"e1": 3, "e2": 3, "e3": 3}, "q2": {"j1": 2}}
RANKED = {"a": {"q1": ["h1", "e1", "h2"], "q2": ["g1", "j1", "g2"]},
          "b": {"q1": ["e1", "h2", "e2"], "q2": ["j1", "g3", "g1"]}}  # fmt: skip
TRUTH = {("q1", "h1"): 3, ("q1", "h2"): 0, ("q2", "g1"): 3, ("q2", "g2"): 1, ("q2", "g3"): 0}


def _filled() -> dict:
    out = {q: dict(d) for q, d in QRELS.items()}
    for (q, d), g in TRUTH.items():
        out[q][d] = g
    return out


def test_the_frame_computes_ndcg_as_the_metrics_do_with_every_hole_graded():
    fr = frame(RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3)
    assert [(u.qid, u.holes) for u in fr.units] == [("q1", ("h1",)), ("q1", ("h2",)), ("q2", ("g1", "g2", "g3"))]
    known, F = fr.contributions(np.array([float(TRUTH[h]) for h in fr.holes()]))
    theta = known + F.sum(axis=1)
    for i, s in enumerate(fr.stages):
        want = evaluate(_filled(), {q: {d: -r for r, d in enumerate(RANKED[s][q])} for q in RANKED[s]},
                        [parse_measure("nDCG@3")]).means["nDCG@3"]  # fmt: skip
        assert theta[i] == pytest.approx(want, abs=1e-12)
    assert theta[2] == pytest.approx(theta[0] - theta[1], abs=1e-12)  # the pair a - b


def test_the_estimator_is_unbiased_and_its_variance_estimate_too_over_every_possible_sample():
    """Every subset of the 3 units, weighted by its Poisson probability: the mean estimate is the truth
    and the mean variance estimate is the estimator's variance, for a deliberately wrong model."""
    fr = frame(RANKED, QRELS, ["q1", "q2"], 3, LINEAR, 3)
    holes = fr.holes()
    y = np.array([float(TRUTH[h]) for h in holes])
    means = np.array([0.5, 2.5, 1.0, 3.0, 2.0])  # far from the truth on purpose
    known, F = fr.contributions(y)
    theta = known + F.sum(axis=1)
    pi = np.array([0.3, 0.8, 0.45])
    spans = [(0, 1), (1, 2), (2, 5)]
    mean = np.zeros_like(theta)
    second = np.zeros_like(theta)
    mean_var = np.zeros_like(theta)
    for mask in itertools.product([False, True], repeat=3):
        prob = np.prod([p if m else 1 - p for p, m in zip(pi, mask)])
        drawn = [i for i, m in enumerate(mask) if m]
        gains = np.concatenate([y[a:b] for i, (a, b) in enumerate(spans) if mask[i]]) if drawn else np.zeros(0)
        e = estimate(fr, means, pi, drawn, gains, 0.0, 3.0, refit=False)
        mean += prob * e.value
        second += prob * e.value**2
        mean_var += prob * e.se**2
    np.testing.assert_allclose(mean, theta, atol=1e-12)
    np.testing.assert_allclose(mean_var, second - mean**2, atol=1e-12)


def _simulated(seed: int, queries: int = 40) -> tuple[dict, dict, list[str], dict]:
    """Two stages over random documents: a's top 10 better than b's; holes graded at random."""
    rng = np.random.default_rng(seed)
    ranked = {"a": {}, "b": {}}
    qrels, truth = {}, {}
    for q in (f"q{i}" for i in range(queries)):
        docs = [f"{q}d{j}" for j in range(16)]
        grade = {d: int(g) for d, g in zip(docs, rng.choice(4, 16, p=[0.5, 0.2, 0.1, 0.2]))}
        ranked["a"][q] = sorted(docs, key=lambda d: -grade[d] - rng.random() * 2.5)
        ranked["b"][q] = sorted(docs, key=lambda d: -grade[d] - rng.random() * 6)
        judged = [d for d in docs if rng.random() < 0.35]
        qrels[q] = {d: grade[d] for d in judged} or {docs[0]: grade[docs[0]]}
        truth[q] = grade
    return ranked, qrels, list(ranked["a"]), truth


@pytest.mark.parametrize("kind", DESIGNS)
def test_the_intervals_cover_the_truth_with_a_good_and_with_a_useless_grade_model(kind):
    """Each design as a round builds it (Sampler.over: the hole design judges whole the queries whose ideal
    rests on their holes - here, with 35% of each query judged, most of them; cut into holes regardless, the
    linearisation's bias leaves the stage means at 0.86-0.92 coverage, which the design never does)."""
    ranked, qrels, queries, truth = _simulated(3)
    holes = frame(ranked, qrels, queries, 10, LINEAR, 3, design=kind).holes()
    y = np.array([float(truth[q][d]) for q, d in holes])
    rng = np.random.default_rng(0)
    noisy = np.clip(np.round(y + rng.normal(0, 0.8, len(y))), 0, 3).astype(int)
    good = 0.4 * np.eye(4)[noisy] + 0.15  # most of the mass on a noisy copy of the true grade
    useless = good[rng.permutation(len(y))]
    gains = np.arange(4.0)
    judged = np.array([g for docs in qrels.values() for g in docs.values()])
    prior = np.bincount(judged, minlength=4) / len(judged)
    samplers = {(name, kind): Sampler.over(kind, ranked, qrels, queries, 10, LINEAR, 3, lambda h, d=dist: (d, gains), prior)
                for name, dist in (("good", good), ("useless", useless))}  # fmt: skip
    assert all(s.fr.holes() == holes for s in samplers.values())
    if kind == "hole":
        assert any(u.single for u in samplers["good", kind].fr.units) and not all(u.single for u in samplers["good", kind].fr.units)
    cov = simulate_rounds(samplers, y, [60], 200, 7)
    for r in cov.rows:
        assert r.design == kind
        assert 0.95 * 60 <= r.judged_mean and r.judged_max <= 60
        assert min(r.coverage.values()) >= 0.9, (r.predictor, r.coverage)
        assert max(r.wrong.values()) <= 0.05
    width = {r.predictor: r.width["a - b"] for r in cov.rows}
    assert width["good"] < width["useless"]  # a model that knows the grades narrows the interval


def test_a_sure_grade_models_rare_surprises_do_not_collapse_the_interval():
    """A model sure of every hole (0.97 on one grade) and wrong on 4% of them, as a sharp LLM judge is: a round
    of a few whole queries (the query design, 60 judgments: about 6 of 40 queries) mostly meets none of the
    surprises, and its residuals - the sample's variance and, scaled by them, the floor - are near 0 exactly
    when the estimate is off. The model's own claim counted in the floor's scale (FLOOR_PRIOR) keeps the
    interval: without it this case covered 0.725 (400 rounds), with it 1.0."""
    ranked, qrels, queries, truth = _simulated(3)
    judged = np.array([g for docs in qrels.values() for g in docs.values()])
    holes = frame(ranked, qrels, queries, 10, LINEAR, 3, design="query").holes()
    y = np.array([float(truth[q][d]) for q, d in holes])
    rng = np.random.default_rng(0)
    mode = y.astype(int)
    wrong = rng.random(len(y)) < 0.04
    mode[wrong] = rng.integers(0, 4, int(wrong.sum()))
    sure = 0.01 + 0.96 * np.eye(4)[mode]
    smp = Sampler.over("query", ranked, qrels, queries, 10, LINEAR, 3, lambda h: (sure, np.arange(4.0)),
                       np.bincount(judged, minlength=4) / len(judged))  # fmt: skip
    (r,) = simulate_rounds({("sure", "query"): smp}, y, [60], 200, 7).rows
    assert r.judged_max <= 60 and min(r.coverage.values()) >= 0.93, r.coverage


def test_the_design_spends_the_budget_and_a_unit_the_model_is_sure_of_keeps_a_floor():
    ranked, qrels, queries, truth = _simulated(5)
    fr = frame(ranked, qrels, queries, 10, LINEAR, 3)
    n = len(fr.holes())
    var = np.full(n, 1.0)
    var[: n // 2] = 0.0  # the model claims to know half the holes exactly
    pred = predict(fr, np.full(n, 1.0), var)
    d = inclusion(fr, pred, 50)
    cost = np.array([u.cost for u in fr.units])
    assert d.pi @ cost == pytest.approx(50, rel=1e-6)
    assert d.pi.min() > 0  # never zero: a sure model that is wrong is still corrected
    # a budget larger than what the units with any doubt cost is spent whole all the same
    few = np.zeros(n)
    few[:3] = 1.0
    d = inclusion(fr, predict(fr, np.full(n, 1.0), few), n // 2)
    assert d.pi @ cost == pytest.approx(n // 2, rel=1e-6)


@pytest.fixture(scope="module")
def sample_round(judged_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("sample") / "sheet.csv"
    sheet = api.plan_judgments(judged_folder, 40, out, strategy="sample", seed=3)
    return judged_folder, sheet


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(path.open(encoding="utf-8")))
    return rows[0], rows[1:]


def _graded(folder: Path, sheet: Path, dest: Path, drop: int = 0, edit_probability: bool = False,
            extra: tuple[str, str] | None = None, record: bool = True, digits: int | None = None) -> Path:  # fmt: skip
    """The worksheet graded by the rules judge's grades (the truth), as a rater would fill it; ``record``:
    the round's record copied beside it under its name; ``digits``: the probabilities rounded to that
    many significant digits, as a spreadsheet shows them."""
    g = ground(folder)
    truth = filled_qrels(g.qrels, g.judgments)[0]
    header, rows = _rows(sheet)
    gi, pi = next(i for i, h in enumerate(header) if h.startswith("grade")), header.index("probability")
    for r in rows:
        r[gi] = str(truth[r[0]][r[2]])
    if edit_probability:
        rows[0][pi] = "0.999"
    if digits is not None:
        for r in rows:
            r[pi] = f"{float(r[pi]):.{digits}g}"
    rows = rows[drop:]
    if extra is not None:
        rows.append([extra[0], "", extra[1], "", *[""] * (len(header) - 4)])
        rows[-1][gi] = str(truth[extra[0]][extra[1]])
    with dest.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    if record:
        Path(design_path(str(dest))).write_text(Path(design_path(str(sheet))).read_text())
    return dest


def test_a_sampling_worksheet_is_blind_grouped_by_query_and_defines_its_labels(sample_round):
    folder, sheet = sample_round
    header, rows = _rows(sheet.csv)
    assert not any(h.startswith("rank_") for h in header)  # blind: no stage's rank
    assert "probability" in header and "aims_at" in header
    assert "3 = E = Exact: " in next(h for h in header if h.startswith("grade"))
    qids = [r[0] for r in rows]
    assert qids == sorted(qids, key=qids.index) and len(set(qids)) == len([q for i, q in enumerate(qids) if q not in qids[:i]])
    rec = Record.read(Path(design_path(str(sheet.csv))).read_text(), "x")
    assert sum(len(u["docids"]) for u in rec.units) == sheet.pairs == len(rows)
    assert 0.95 * 40 <= sheet.pairs <= 40  # a capped draw: never above the budget, at least 95% of it


def test_the_graded_sample_gives_an_estimate_whose_intervals_hold_the_true_table(sample_round, tmp_path):
    folder, sheet = sample_round
    graded = _graded(folder, sheet.csv, tmp_path / "graded.csv")
    api.add_judgments(folder, [graded], tmp_path / "new")
    view = json.loads((tmp_path / "new" / ESTIMATE).read_text())
    assert not view["refused"] and view["judged"] == sheet.pairs
    true = {r["stage"]: r["nDCG@10"] for r in json.loads((folder / "judge" / "stage_table.json").read_text())}
    for t, lo, hi in zip(view["targets"], view["low"], view["high"]):
        assert hi - lo < 1.0, (t, lo, hi)  # an interval, not the whole line
        if " - " not in t:
            assert lo - 1e-6 <= true[t] <= hi + 1e-6, (t, lo, true[t], hi)
    text = (tmp_path / "new" / "stage_table.txt").read_text()
    assert "Estimated view: nDCG@10 with every hole" in text and "settled at 95%" in text
    assert "Estimated view" in (tmp_path / "new" / "report.html").read_text()


def test_a_dropped_row_or_an_edited_probability_refuses_the_estimate_and_an_added_row_is_left_out(sample_round, tmp_path):
    folder, sheet = sample_round
    for name, kw, why in [("dropped", {"drop": 1}, "1 of the"), ("edited", {"edit_probability": True}, "probability 0.999")]:
        graded = _graded(folder, sheet.csv, tmp_path / f"{name}.csv", **kw)
        api.add_judgments(folder, [graded], tmp_path / name)
        view = json.loads((tmp_path / name / ESTIMATE).read_text())
        assert why in view["refused"], view["refused"]
    g = ground(folder)
    holes = {(q, d) for q, d in (h[:2] for h in [(u["qid"], d) for u in Record.read(Path(design_path(str(sheet.csv))).read_text(), "x").units for d in u["docids"]])}
    outside = next((h.qid, h.docid) for h in __import__("stagebench.judgments.planning", fromlist=["pool_holes"]).pool_holes(
        g.ranked, g.qrels, g.queries, 10) if (h.qid, h.docid) not in holes)  # fmt: skip
    graded = _graded(folder, sheet.csv, tmp_path / "extra.csv", extra=outside)
    api.add_judgments(folder, [graded], tmp_path / "extra")
    view = json.loads((tmp_path / "extra" / ESTIMATE).read_text())
    assert not view["refused"] and view["left_out"] == 1


def test_the_estimated_view_refuses_a_measure_it_is_not_valid_for(judged_folder, tmp_path):
    with pytest.raises(StagebenchError, match="the estimated view is for nDCG@k"):
        api.plan_judgments(judged_folder, 20, tmp_path / "s.csv", strategy="sample", measure="P@10")


def test_a_second_round_is_drawn_from_the_folder_the_first_wrote_and_estimated_on_it(sample_round, tmp_path):
    folder, sheet = sample_round
    first = tmp_path / "first"
    api.add_judgments(folder, [_graded(folder, sheet.csv, tmp_path / "graded.csv")], first)
    second = api.plan_judgments(first, 40, tmp_path / "second.csv", strategy="sample", seed=4)
    rec = Record.read(Path(design_path(str(second.csv))).read_text(), "x")
    already = {(q, d) for q, d in Record.read(Path(design_path(str(sheet.csv))).read_text(), "x").holes}
    assert not already & set(rec.holes)  # the first round's grades are known: never drawn again
    assert rec.qrels_sha256 != Record.read(Path(design_path(str(sheet.csv))).read_text(), "x").qrels_sha256
    api.add_judgments(first, [_graded(first, second.csv, tmp_path / "graded2.csv")], tmp_path / "second")
    view = json.loads((tmp_path / "second" / ESTIMATE).read_text())
    assert not view["refused"] and view["judged"] == second.pairs
    # the first round's worksheet does not fit the second folder: its qrels moved on
    api.add_judgments(first, [_graded(folder, sheet.csv, tmp_path / "again.csv")], tmp_path / "again", prefer="existing")
    assert "drawn from other judgments" in json.loads((tmp_path / "again" / ESTIMATE).read_text())["refused"]


def test_a_plan_that_needs_fewer_judgments_than_asked_fills_the_budget(judged_folder, tmp_path):
    sheet = api.plan_judgments(judged_folder, 40, tmp_path / "plan.csv")
    assert sheet.pairs == 40


def test_compare_a_judging_rounds_before_and_after_and_stages_of_other_names(sample_round, tmp_path):
    """Issue 70: folders whose judgments differ are refused unless --judgments each, which compares
    each under its own qrels and says so; --pair a=b compares stages whose names differ."""
    from stagebench.report.tables import comparison_text

    folder, sheet = sample_round
    after = tmp_path / "after"
    api.add_judgments(folder, [_graded(folder, sheet.csv, tmp_path / "graded.csv")], after)
    with pytest.raises(StagebenchError, match="judge query .* differently"):
        api.compare(folder, after, permutations=200)
    c = api.compare(folder, after, permutations=200, judgments="each", pairs={"bm25": "rrf"})
    assert "each folder under its own judgments" in comparison_text(c)
    before_rows = {r["stage"]: r["nDCG@10"] for r in json.loads((folder / "stage_table.json").read_text())}
    after_rows = {r["stage"]: r["nDCG@10"] for r in json.loads((after / "stage_table.json").read_text())}
    assert c.row("bm25", "nDCG@10").mean_a == pytest.approx(before_rows["bm25"], abs=1e-6)
    assert c.row("bm25", "nDCG@10").mean_b == pytest.approx(after_rows["bm25"], abs=1e-6)
    assert c.row("bm25=rrf", "nDCG@10").mean_b == pytest.approx(after_rows["rrf"], abs=1e-6)
    with pytest.raises(StagebenchError, match="--pair bm25=nope: 'nope' is not a stage of"):
        api.compare(folder, after, judgments="each", pairs={"bm25": "nope"})


def test_a_census_is_exact_whatever_the_model_and_the_refit():
    """Every unit drawn with probability 1: the estimate is the truth (to float rounding) with an interval
    of width 0, with and without the cross-fitted refit, for a model far from the grades; a unit drawn
    with certainty beside sampled ones contributes its own value, not the refit's."""
    ranked, qrels, queries, truth = _simulated(3)
    fr = frame(ranked, qrels, queries, 10, LINEAR, 3)
    y = np.array([float(truth[q][d]) for q, d in fr.holes()])
    known, F = fr.contributions(y)
    theta = known + F.sum(axis=1)
    means = np.clip(3.0 - y + 0.3, 0, 3)  # wrong on purpose: the refit has something to change
    every = np.arange(len(fr.units))
    for refit in (False, True):
        e = estimate(fr, means, np.ones(len(fr.units)), every, y, 0.0, 3.0, refit=refit, variances=np.ones(len(y)))
        assert np.allclose(e.value, theta, atol=1e-12, rtol=0) and np.all(e.high - e.low == 0), refit
    # half the units certain, the rest sampled at 0.5 and all drawn: the certain ones enter as they are
    sure = every % 2 == 0
    rest = estimate(fr, means, np.where(sure, 1.0, 0.5), every, y, 0.0, 3.0, refit=False)
    P = fr.contributions(means)[1]
    want = known + F[:, sure].sum(axis=1) + P[:, ~sure].sum(axis=1) + ((F - P)[:, ~sure] / 0.5).sum(axis=1)
    assert np.allclose(rest.value, want, atol=1e-12)


def test_the_round_s_files_never_lose_the_estimate(sample_round, tmp_path, capsys):
    """Every row carries its round's id: a sheet saved under another name finds its record in its folder;
    a missing or another round's record is one line naming where it was expected, and add-judgments exits 3
    with the folder written; probabilities a spreadsheet rounded to 3 digits still match the record, which
    keeps them exact."""
    from stagebench.cli import main

    folder, sheet = sample_round
    rec = Record.read(Path(design_path(str(sheet.csv))).read_text(), "x")
    header, rows = _rows(sheet.csv)
    assert rec.round == rec.identity() and {r[header.index("round")] for r in rows} == {rec.round}
    assert any(len(repr(u["probability"])) > 8 for u in rec.units)  # exact, not the sheet's 6 digits
    # saved under another name beside the plan's files: found by its round
    renamed = _graded(folder, sheet.csv, sheet.csv.parent / "renamed-by-rater.csv", record=False)
    api.add_judgments(folder, [renamed], tmp_path / "renamed")
    assert not json.loads((tmp_path / "renamed" / ESTIMATE).read_text())["refused"]
    # rounded to 3 significant digits
    rounded = _graded(folder, sheet.csv, tmp_path / "rounded.csv", digits=3)
    api.add_judgments(folder, [rounded], tmp_path / "rounded")
    assert not json.loads((tmp_path / "rounded" / ESTIMATE).read_text())["refused"]
    # moved without its record: one line naming where it was expected, exit 3, the folder written
    alone = tmp_path / "alone"
    alone.mkdir()
    moved = _graded(folder, sheet.csv, alone / "graded.csv", record=False)
    assert main(["add-judgments", str(folder), str(moved), "--output", str(tmp_path / "moved")]) == 3
    err = capsys.readouterr().err
    assert f"its rows are sampling round {rec.round}'s, whose record is missing (expected {alone / 'graded.design.json'}" in err
    assert (tmp_path / "moved" / "qrels.trec").is_file()
    # another round's record beside it: named as that, not as ungraded rows
    other = api.plan_judgments(folder, 30, tmp_path / "other" / "sheet.csv", strategy="sample", seed=11)
    foreign = _graded(folder, sheet.csv, tmp_path / "other" / "graded.csv", record=False)
    Path(design_path(str(foreign))).write_text(Path(design_path(str(other.csv))).read_text())
    view = api.add_judgments(folder, [foreign], tmp_path / "foreign").estimate_refused
    other_id = Record.read(Path(design_path(str(other.csv))).read_text(), "x").round
    assert f"its rows are sampling round {rec.round}'s, but the record beside it" in view and f"round {other_id}'s" in view


def _settle_rate(smp: Sampler, design, target: str, rounds: int, seed: int) -> tuple[float, float]:
    """Fresh rounds of ``design`` on worlds the grade model makes (each hole's grade drawn from its
    distribution): the share whose interval excludes 0 on the model's side, and the mean half-width."""
    from stagebench.judgments.power import model_world

    rng = np.random.default_rng(seed)
    t = smp.fr.targets.index(target)
    sign = np.sign(smp.prediction().point[t])
    hits, half = 0, 0.0
    for _ in range(rounds):
        world = model_world(smp.dist, smp.gains, rng)
        drawn = smp.draw(design, rng)
        holes = np.concatenate([np.arange(*smp.fr.spans[i]) for i in drawn])
        e = smp.estimate(design.pi, drawn, world[holes])
        hits += bool(e.low[t] > 0 if sign > 0 else e.high[t] < 0)
        half += (e.high[t] - e.low[t]) / 2 / rounds
    return hits / rounds, half


@pytest.mark.parametrize("kind", DESIGNS)
def test_the_plans_power_holds_on_the_worlds_its_grade_model_makes(kind):
    """What the plan promises 'if the model is right', checked on rounds it never saw (other seeds), each
    round's truth drawn from the model: the predicted half-width at the budget within 15% of those rounds'
    mean, and at the judgments it names the pair settles in about 4 rounds of 5 (0.65..0.92 over 300 rounds:
    without the 0.84 standard errors of 80% power, 0.47; a rehearsal of 2 rounds misses the width by 18%).
    Never more than the holes; no predicted difference, no budget. (Where a few whole queries carry the
    variance the rehearsal's t differs from the units' count; measured on the real worlds in docs/metrics.md.)"""
    ranked, qrels, queries, truth = _simulated(5)
    fr = frame(ranked, qrels, queries, 10, LINEAR, 3, design=kind)
    rng = np.random.default_rng(1)
    y = np.array([float(truth[q][d]) for q, d in fr.holes()])
    noisy = np.clip(np.round(y + rng.normal(0, 0.8, len(y))), 0, 3).astype(int)
    smp = Sampler(kind, fr, 0.4 * np.eye(4)[noisy] + 0.15, np.arange(4.0))
    design = smp.probabilities(40, aim=["a - b"])
    (p,) = smp.powers(design, 40)
    rate, half = _settle_rate(smp, design, "a - b", 300, 11)
    assert p.half_width == pytest.approx(half, rel=0.15)
    holes = len(fr.holes())
    assert p.needed is not None and 40 < p.needed < holes == p.holes
    rate, _ = _settle_rate(smp, smp.probabilities(p.needed, aim=["a - b"]), "a - b", 300, 12)
    assert 0.65 <= rate <= 0.92, (p.needed, rate)
    assert "at 40 judgments the 95% interval would be" in p.line(40) and "with 80% power" in p.line(40)
    same = {s: ranked["a"] for s in ranked}  # two identical stages: no difference, no budget settles it
    fr0 = frame(same, qrels, queries, 10, LINEAR, 3, design=kind)
    smp0 = Sampler(kind, fr0, np.full((len(fr0.holes()), 4), 0.25), np.arange(4.0))
    (p0,) = smp0.powers(smp0.probabilities(40, aim=["a - b"]), 40)
    assert p0.needed is None and "no budget settles it" in p0.line(40)


def test_a_sample_aims_where_it_is_told_and_says_what_its_budget_buys(judged_folder, tmp_path, capsys):
    from stagebench.cli import main

    stages = [r.stage for r in api.open(judged_folder).stage_table.rows]
    a, b = stages[-1], stages[0]
    sheet = api.plan_judgments(judged_folder, 30, tmp_path / "aimed.csv", strategy="sample", seed=2, aim=[f"{a}={b}"])
    rec = Record.read(Path(design_path(str(sheet.csv))).read_text(), "x")
    assert rec.aimed == [f"{b} - {a}"] and len(rec.power) == 1 and rec.power[0].startswith(f"{b} - {a}: the model predicts")
    header, rows = _rows(sheet.csv)
    assert {r[header.index("aims_at")] for r in rows} == {f"{b} - {a}"}
    assert main(["plan-judgments", str(judged_folder), "--budget", "30", "--strategy", "sample", "--aim", f"{a}=nope",
                 "--output", str(tmp_path / "x.csv")]) == 2  # fmt: skip
    assert f"--aim {a}=nope: 'nope' is not a stage of the folder ({', '.join(stages)})" in capsys.readouterr().err
    assert main(["plan-judgments", str(judged_folder), "--budget", "30", "--aim", f"{a}={b}",
                 "--output", str(tmp_path / "y.csv")]) == 2  # fmt: skip
    assert "--aim: for --strategy sample" in capsys.readouterr().err


def test_an_open_aimed_pair_says_about_how_many_more_judgments_would_settle_it_never_more_than_the_holes_left():
    from stagebench.judgments.sampling import EstimatedView

    view = EstimatedView("nDCG@10", ["a", "b", "a - b", "a - c"], [0.5, 0.45, 0.05, 0.2], [0.4, 0.3, -0.05, 0.1],
                         [0.6, 0.6, 0.15, 0.3], 100, 60, "m", "q", ["a - b", "a - c"], 0, holes_left=5000)  # fmt: skip
    # a - b: standard error 0.10 / 1.96 against 0.05: 80% power at se = 0.05 / 2.80, so 100 * ((2.80 / 1.96 * 0.10 / 0.05)^2 - 1)
    more = round(100 * ((2.8015852 / 1.959964 * 0.10 / 0.05) ** 2 - 1))
    assert view.more() == [f"a - b: open at 100 judgments; about {more:,} more judgments would settle it with 80% power "
                           "if the estimate +0.0500 holds (the standard error narrows as 1/sqrt(judgments))"]
    assert view.more()[0] in view.text()
    few = EstimatedView(**{**vars(view), "holes_left": 701})  # fewer holes left than that: a census of them settles it
    assert few.more() == ["a - b: open at 100 judgments; judging the remaining 701 holes settles it exactly (fewer would "
                          "not settle it with 80% power if the estimate +0.0500 holds)"]


def test_a_round_with_the_learned_grade_model_plans_and_estimates(judged_folder, tmp_path):
    sheet = api.plan_judgments(judged_folder, 30, tmp_path / "learned.csv", strategy="sample", seed=5, predictor="learned")
    rec = Record.read(Path(design_path(str(sheet.csv))).read_text(), "x")
    assert rec.predictor == "learned"
    api.add_judgments(judged_folder, [_graded(judged_folder, sheet.csv, tmp_path / "graded.csv")], tmp_path / "new")
    view = json.loads((tmp_path / "new" / ESTIMATE).read_text())
    assert not view["refused"] and view["predictor"] == "learned" and "log-loss" in view["quality"]


def test_hide_hides_that_share_of_every_pair_in_any_top_k_judged_or_not(judged_folder):
    """--hide: the world of a real catalog - real holes counted irrelevant, then that share of all the
    pooled pairs hidden, judged or not - with the main table's value as the truth."""
    from stagebench.judgments.planning import pool_holes

    g = ground(judged_folder)
    pooled = pool_holes(g.ranked, {}, g.queries, 10)
    cov = api.simulate_estimates(judged_folder, [20], rounds=4, hide=0.5, seed=1)
    line = next(n for n in cov.notes if n.startswith("the answers:"))
    assert f"{round(0.5 * len(pooled)):,} of the {len(pooled):,} pairs in any stage's top 10 hidden, judged or not" in line
    judged = sum(1 for h in pooled if h.docid in g.qrels.get(h.qid, {}))
    assert 0 < judged < len(pooled)  # both kinds are there to hide
    main = {r.stage: r.metrics["nDCG@10"] for r in api.open(judged_folder).stage_table.rows}
    assert cov.truth == pytest.approx({**main, **{t: v for t, v in cov.truth.items() if " - " in t}}, abs=1e-6)  # 6 decimals


@pytest.mark.parametrize("design", ["query", "hole"])
def test_any_budget_plans_a_capped_round_and_its_rounds_cover(judged_folder, tmp_path, design):
    """Budgets from 1 to past the largest whole-query unit, as a user asks for them: a worksheet of rows never
    above the budget, every drawn unit's probability recorded (in (0, 1]), and simulated rounds whose
    intervals hold the truth and stay inside what nDCG can be (a budget of 20 crashed: no draw within 19..20
    rows in 100000 tries)."""
    for budget in (1, 5, 20):
        sheet = api.plan_judgments(judged_folder, budget, tmp_path / f"{design}{budget}.csv", strategy="sample", seed=4,
                                   design=design)  # fmt: skip
        rec = Record.read(Path(design_path(str(sheet.csv))).read_text(), "x")
        assert 1 <= sheet.pairs <= budget and sheet.pairs == sum(len(u["docids"]) for u in rec.units)
        assert all(0 < u["probability"] <= 1 for u in rec.units)
    cov = api.simulate_estimates(judged_folder, [1, 20], rounds=30, hide=0.5, seed=2, designs=[design])
    for row in cov.rows:
        assert row.judged_max <= row.budget and row.worst[1] >= 0.9, (row.budget, row.judged_max, row.worst)
        assert all(w <= (2 if " - " in t else 1) + 1e-12 for t, w in row.width.items())


def test_a_simulated_round_reports_its_width_against_the_oracle_design_and_the_plans_prediction(judged_folder):
    """--simulate knows the truth, so each budget's row carries the oracle design's width for every pair (the
    model refitted to the true grades, Neyman's allocation for that pair's true residuals: never wider than the
    real design's on average) and the width the plan predicted; at a census the oracle's width is 0."""
    from stagebench.api.ground import estimation
    from stagebench.judgments.coverage import oracle_widths

    cov = api.simulate_estimates(judged_folder, [30], rounds=20, hide=0.5, seed=3, designs=["query"])
    for row in cov.rows:
        assert set(row.oracle) == set(cov.pairs) and set(row.predicted) == set(cov.targets)
        assert row.ratio() >= 1.0 and all(w >= 0 for w in row.oracle.values())
        assert f"{row.ratio():.2f}" in cov.text() and "width/oracle" in cov.text()
    json_row = cov.as_json()["rows"][0]
    assert json_row["width_over_oracle"] == pytest.approx(cov.rows[0].ratio())
    smp = estimation(ground(judged_folder), None).sampler
    y = smp.gains[np.random.default_rng(0).integers(0, len(smp.gains), len(smp.fr.holes()))]
    assert all(w == 0 for w in oracle_widths(smp, y, int(smp.cost.sum())).values())
    assert any(w > 0 for w in oracle_widths(smp, y, 5).values())
    top = np.full(len(y), float(smp.gains[-1]))  # a model refitted to a truth of one grade predicts it exactly
    assert all(w == 0 for w in oracle_widths(smp, top, 5).values())


def test_a_record_or_sheet_that_is_there_but_unreadable_is_named_so(sample_round, tmp_path, capsys):
    """A truncated record beside the graded sheet is unreadable (invalid JSON at a byte), not missing; a
    sheet saved as UTF-16LE without a byte-order mark is refused for its encoding, not for lacking qid and
    docid columns - at the command line a user runs."""
    from stagebench.cli import main

    folder, sheet = sample_round
    cut = tmp_path / "cut"
    cut.mkdir()
    graded = _graded(folder, sheet.csv, cut / "graded.csv")
    record = Path(design_path(str(graded)))
    record.write_text(record.read_text()[:100])
    assert main(["add-judgments", str(folder), str(graded), "--output", str(tmp_path / "out-cut")]) == 3
    err = capsys.readouterr().err
    assert f"its round's record {record}: unreadable, invalid JSON at byte" in err and "missing" not in err
    wide = tmp_path / "utf16.csv"
    wide.write_bytes(graded.read_text(encoding="utf-8").encode("utf-16-le"))
    assert main(["add-judgments", str(folder), str(wide), "--output", str(tmp_path / "out-16")]) == 2
    err = capsys.readouterr().err
    assert f"{wide}: the worksheet is saved as UTF-16LE without a byte-order mark" in err and "qid and docid" not in err
    assert not (tmp_path / "out-16").exists()


def test_a_round_is_refused_on_other_judgments_even_at_the_path_its_record_names(sample_round, tmp_path):
    """The record names the folder's path; a folder of other judgments put at that very path (a rerun into the
    same output, judgments added) is not the round's: its qrels digest decides, not the path."""
    import shutil

    folder, _ = sample_round
    here = tmp_path / "here"
    shutil.copytree(folder, here)
    sheet = api.plan_judgments(here, 30, tmp_path / "sheet.csv", strategy="sample", seed=6)
    graded = _graded(here, sheet.csv, tmp_path / "graded.csv")
    api.add_judgments(here, [_graded(here, sheet.csv, tmp_path / "other.csv")], tmp_path / "moved-on")
    shutil.rmtree(here)
    shutil.copytree(tmp_path / "moved-on", here)  # other judgments (the round's own grades added) at the same path
    assert Record.read(Path(design_path(str(graded))).read_text(), "x").folder == str(here)
    api.add_judgments(here, [graded], tmp_path / "again", prefer="existing")
    assert "drawn from other judgments" in json.loads((tmp_path / "again" / ESTIMATE).read_text())["refused"]
