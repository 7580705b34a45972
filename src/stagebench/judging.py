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
from datetime import datetime, timezone
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from stagebench import outputs
from stagebench.config import parse_config
from stagebench.data import parse_dataset
from stagebench.execute import context, make_stage, run_in
from stagebench.errors import StagebenchError
from stagebench.files import atomic_write, file_digest, check_apart, check_destination, remove_staging, staging, swap_in
from stagebench.cache import Cache, cache_root
from stagebench.judge.grading import dataset_of, judge_runs, make_judge
from stagebench.judge.section import parse_judge
from stagebench.judge.rules import RULES
from stagebench.judgments.incompleteness import FILE as INCOMPLETENESS, Incompleteness, removal_experiment
from stagebench.judgments.coverage import Coverage, simulate_rounds
from stagebench.judgments.grades import GRADE_MODELS, Constant, PairFeatures
from stagebench.judgments.design import DESIGNS, HOLE, Sampler
from stagebench.judgments.estimate import Frame, frame
from stagebench.judgments.planning import STRATEGIES, Pool, Simulation, depth_pooling, pool_holes, replay_strategies
from stagebench.judgments.sampling import (ESTIMATE, EstimatedView, Record, design_path, estimated_view, grade_model,
                                           predictor_stage, same_probability)
from stagebench.judgments.pool import HOLE, JUDGMENTS, Judgment, filled_qrels, read_judgments
from stagebench.judgments.worksheet import (ADDED, SOURCES, added_tsv, merge, read_worksheet, sources_json, worksheet_csv,
                                            worksheet_jsonl, worksheet_rows)
from stagebench.metrics import holes as hole_views, parse_measure, scored_query_ids
from stagebench.metrics.compute import gain_map
from stagebench.metrics.names import Measure
from stagebench.params import read_yaml
from stagebench.report.write import Rendered, render
from stagebench.results.folder import RESULTS, RunFolder, rewritten, write_manifest
from stagebench.results.scoring import comparisons_for, label_names_of
from stagebench.runs import rankings, run_digest, write_trec_qrels
from stagebench.runtime.engine import EngineParams

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


@dataclass
class Ground:
    """What every judging-round command reads from a finished folder (verified): the human qrels,
    each stage's rankings over the scored queries, the measure and the evaluation's conventions,
    and the judge's grades when the folder holds them."""

    rf: RunFolder
    qrels: dict
    queries: list[str]
    runs: dict[str, dict[str, dict[str, float]]]  # read (and verified) once for every use
    ranked: dict[str, dict[str, list[str]]]
    measure: Measure
    top: int
    rel: int
    gain: object
    scale: dict[int, str]
    judgments: list[Judgment] | None

    @property
    def is_truth(self) -> bool:
        j = self.rf.manifest.judge
        return j is not None and j.params.get("backend") == RULES

    @property
    def judge_name(self) -> str:
        j = self.rf.manifest.judge
        if j is None:
            return ""
        return "the generator's rules (the truth)" if self.is_truth else f"the LLM judge {j.params.get('model')}"

    def answers(self) -> dict[tuple[str, str], int]:
        """The judge's grades of the holes, (qid, docid) -> grade."""
        return {(j.qid, j.docid): j.grade for j in self.judgments or [] if j.purpose == HOLE and j.grade is not None}


def ground(folder: str | Path, measure: str | None = None) -> Ground:
    rf = RunFolder.open(folder)
    ev = rf.manifest.evaluation
    parsed = [m for m in map(parse_measure, ev.metrics) if m.supports.views]  # the round needs the views
    names = [m.name for m in parsed]
    if measure is None and not names:
        raise StagebenchError(f"{rf.path}: every measure of the folder is computed by ir_measures, which counts an "
                              "unjudged document as irrelevant only; the judging round needs the views of the holes: "
                              "give --measure with one of stagebench's own (e.g. nDCG@10)")  # fmt: skip
    if measure is None:
        measure = "nDCG@10" if "nDCG@10" in names else next((m.name for m in parsed if m.supports.holes_matter), names[0])
    try:
        m = parse_measure(measure)
    except StagebenchError as exc:
        raise StagebenchError(f"--measure: {exc}") from None
    if not m.supports.views:
        raise StagebenchError(f"--measure {m.name}: computed by ir_measures, which counts an unjudged document as "
                              "irrelevant only; the judging round needs the views of the holes: use one of "
                              "stagebench's own measures (docs/metrics.md)")  # fmt: skip
    if not m.supports.holes_matter:
        raise StagebenchError(f"--measure {m.name}: describes the judgments, not a stage's quality; every view gives it alike")
    qrels = rf.qrels()
    runs = rf.runs()
    stages = rf.manifest.stage_names
    if len(stages) < 2:
        raise StagebenchError(f"{rf.path}: one stage ({stages[0]}): there is no stage order to settle")
    queries = scored_query_ids(qrels)
    top = hole_views.top_grade(qrels, gain_map(ev.gain))
    judgments = None
    if rf.manifest.judge is not None and rf.holds(JUDGMENTS):
        judgments = read_judgments(rf.verified(JUDGMENTS).read_text(encoding="utf-8"), str(rf.path / JUDGMENTS))
    return Ground(rf, qrels, queries, runs, rankings(runs, stages, queries), m, top, ev.relevance_threshold, ev.gain,
                  label_names_of(rf.manifest, qrels), judgments)  # fmt: skip


