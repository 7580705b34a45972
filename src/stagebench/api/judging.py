"""The judge's and the judging round's commands on a finished folder (above the report layer: each
renders the folder again; the round's parts are :mod:`stagebench.judgments`, the grader
:mod:`stagebench.judge`):

* ``stagebench judge RUN_DIR`` grades the holes of a finished folder (:func:`judge_folder`) without
  running a stage again.

* ``stagebench plan-judgments`` writes the worksheet of a budget of holes that settles the most
  open stage pairs (:mod:`stagebench.judgments.planning`), and ``--simulate`` measures the plan
  against depth pooling and random holes with the judge's grades as the answers.
* ``stagebench add-judgments`` takes graded worksheets back into a new results folder
  (:mod:`stagebench.judgments.worksheet`), the source folder untouched.
* ``stagebench incompleteness`` runs the classic experiment of judgments taken away
  (:mod:`stagebench.judgments.incompleteness`), and compares each view with the truth when the
  folder holds the rules judge's grades.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from stagebench import outputs
from stagebench.api.ground import (Ground, WorksheetCorpus, check_estimable, estimation, ground, refusal,
                                   round_estimate)
from stagebench.cache import Cache, cache_root
from stagebench.config import EvaluationConfig
from stagebench.data import parse_dataset
from stagebench.errors import StagebenchError
from stagebench.files import (atomic_write, check_apart, check_destination, file_digest, remove_staging, staging,
                              swap_in)
from stagebench.judge.grading import dataset_of, judge_runs, make_judge
from stagebench.judge.section import parse_judge
from stagebench.judgments.coverage import Coverage, simulate_rounds
from stagebench.judgments.design import DEFAULT as DEFAULT_DESIGN, DESIGNS, Sampler
from stagebench.judgments.grades import Constant
from stagebench.judgments.incompleteness import FILE as INCOMPLETENESS, Incompleteness, removal_experiment
from stagebench.judgments.planning import STRATEGIES, Pool, Simulation, depth_pooling, pool_holes, replay_strategies
from stagebench.judgments.pool import JUDGMENTS, filled_qrels
from stagebench.judgments.sampling import ESTIMATE, Record, design_path
from stagebench.judgments.worksheet import (ADDED, SOURCES, added_tsv, merge, read_worksheet, sources_json, worksheet_csv,
                                            worksheet_jsonl, worksheet_rows)
from stagebench.metrics.compute import gain_map
from stagebench.params import declared, read_yaml
from stagebench.report import plots
from stagebench.report.write import Rendered, render
from stagebench.results.folder import RESULTS, RunFolder, rewritten, write_manifest
from stagebench.results.scoring import comparisons_for, label_names_of
from stagebench.runs import write_trec_qrels


log = logging.getLogger("stagebench")


def judge_folder(folder: str | Path, config: str | None = None, cache_dir: str | None = None) -> Rendered:
    """``stagebench judge RUN_DIR``: the judge of ``config``'s ``judge:`` section (else of the config
    recorded in the folder) on a finished folder; its stages are not run again. The dataset is
    read as the folder's config names it and must be the one the runs were scored on."""
    rf = RunFolder.open(folder)
    check_destination(rf.path, RESULTS)  # every file in it is ours: nothing else is overwritten
    raw = read_yaml(Path(config)) if config else rf.manifest.config
    where = config or f"{rf.path / 'manifest.json'} (its config)"
    section = raw.get("judge") if isinstance(raw, dict) else None
    if section is None:
        raise StagebenchError(f"{where}: no judge: section; give a config with one (--config FILE; docs/metrics.md#an-llm-judge-for-the-holes)")
    dc = parse_dataset(rf.manifest.config.get("dataset"))
    params = parse_judge(section, where, rf.manifest.stage_names, dc)
    ds = dataset_of(rf, dc, "the judge")
    judge = make_judge(params, dc)
    judge.preflight()
    cache = Cache(cache_root(cache_dir, raw.get("cache_dir") if isinstance(raw, dict) else None))
    t0 = time.perf_counter()
    record, tsv = judge_runs(params, judge, ds, rf.runs(), rf.manifest.stage_names, rf.manifest.dataset.label_names, cache)
    with rewritten(rf.path) as tmp:  # the folder changes whole or not at all
        atomic_write(tmp / JUDGMENTS, tsv)
        manifest = write_manifest(tmp, rf.manifest.with_judge(record), [JUDGMENTS])
        rendered = render(tmp, RunFolder(tmp, manifest))
        write_manifest(tmp, manifest, rendered.written)
    log.info("%s: judged in %.1fs; judge/ tables and report.html written", rf.path, time.perf_counter() - t0)
    return rendered


