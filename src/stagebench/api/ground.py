"""What a judging-round command reads from a finished folder (:class:`Ground`, verified once), the grade
model's inputs taken from it (:func:`estimation`, :func:`model_scores`: a cross-encoder's scores of the pairs
its pool left out, through the cache), and a sampling round's record found beside its worksheets and
estimated (:func:`round_record`, :func:`round_estimate`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from stagebench.cache import Cache, cache_root
from stagebench.config import parse_config
from stagebench.data import parse_dataset
from stagebench.errors import StagebenchError
from stagebench.execute import context, make_stage, run_in
from stagebench.files import file_digest
from stagebench.judge.grading import dataset_of
from stagebench.judge.rules import RULES
from stagebench.judgments.design import DEFAULT as DEFAULT_DESIGN, Sampler
from stagebench.judgments.estimate import Frame
from stagebench.judgments.grades import GRADE_MODELS, Constant, PairFeatures
from stagebench.judgments.planning import pool_holes
from stagebench.judgments.pool import HOLE, JUDGMENTS, Judgment, read_judgments
from stagebench.judgments.sampling import (EstimatedView, Record, design_path, estimated_view, grade_model,
                                           predictor_stage, same_probability)
from stagebench.metrics import holes as hole_views, parse_measure, scored_query_ids
from stagebench.metrics.compute import gain_map
from stagebench.metrics.names import Measure
from stagebench.results.folder import RunFolder
from stagebench.results.scoring import label_names_of
from stagebench.runs import rankings, run_digest
from stagebench.runtime.engine import EngineParams


log = logging.getLogger("stagebench")


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


@dataclass
class Estimation:
    """What a sampling round needs from a folder: its design over the holes (the units, the grade model's
    distribution of every hole's grade, the scale's gains), the model's name and its quality, and the pair
    features the learned model read (None for another model)."""

    g: Ground
    sampler: Sampler
    predictor: str
    quality: str
    features: PairFeatures | None = None

    @property
    def fr(self) -> Frame:
        return self.sampler.fr

    @property
    def gains(self) -> np.ndarray:
        return self.sampler.gains


def check_estimable(g: Ground) -> None:
    m = g.measure
    if not m.supports.estimable:
        raise StagebenchError(f"--measure {m.name}: the estimated view is for nDCG@k (a graded measure with a cut-off, "
                              "linear in the holes' gains once its ideal is known); give --measure nDCG@10")  # fmt: skip


def estimation(g: Ground, predictor: str | None, qrels: dict | None = None, cache_dir: str | None = None,
               design: str = DEFAULT_DESIGN) -> Estimation:  # fmt: skip
    """The ``design``'s units (:class:`~stagebench.judgments.design.Sampler`) and the grade model's
    predictions on ``qrels`` (default the folder's). A cross-encoder
    predictor scores the pairs in any stage's top k that its pool left out, once
    (:func:`model_scores`, cached under ``cache_dir``)."""
    check_estimable(g)
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
    return Estimation(g, sampler, model.name, quality.line(), features)


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


def refusal(problems: list[str]) -> StagebenchError:
    """The error for refused worksheet rows: one problem is the error itself; several are logged one
    a line, and the error counts them."""
    if len(problems) == 1:
        return StagebenchError(problems[0])
    for p in problems:
        log.error("%s", p)
    return StagebenchError(f"{len(problems)} worksheet rows refused, each named above; nothing was written")


class WorksheetCorpus:
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


def round_record(worksheets: list[str], graded: list) -> tuple[str, Path, Record] | str | None:
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
        other, unreadable = None, None
        for path in candidates:
            try:
                rec = Record.read(path.read_text(encoding="utf-8"), str(path))
            except UnicodeDecodeError as exc:
                unreadable = unreadable or f"{path}: unreadable, not UTF-8 at byte {exc.start}"
                continue
            except (StagebenchError, OSError) as exc:
                if path == beside:  # the record beside the sheet is there but cannot be read: that, not "missing"
                    unreadable = unreadable or str(exc)
                continue
            if want is None or rec.round == want:
                found.append((w, path, rec))
                break
            other = other or (path, rec)
        else:
            if unreadable is not None:
                return f"{w}: its round's record {unreadable}"
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


def round_estimate(rf: RunFolder, worksheets: list[str], graded: list, cache_dir: str | None = None) -> EstimatedView | None:
    """The estimated view of a sampling round's worksheets (its record found by :func:`round_record`),
    from the folder's judgments before the round; None when no worksheet comes from a sampling round."""
    got = round_record(worksheets, graded)
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