def run_incompleteness(folder: str | Path, rates: list[float], seeds: int, measure: str | None = None,
                       permutations: int = 1000, report: bool = False) -> Incompleteness:  # fmt: skip
    """``stagebench incompleteness RUN_DIR``: the experiment, with the truth when the rules judged;
    ``report``: kept in the folder (``incompleteness.json``) and shown in its report.html."""
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


@dataclass
class Estimation:
    """What a sampling round needs from a folder: its design over the holes (the units, the grade model's
    distribution of every hole's grade, the scale's gains), the model's name and its quality."""

    g: Ground
    sampler: Sampler
    predictor: str
    quality: str

    @property
    def fr(self) -> Frame:
        return self.sampler.fr

    @property
    def gains(self) -> np.ndarray:
        return self.sampler.gains


def _nDCG_only(g: Ground) -> None:
    m = g.measure
    if not m.supports.estimable:
        raise StagebenchError(f"--measure {m.name}: the estimated view is for nDCG@k (a graded measure with a cut-off, "
                              "linear in the holes' gains once its ideal is known); give --measure nDCG@10")  # fmt: skip


def estimation(g: Ground, predictor: str | None, qrels: dict | None = None, cache_dir: str | None = None,
               design: str = HOLE) -> Estimation:  # fmt: skip
    """The ``design``'s units (:class:`~stagebench.judgments.design.Sampler`) and the grade model's
    predictions on ``qrels`` (default the folder's). A cross-encoder
    predictor scores the pairs in any stage's top k that its pool left out, once
    (:func:`model_scores`, cached under ``cache_dir``)."""
    _nDCG_only(g)
    qrels = g.qrels if qrels is None else qrels
    gain = gain_map(g.measure.gain or g.gain)
    grades = sorted(g.scale)
    types = {s.name: s.type for s in g.rf.manifest.stages}
    said = {(j.qid, j.docid): j.grade for j in g.judgments or [] if j.grade is not None}
    runs = g.runs
    spec = predictor_stage(predictor, runs, types)
    if spec is not None and types.get(spec) == "cross_encoder":
        runs = {**runs, spec: model_scores(g, spec, cache_dir)}
    features = None
    if predictor in GRADE_MODELS and GRADE_MODELS[predictor].needs_features:  # every cross-encoder's scores, the texts
        runs = {s: model_scores(g, s, cache_dir) if types.get(s) == "cross_encoder" else run for s, run in runs.items()}
        ds = dataset_of(g.rf, parse_dataset(g.rf.manifest.config.get("dataset")), "the learned grade model's features")
        features = PairFeatures(runs, ds.queries, ds.doc_text)
    model, quality = grade_model(predictor, runs, types, qrels, grades, said, features)
    gains = np.array([gain(x) for x in grades], dtype=np.float64)
    labelled = {(q, d): x for q, docs in qrels.items() for d, x in docs.items()}
    prior = Constant.fit(labelled, grades).p  # the judged pairs' grade shares: what cuts the units, not the model
    sampler = Sampler.over(design, g.ranked, qrels, g.queries, g.measure.cutoff, gain, g.top,
                           lambda holes: (model.distributions(holes), gains), prior)  # fmt: skip
    return Estimation(g, sampler, model.name, quality.line())


def pool_scores(run: Mapping[str, Mapping[str, float]], input_ranked: Mapping[str, Sequence[str]],
                depth: int | None) -> dict[str, dict[str, float]]:
    """A reranker's own model scores in its run: those of its pool, its input's top ``depth`` of each
    query (the whole run when ``depth`` is None: it scored every candidate). The tail below the pool
    carries placeholders placed under the pool's scores, not the model's, and is left out."""
    if depth is None:
        return {q: dict(docs) for q, docs in run.items()}
    head = {q: set(ranked[:depth]) for q, ranked in input_ranked.items()}
    return {q: {d: x for d, x in docs.items() if d in head.get(q, ())} for q, docs in run.items()}