def run_incompleteness(folder: str | Path, rates: list[float], seeds: int, measure: str | None = None,
                       permutations: int = 1000, report: bool = False) -> Incompleteness:  # fmt: skip
    """``stagebench incompleteness RUN_DIR``: the experiment, with the truth when the rules judged;
    ``report``: kept in the folder (``incompleteness.json``) and shown in its report.html."""
    permutations = declared(permutations, EvaluationConfig, "permutations", "permutations")  # as --permutations is
    g = ground(folder, measure)
    ev = g.rf.manifest.evaluation
    truth = None
    if g.is_truth:
        truth = filled_qrels(g.qrels, g.judgments or [])[0]
    inc = removal_experiment(g.ranked, g.qrels, g.queries, g.measure, g.top, g.rel, g.gain, rates, seeds, permutations,
                      ev.alpha, ev.seed, truth,
                      f"every hole in the top {g.rf.manifest.judge.depth} of every stage graded by {g.judge_name}"
                      if truth is not None else "")  # fmt: skip
    if report:
        rf = g.rf
        with rewritten(rf.path) as tmp:  # the folder changes whole or not at all
            atomic_write(tmp / INCOMPLETENESS, json.dumps(inc.as_json(), indent=2) + "\n")
            manifest = write_manifest(tmp, rf.manifest, [INCOMPLETENESS])
            rendered = render(tmp, RunFolder(tmp, manifest))
            write_manifest(tmp, manifest, rendered.written)
    return inc


def _write_all(sheets: dict[Path, bytes]) -> None:
    """Every file or none (a file this same plan wrote before it was cut short holds exactly these bytes)."""
    for p, data in sheets.items():
        if not (p.is_file() and not p.is_symlink() and p.read_bytes() == data):
            outputs.check_file(p, outputs.WORKSHEET)
    written = []
    try:
        for p, data in sheets.items():
            if not p.exists():
                atomic_write(p, data)
                written.append(p)
    except BaseException:  # all the files or none: the ones written go again
        for p in written:
            p.unlink(missing_ok=True)
        raise


def aimed_targets(aim: Sequence[str], stages: Sequence[str]) -> list[str]:
    """``--aim A=B`` (each a pair of the folder's stages, either order) as the estimate's target names
    (``A - B`` in stage order); one line naming what does not fit."""
    out = []
    for text in aim:
        a, sep, b = (x.strip() for x in text.partition("="))
        if not sep or not a or not b or a == b:
            raise StagebenchError(f"--aim {text}: name two stages of the folder as A=B (e.g. --aim {stages[-1]}={stages[0]})")
        for x in (a, b):
            if x not in stages:
                raise StagebenchError(f"--aim {text}: {x!r} is not a stage of the folder ({', '.join(stages)})")
        first, second = sorted((a, b), key=stages.index)
        if f"{first} - {second}" not in out:
            out.append(f"{first} - {second}")
    return out


def head_targets(g: Ground) -> list[str] | None:
    """The head-to-head pairs the folder's comparisons declare (siblings over one input, named pairs) as the
    estimate's targets: what a sample aims at unless --aim says otherwise; None when there are none."""
    ev = g.rf.manifest.evaluation
    stages = g.rf.manifest.stages
    _, head = comparisons_for(stages, ev.baseline or stages[0].name, ev.comparisons)
    names = list(g.ranked)
    return aimed_targets([f"{a}={b}" for a, b in head], names) if head else None


def write_worksheet(folder: str | Path, budget: int, output: str | Path, strategy: str = "plan", depth: int = 10,
                    measure: str | None = None, seed: int = 0, predictor: str | None = None,
                    show_ranks: bool = False, cache_dir: str | None = None,
                    aim: Sequence[str] | None = None, design_kind: str = DEFAULT_DESIGN) -> tuple[Path, Path, int, list[str]]:  # fmt: skip
    """``stagebench plan-judgments RUN_DIR --budget N``: the worksheet of ``strategy``'s holes as
    ``output`` (.csv) and beside it the same rows as .jsonl (and for ``sample`` the round's record,
    ``.design.json``); returns both sheets' paths, the rows, and for ``sample`` what the budget buys
    each aimed pair (:func:`stagebench.judgments.estimate.power`). Rows are grouped by query, blind
    (no stage's rank) unless ``show_ranks``; ``aim``: the stage pairs (``A=B``) a sample aims at;
    ``design_kind``: the sample's design (:data:`stagebench.judgments.design.DESIGNS`)."""
    if strategy not in STRATEGIES:
        raise StagebenchError(f"--strategy {strategy}: one of {', '.join(STRATEGIES)}")
    how = STRATEGIES[strategy]
    out = Path(output)
    csv_path, jsonl_path = out.with_suffix(".csv"), out.with_suffix(".jsonl")
    record_path = Path(design_path(str(csv_path)))
    for p in (csv_path, jsonl_path, *([record_path] if how.sampled else [])):  # before any work
        outputs.check_folder(p, "worksheet")
    if aim and not how.sampled:
        raise StagebenchError(f"--aim: for --strategy sample (the estimated view's pairs), not {strategy}")
    g = ground(folder, measure)
    targets = aimed_targets(aim, list(g.ranked)) if aim else head_targets(g)
    extra: dict = {}
    record = None
    powers: list[str] = []
    if how.sampled:
        est = estimation(g, predictor, cache_dir=cache_dir, design=design_kind)
        pred = est.sampler.prediction()
        design = est.sampler.probabilities(budget, targets, pred)
        powers = [p.line(budget) for p in est.sampler.powers(design, budget, pred)]
        drawn = est.sampler.draw(design, seed)
        too_big = [u for u, p in zip(est.fr.units, design.pi) if p <= 0 and u.cost > budget]
        if too_big:  # a whole query of more holes than the budget: no capped draw can take it
            log.warning("%s: %d whole %s (%d holes, the largest %d) %s more holes than the budget of %d: no draw can "
                        "take %s, so %s part of the estimate is bounded (a query's nDCG lies in 0..1) rather than "
                        "estimated, and widens the interval; a budget of %d reaches every unit", g.rf.path, len(too_big),
                        "query" if len(too_big) == 1 else "queries", sum(u.cost for u in too_big),
                        max(u.cost for u in too_big), "has" if len(too_big) == 1 else "have", budget,
                        "it" if len(too_big) == 1 else "one", "its" if len(too_big) == 1 else "their",
                        max(u.cost for u in est.fr.units))  # fmt: skip
        units = [est.fr.units[i] for i in drawn]
        aims = "; ".join(design.aimed)
        record = Record(str(g.rf.path), file_digest(g.rf.path / "qrels.trec"), g.measure.name, est.predictor, budget,
                        seed, design.aimed, [{"qid": u.qid, "docids": list(u.holes), "probability": float(design.pi[i])}
                                             for u, i in zip(units, drawn)],
                        dict(zip(est.fr.targets, pred.point.tolist())), power=powers, design=est.sampler.kind,
                        draws=est.sampler.draws)  # fmt: skip
        record.round = record.identity()
        for line in powers:
            log.info("aimed at %s", line)
        for u, i in zip(units, drawn):
            for d in u.holes:
                extra[(u.qid, d)] = {"unit": u.qid if not u.single else f"{u.qid} {d}",
                                     "probability": f"{design.pi[i]:.6g}", "aims_at": aims, "round": record.round}  # fmt: skip
        chosen = [h for h in pool_holes(g.ranked, g.qrels, g.queries, g.measure.cutoff) if (h.qid, h.docid) in extra]
        log.info("%s: grade model %s, %s", g.rf.path, est.predictor, est.quality)
        holes = chosen
    else:
        holes = pool_holes(g.ranked, g.qrels, g.queries, depth)
        pool = Pool(g.ranked, g.qrels, g.queries, g.measure, g.top, g.rel, g.gain, depth, holes)
        chosen = how.pick(pool, budget, seed)
        if how.fills_budget and chosen and len(chosen) < budget:  # it settles what it can: the rest by depth pooling
            taken = {(h.qid, h.docid) for h in chosen}
            rest = depth_pooling([h for h in holes if (h.qid, h.docid) not in taken], budget - len(chosen))
            log.info("%s: the %s strategy needs %d of the %d judgments asked for; the other %d are depth pooling's "
                     "next holes", g.rf.path, strategy, len(chosen), budget, len(rest))  # fmt: skip
            chosen = chosen + rest
    if not chosen:
        why = STRATEGIES["depth"].empty if not how.sampled and not holes else how.empty
        raise StagebenchError(f"{g.rf.path}: " + why.format(depth=depth, measure=g.measure.name, budget=budget))
    ds = dataset_of(g.rf, parse_dataset(g.rf.manifest.config.get("dataset")), "the worksheet")
    rows = worksheet_rows(chosen, ds.queries, ds.doc_text, list(g.ranked), g.queries, show_ranks, extra)
    sheets = {csv_path: worksheet_csv(rows, g.scale).encode("utf-8"), jsonl_path: worksheet_jsonl(rows, g.scale).encode("utf-8")}
    if record is not None:
        sheets[record_path] = record.as_json().encode("utf-8")
    _write_all(sheets)
    log.info("%s: %d of the %d unjudged pairs in the top %d (%s%s); worksheet %s and %s", g.rf.path, len(chosen),
             len(holes) if not how.sampled else len(est.fr.holes()), depth if not how.sampled else g.measure.cutoff,
             strategy, f", aimed at {'; '.join(record.aimed)}, the round's record {record_path}" if record else "",
             csv_path, jsonl_path)  # fmt: skip
    return csv_path, jsonl_path, len(chosen), powers