def model_scores(g: Ground, stage: str, cache_dir: str | None = None) -> dict[str, dict[str, float]]:
    """The cross-encoder ``stage``'s own scores of every pair in any stage's top k (k: the measure's
    cut-off), for the grade model. Its run holds its model's score for its pool only (its input's top
    ``top_n``); the tail's scores are placed below the pool's, not the model's, and are left out. The
    pairs outside its pool are scored by the stage as the folder's config declares it, run on those
    pairs alone through the stage cache (computed once, then read back; the dataset must be the
    folder's)."""
    record = next(s for s in g.rf.manifest.stages if s.name == stage)
    scores = pool_scores(g.runs[stage], g.ranked[record.inputs[0]], record.candidate_depth)
    need: dict[str, dict[str, float]] = {}
    for h in pool_holes(g.ranked, {}, g.queries, g.measure.cutoff):
        if h.docid not in scores.get(h.qid, {}):
            need.setdefault(h.qid, {})[h.docid] = 0.0
    if not need:
        return scores
    raw = g.rf.manifest.config
    where = f"{g.rf.path / 'manifest.json'} (its config)"
    [sc] = [s for s in parse_config(raw, where).stages if s.name == stage]
    sc = replace(sc, inputs=["pairs outside its pool"], engine=EngineParams(),
                 params=replace(sc.params, top_n=max(len(d) for d in need.values()), depths=None))  # fmt: skip
    ds = dataset_of(g.rf, parse_dataset(raw.get("dataset")), f"scoring the pairs outside stage {stage}'s pool")
    cache = Cache(cache_root(cache_dir, raw.get("cache_dir") if isinstance(raw, dict) else None))
    log.info("grade model: %d pair(s) in a stage's top %d are outside stage %s's pool (%d queries): scored by its "
             "model", sum(map(len, need.values())), g.measure.cutoff, stage, len(need))  # fmt: skip
    out = run_in(sc, make_stage(sc), context(sc, ds, cache), [need], [run_digest(need)]).output.run
    for q, docs in need.items():
        scores.setdefault(q, {}).update({d: out[q][d] for d in docs})
    return scores


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
                    aim: Sequence[str] | None = None, design_kind: str = HOLE) -> tuple[Path, Path, int, list[str]]:  # fmt: skip
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
        powers = [est.sampler.power(t, budget, pred).line(budget) for t in design.aimed if " - " in t]
        drawn = est.sampler.draw(design, seed)
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
    _nDCG_only(g)
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


def _refusal(problems: list[str]) -> StagebenchError:
    """The error for refused worksheet rows: one problem is the error itself; several are logged one
    a line, and the error counts them."""
    if len(problems) == 1:
        return StagebenchError(problems[0])
    for p in problems:
        log.error("%s", p)
    return StagebenchError(f"{len(problems)} worksheet rows refused, each named above; nothing was written")


class _Corpus:
    """The document ids a worksheet row may name: those of the folder's runs and qrels, else (read once,
    on the first id that is neither) those of the dataset the folder's runs were scored on."""

    def __init__(self, rf: RunFolder, seen: set[str]) -> None:
        self.rf, self.seen, self.corpus = rf, seen, None

    def __contains__(self, docid: object) -> bool:
        if docid in self.seen:
            return True
        if self.corpus is None:
            dc = parse_dataset(self.rf.manifest.config.get("dataset"))
            self.corpus = dataset_of(self.rf, dc, "checking a worksheet's document ids").corpus
        return docid in self.corpus