def _check_judge(g: Ground, depth: int, who: str, otherwise: str, what: str) -> None:
    """A simulation answers from the folder's judge grades: the folder must hold them, to ``depth``."""
    j = g.rf.manifest.judge
    if j is None or g.judgments is None:
        raise StagebenchError(f"{g.rf.path}: {who} the folder's judge grades, and it has none: run its config "
                              f"with judge: {{backend: rules}} (the embedded data){otherwise}")  # fmt: skip
    if j.depth < depth:
        raise StagebenchError(f"{g.rf.path}: its judge graded the top {j.depth}, fewer than {what} {depth}")


def estimate_coverage(folder: str | Path, budgets: list[int], rounds: int = 200, measure: str | None = None,
                       predictor: str | None = None, hide: float | None = None, seed: int = 0,
                       cache_dir: str | None = None, designs: Sequence[str] = DESIGNS) -> Coverage:  # fmt: skip
    """``plan-judgments --simulate --strategy sample``: ``rounds`` sampling rounds at each budget, each
    answered from known grades and scored against the truth, for the grade model and two useless ones
    (constant, and its scores shuffled). The known grades: the folder's judge (the rules judge: the
    truth) or, with ``hide``, that share of all pairs in any stage's top k hidden as if they were holes,
    judged or not: every real hole counts irrelevant (as in the main table, so the truth is the main
    table's value) and is hidden with the same chance as a judged pair. Each of ``designs`` is simulated
    with every model, side by side."""
    g = ground(folder, measure)
    check_estimable(g)
    k = g.measure.cutoff
    notes = []
    if hide is None:
        _check_judge(g, k, "the simulated rounds are answered by", ", or give --hide SHARE", "the measure's cut-off")
        qrels, truth = g.qrels, filled_qrels(g.qrels, g.judgments)[0]
        notes.append(f"the answers: {g.judge_name}")
    else:
        pooled = [(h.qid, h.docid) for h in pool_holes(g.ranked, {}, g.queries, k)]  # every pair in any top k
        hidden = set(random.Random(seed).sample(pooled, round(hide * len(pooled))))
        truth = {q: dict(docs) for q, docs in g.qrels.items()}
        for q, d in pooled:  # a true hole counts irrelevant, as the main table counts it
            truth.setdefault(q, {}).setdefault(d, 0)
        qrels = {q: {d: x for d, x in docs.items() if (q, d) not in hidden} for q, docs in truth.items()}
        was = sum(1 for q, d in hidden if d in g.qrels.get(q, {}))
        notes.append(f"the answers: {len(hidden):,} of the {len(pooled):,} pairs in any stage's top {k} hidden, judged "
                     f"or not ({was:,} judged; seed {seed}); a real hole counts irrelevant, so the truth is the main "
                     "table's value")  # fmt: skip
    est = estimation(g, predictor, qrels, cache_dir)
    gain = gain_map(g.measure.gain or g.gain)
    y = np.array([gain(truth[q][d]) for q, d in est.fr.holes()], dtype=np.float64)
    labelled = {(q, d): x for q, docs in qrels.items() for d, x in docs.items()}
    dists = {est.predictor: est.sampler.dist,
             "constant": Constant.fit(labelled, sorted(g.scale)).distributions(est.fr.holes())}  # the same holes' order
    if est.predictor not in ("constant", "judge"):
        dists[f"{est.predictor} (shuffled)"] = est.sampler.dist[np.random.default_rng(seed).permutation(len(y))]
    prior = Constant.fit(labelled, sorted(g.scale)).p
    frames = {kind: est.fr if kind == est.sampler.kind else
              Sampler.over(kind, g.ranked, qrels, g.queries, k, gain, g.top, lambda h: (dists["constant"], est.gains), prior).fr
              for kind in designs}  # fmt: skip
    samplers = {(name, kind): Sampler(kind, fr, dist, est.gains) for name, dist in dists.items() for kind, fr in frames.items()}
    cov = simulate_rounds(samplers, y, budgets, rounds, seed)
    cov.notes = [f"{g.rf.path}: {g.measure.name}, {len(g.queries)} queries, {len(est.fr.holes()):,} holes in "
                 f"{len(est.fr.units):,} units; grade model {est.predictor}, {est.quality}", *notes]
    return cov


def simulate_strategies(folder: str | Path, budgets: list[int], depth: int = 10, seeds: int = 3,
                   measure: str | None = None) -> Simulation:  # fmt: skip
    """``plan-judgments --simulate``: every strategy at every budget, answered by the folder's judge."""
    g = ground(folder, measure)
    _check_judge(g, depth, "--simulate answers the chosen pairs with", " or any judge", "--depth")
    sim = replay_strategies(g.ranked, g.qrels, g.queries, g.measure, g.top, g.rel, g.gain, g.answers(), budgets, depth, seeds,
                   g.judge_name)  # fmt: skip
    if not g.is_truth:
        sim.notes.append("(!) the answers are an LLM judge's, not the truth: its errors move the true order")
    return sim


def rescore_with_worksheets(folder: str | Path, worksheets: list[str], output: str | Path, prefer: str | None = None,
                            cache_dir: str | None = None) -> Rendered:  # fmt: skip
    """``stagebench add-judgments RUN_DIR WORKSHEET... --output NEW_DIR``: a new results folder
    scored with the folder's qrels plus the worksheets' grades, with where each came from; the
    source folder and the dataset's files are left as they are."""
    rf = RunFolder.open(folder)
    dest = Path(output)  # where it goes is checked before anything is read
    check_apart(rf.path, "results folder", dest, "new results folder")
    outputs.check_folder(dest, "new results folder")
    check_destination(dest, RESULTS)
    qrels, texts = rf.qrels(), rf.texts()
    runs = rf.runs()  # every run verified before anything is written
    scale = label_names_of(rf.manifest, qrels)
    known = set(qrels) | set(texts.get("queries", {}))
    docs = WorksheetCorpus(rf, {d for run in runs.values() for ranked in run.values() for d in ranked} |
                   {d for judged in qrels.values() for d in judged})  # fmt: skip
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    graded, sources, bad = [], [], []
    for i, w in enumerate(worksheets):
        rows, src, problems = read_worksheet(w, i, scale, known, at, docs)
        graded += rows
        sources.append(src)
        bad += problems
    if bad:
        raise refusal(bad)
    if not graded:
        raise StagebenchError(f"{', '.join(worksheets)}: no row has a grade: nothing to add")
    merged = merge(qrels, graded, sources, prefer)
    if isinstance(merged, list):
        raise refusal(merged)
    view = round_estimate(rf, worksheets, graded, cache_dir)
    check_destination(dest, RESULTS)
    tmp = staging(dest)
    try:
        recorded = RESULTS.files(rf.path)  # the folder's own files: a note of the user's beside them stays behind
        for rel in (RESULTS.record, *recorded, *(k for k in RESULTS.kept if (rf.path / k).is_file())):
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(rf.path / rel, tmp / rel)
        write_trec_qrels(merged.qrels, tmp / "qrels.trec")
        atomic_write(tmp / ADDED, added_tsv(merged))
        atomic_write(tmp / SOURCES, sources_json(merged, str(rf.path)))
        if view is not None:
            atomic_write(tmp / ESTIMATE, view.as_json())
        manifest = write_manifest(tmp, rf.manifest, [ADDED, SOURCES, *([ESTIMATE] if view is not None else [])])
        rendered = render(tmp, RunFolder(tmp, manifest))
        write_manifest(tmp, manifest, rendered.written)
        check_destination(dest, RESULTS)  # it may have changed meanwhile
        swap_in(tmp, dest, kept=RESULTS.kept)
    except BaseException:
        remove_staging(tmp)
        raise
    log.info("%s: %d judgments added from %d worksheet(s) (%d already there); written to %s", rf.path,
             len(merged.added), len(sources), merged.kept, dest)  # fmt: skip
    return replace(rendered, estimate_refused=view.refused) if view is not None and view.refused else rendered