def _round_record(worksheets: list[str], graded: list) -> tuple[str, Path, Record] | str | None:
    """The sampling round the worksheets come from - (worksheet, its record's path, the record) - found by
    the round's id every row carries: beside the worksheet under its own name, else any record of that
    round in the worksheet's folder (a sheet saved under another name); why none fits, in one line; or
    None when no worksheet comes from a sampling round."""
    found = []
    for i, w in enumerate(worksheets):
        rows = [x for x in graded if x.source == i]
        ids = sorted({x.round for x in rows if x.round})
        beside = Path(design_path(w))
        if not ids and not any(x.probability for x in rows):
            if beside.is_file():  # a record beside a sheet without the round's columns: its round all the same
                found.append((w, beside, Record.read(beside.read_text(encoding="utf-8"), str(beside))))
            continue
        if len(ids) > 1:
            return f"{w}: its rows come from {len(ids)} sampling rounds ({', '.join(ids)}): add each round's sheet alone"
        want = ids[0] if ids else None
        candidates = [beside] if beside.is_file() else []
        candidates += sorted(p for p in Path(w).parent.glob("*.design.json") if p != beside and p.is_file())
        other = None
        for path in candidates:
            try:
                rec = Record.read(path.read_text(encoding="utf-8"), str(path))
            except (StagebenchError, OSError, UnicodeDecodeError):
                continue
            if want is None or rec.round == want:
                found.append((w, path, rec))
                break
            other = other or (path, rec)
        else:
            if want is None:
                return (f"{w}: its rows carry a sampling round's probabilities but no record is beside it (expected "
                        f"{beside}): the estimate needs the record plan-judgments wrote")  # fmt: skip
            if other is not None:
                return (f"{w}: its rows are sampling round {want}'s, but the record beside it ({other[0]}) is round "
                        f"{other[1].round}'s and no record of round {want} is in {Path(w).parent}")  # fmt: skip
            return (f"{w}: its rows are sampling round {want}'s, whose record is missing (expected {beside}, or a "
                    f"*.design.json of that round in {Path(w).parent}): the estimate needs the record plan-judgments "
                    "wrote")  # fmt: skip
    if not found:
        return None
    if len(found) > 1:
        log.warning("%d worksheets from sampling rounds: the estimated view uses the first, %s (a later round is "
                    "estimated on the folder the earlier one wrote)", len(found), found[0][0])  # fmt: skip
    return found[0]


def _round_estimate(rf: RunFolder, worksheets: list[str], graded: list, cache_dir: str | None = None) -> EstimatedView | None:
    """The estimated view of a sampling round's worksheets (its record found by :func:`_round_record`),
    from the folder's judgments before the round; None when no worksheet comes from a sampling round."""
    got = _round_record(worksheets, graded)
    if got is None:
        return None
    if isinstance(got, str):
        log.warning("the estimated view is refused: %s", got)
        return EstimatedView("", [], [], [], [], 0, 0, "", "", [], 0, got)
    w, path, rec = got
    g = ground(rf.path, rec.measure)
    est = estimation(g, rec.predictor, cache_dir=cache_dir, design=rec.design)
    est.sampler.draws = rec.draws  # a round recorded before capped draws is estimated as the Poisson draw it was
    by_pair = {(x.qid, x.docid): x for x in graded}
    view = None
    if file_digest(rf.path / "qrels.trec") != rec.qrels_sha256:
        why = (f"{path}: the round was drawn from other judgments than {rf.path}'s (its qrels changed since the plan, or "
               "the worksheet is another folder's)")  # fmt: skip
    else:
        edited = [x for h, p in rec.holes.items() if (x := by_pair.get(h)) is not None and x.probability
                  and not same_probability(x.probability, p)]  # fmt: skip
        why = (f"{worksheets[edited[0].source]}: line {edited[0].line}: probability {edited[0].probability} is not the one the "
               f"round drew with ({rec.holes[(edited[0].qid, edited[0].docid)]:.6g}, {path}); the estimate needs the "
               "probabilities the draw used") if edited else ""  # fmt: skip
    if not why:
        gain = gain_map(g.measure.gain or g.gain)
        view = estimated_view(est.sampler, rec, {h: x.grade for h, x in by_pair.items()}, gain, est.predictor, est.quality)
    else:
        view = EstimatedView(rec.measure, est.fr.targets, [], [], [], 0, 0, est.predictor, est.quality, rec.aimed, 0, why)
    if view.refused:
        log.warning("the estimated view is refused: %s", view.refused)
    return view


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
    docs = _Corpus(rf, {d for run in runs.values() for ranked in run.values() for d in ranked} |
                   {d for judged in qrels.values() for d in judged})  # fmt: skip
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    graded, sources, bad = [], [], []
    for i, w in enumerate(worksheets):
        rows, src, problems = read_worksheet(w, i, scale, known, at, docs)
        graded += rows
        sources.append(src)
        bad += problems
    if bad:
        raise _refusal(bad)
    if not graded:
        raise StagebenchError(f"{', '.join(worksheets)}: no row has a grade: nothing to add")
    merged = merge(qrels, graded, sources, prefer)
    if isinstance(merged, list):
        raise _refusal(merged)
    view = _round_estimate(rf, worksheets, graded, cache_dir)
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