def incompleteness(folder: str | Path, rates: Sequence[float] = (0.9, 0.7, 0.5, 0.3, 0.1), seeds: int = 3,
                   measure: str | None = None, permutations: int = 1000, report: bool = False,
                   json_path: str | Path | None = None, plot_path: str | Path | None = None) -> Incompleteness:  # fmt: skip
    """``stagebench incompleteness``: each view's stage order with judgments taken away (``report``:
    kept in the folder and shown in its report.html; ``json_path``, ``plot_path``: also written there,
    under the rule of :mod:`stagebench.outputs`, checked before any work)."""
    outputs.check_file(json_path, outputs.INCOMPLETENESS_JSON.out)
    outputs.check_file(plot_path, outputs.INCOMPLETENESS_PLOT.out)
    inc = run_incompleteness(folder, list(rates), seeds, measure, permutations, report)
    if json_path is not None:
        outputs.INCOMPLETENESS_JSON.write(json_path, inc.as_json())
    if plot_path is not None:
        outputs.INCOMPLETENESS_PLOT.write(plot_path, plots.incompleteness_chart(inc))
    return inc


@dataclass(frozen=True)
class Worksheet:
    """A judging worksheet :func:`plan_judgments` wrote: the CSV, the same rows as JSONL, how many, and for a
    sample what its budget buys each aimed pair if the grade model is right."""

    csv: Path
    jsonl: Path
    pairs: int
    power: list[str] = field(default_factory=list)


def plan_judgments(folder: str | Path, budget: int, output: str | Path, *, strategy: str = "plan", depth: int = 10,
                   measure: str | None = None, seed: int = 0, predictor: str | None = None,
                   show_ranks: bool = False, cache_dir: str | None = None,
                   aim: Sequence[str] | None = None, design: str = DEFAULT_DESIGN) -> Worksheet:  # fmt: skip
    """``stagebench plan-judgments``: the worksheet of ``budget`` unjudged pairs picked by ``strategy``
    (``sample``: a random sample for the estimated view, its record beside the worksheet, aimed at the
    stage pairs ``aim`` names (``["ce=plugin"]``) or else at those its grade model predicts the budget
    can settle; a cross-encoder grade model scores the pairs outside its pool in the cache ``cache_dir``;
    ``design``: the sample's design, :data:`stagebench.judgments.design.DESIGNS`)."""
    return Worksheet(*write_worksheet(folder, budget, output, strategy, depth, measure, seed, predictor, show_ranks,
                                      cache_dir, aim, design))


def simulate_estimates(folder: str | Path, budgets: Sequence[int], *, rounds: int = 200, measure: str | None = None,
                       predictor: str | None = None, hide: float | None = None, seed: int = 0,
                       json_path: str | Path | None = None, cache_dir: str | None = None,
                       designs: Sequence[str] = DESIGNS) -> Coverage:  # fmt: skip
    """``plan-judgments --simulate --strategy sample``: the estimated view's coverage, settled pairs and
    widths over ``rounds`` simulated rounds a budget, for each of ``designs`` side by side
    (:func:`estimate_coverage`)."""
    outputs.check_file(json_path, outputs.SIMULATION_JSON.out)
    if hide is not None and not 0 < hide < 1:
        raise StagebenchError(f"--hide {hide}: a share of the judged pairs, between 0 and 1")
    cov = estimate_coverage(folder, list(budgets), rounds, measure, predictor, hide, seed, cache_dir, designs)
    if json_path is not None:
        outputs.SIMULATION_JSON.write(json_path, cov.as_json())
    return cov


def simulate_plans(folder: str | Path, budgets: Sequence[int], *, depth: int = 10, seeds: int = 3,
                   measure: str | None = None, json_path: str | Path | None = None) -> Simulation:  # fmt: skip
    """``plan-judgments --simulate``: every strategy at every budget, answered by the folder's judge
    (``json_path``: also written there, under the rule of :mod:`stagebench.outputs`)."""
    outputs.check_file(json_path, outputs.SIMULATION_JSON.out)
    sim = simulate_strategies(folder, list(budgets), depth, seeds, measure)
    if json_path is not None:
        outputs.SIMULATION_JSON.write(json_path, sim.as_json())
    return sim
