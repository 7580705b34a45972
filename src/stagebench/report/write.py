"""Score and render a finished run folder - the one code path behind ``run`` and ``table``.

A run folder holds ``runs/<stage>.trec``, ``qrels.trec``, ``texts.json`` and ``manifest.json``.
:func:`render` reads only those (verified against the manifest's digests), scores every stage
(:mod:`stagebench.results.scoring`), and writes ``stage_table.{txt,md,csv,json}``,
``significance.json`` (and ``significance_judged_only.json``, the judged-only view's tests), ``per_query.csv``,
``segments.{txt,md,csv,json}`` (when ``evaluation.segments`` names any), ``matrix.{txt,md,csv,json}`` (when the
config has a ``matrix:``), ``plots/*.png`` and ``report.html``. Nothing in it runs a
stage, so ``stagebench table RUN_DIR`` reproduces the files of ``stagebench run`` byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from stagebench.errors import StagebenchError
from stagebench.files import atomic_write
from stagebench.metrics import evaluate, parse_measure
from stagebench.record import Manifest
from stagebench.report import plots
from stagebench.report.explorer import explorer_json, query_text
from stagebench.report.html import render_html
from stagebench.report.tables import (judge_text, matrix_csv, matrix_markdown, matrix_text, per_query_csv, render_csv,
                                     render_markdown, render_text, segments_csv, segments_markdown, segments_text)  # fmt: skip
from stagebench.results import ceilings
from stagebench.results.cost import quality_cost
from stagebench.results.folder import RunFolder, rewritten, write_manifest
from stagebench.results.matrix import matrix_table
from stagebench.judgments.pool import FILLED_FLAGS, FILLED_QRELS, JUDGMENTS, judge_results, read_judgments, sources_tsv
from stagebench.results.queries import build, primary_measure, wins_and_losses
from stagebench.results.scoring import Scored, label_names_of, score_folder
from stagebench.results.segments import STORED_FILE, SegmentSources, SegmentTable, read_stored, segment_tables
from stagebench.judgments.incompleteness import FILE as INCOMPLETENESS, Incompleteness
from stagebench.judgments.sampling import ESTIMATE, EstimatedView
from stagebench.judgments.worksheet import SOURCES, sources_note
from stagebench.runs import Run, write_trec_qrels
from stagebench.table import StageTable


@dataclass
class Rendered:
    """What :func:`render` scored (:class:`~stagebench.results.scoring.Scored`), the table's text,
    and the files it wrote."""

    scored: Scored
    text: str
    written: list[str] = field(default_factory=list)  # files render() wrote, relative to the folder
    judge_text: str = ""  # the LLM judge's summary and agreement (empty: no judge on this folder)
    estimate_refused: str = ""  # add-judgments of a sampling round: why its estimated view was refused

    @property
    def table(self) -> StageTable:
        return self.scored.table

    @property
    def per_query(self) -> dict[str, dict[str, dict[str, float]]]:
        return self.scored.per_query


def render(folder: str | Path, rf: RunFolder | None = None) -> Rendered:
    """Score, analyse and write every table, plot and the report of a run folder (its runs,
    qrels and texts verified against the manifest first)."""
    folder = Path(folder)
    rf = rf or RunFolder.open(folder)
    manifest, qrels, runs, texts = rf.manifest, rf.qrels(), rf.runs(), rf.texts()
    scored = score_folder(manifest, qrels, runs)
    table = scored.table
    if rf.holds(SOURCES):  # judgments added by add-judgments: the table says from where
        table.notes.insert(2, sources_note(rf.verified(SOURCES).read_text(encoding="utf-8")))
    view = EstimatedView.from_json(rf.verified(ESTIMATE).read_text(encoding="utf-8")) if rf.holds(ESTIMATE) else None
    if view is not None:  # a sampling round's estimate beside the three views
        table.notes.insert(3, f"estimated view (below): {view.measure} with every hole graded, from {view.judged:,} human "
                              "judgments of a random sample" if not view.refused else f"estimated view: refused - {view.refused}")  # fmt: skip
    if view is not None and not view.refused:  # the head-to-head lines say what the estimate makes of their pair
        for r in table.rows:
            for other, by in r.compared.items():
                got = view.difference(r.stage, other) if view.measure in by else None
                if got is not None:
                    v, lo, hi = got
                    by[view.measure]["estimated"] = {"difference": round(v, 6), "ci95": [round(lo, 6), round(hi, 6)],
                                                     "settled": lo > 0 or hi < 0}  # fmt: skip
    rendered = Rendered(scored, render_text(table) + ("" if view is None or view.refused else "\n" + view.text()))
    stages = manifest.stages

    def write(rel: str, data) -> None:
        atomic_write(folder / rel, data)
        rendered.written.append(rel)

    write("stage_table.txt", rendered.text)
    write("stage_table.md", render_markdown(table))
    write("stage_table.csv", render_csv(table))
    write("stage_table.json", table.to_json())
    write("significance.json", json.dumps(scored.comparisons, indent=2) + "\n")
    write("significance_judged_only.json", json.dumps(scored.judged_only_comparisons, indent=2) + "\n")
    write("per_query.csv", per_query_csv([s.name for s in stages], scored.per_query, scored.queries))
    segs = run_segments(rf, scored, qrels, texts)
    if segs:
        measure = primary_measure(table.metrics)
        write("segments.txt", "\n".join(segments_text(t, measure) for t in segs))
        write("segments.md", "\n".join(segments_markdown(t, measure) for t in segs))
        write("segments.csv", segments_csv(segs))
        write("segments.json", json.dumps([t.as_dict() for t in segs], indent=2) + "\n")
    matrix = None
    if manifest.evaluation.matrix is not None:
        matrix = matrix_table(manifest.evaluation.matrix, table, str(folder))
        write("matrix.txt", matrix_text(matrix))
        write("matrix.md", matrix_markdown(matrix))
        write("matrix.csv", matrix_csv(matrix))
        write("matrix.json", json.dumps(matrix.as_dict(), indent=2) + "\n")
    judge = None
    if manifest.judge is not None:
        judgments = read_judgments(rf.verified(JUDGMENTS).read_text(encoding="utf-8"), str(folder / JUDGMENTS))
        judged = judge_results(manifest, qrels, runs, judgments)
        jt = judged.table
        rendered.judge_text = judge_text(judged.record, judged.agreement)
        write("judge/stage_table.txt", render_text(jt))
        write("judge/stage_table.md", render_markdown(jt))
        write("judge/stage_table.csv", render_csv(jt))
        write("judge/stage_table.json", jt.to_json())
        write("judge/agreement.txt", rendered.judge_text)
        write("judge/agreement.json", json.dumps({"judge": judged.record.to_json(), "agreement": judged.agreement.to_json()},
                                                 indent=2) + "\n")  # fmt: skip
        write_trec_qrels(judged.filled, folder / FILLED_QRELS)
        rendered.written.append(FILLED_QRELS)
        write(FILLED_FLAGS, sources_tsv(judged.filled, judged.added))
        judge = (jt, rendered.judge_text)

    rel = manifest.evaluation.relevance_threshold
    retrieval = [s for s in stages if not s.reorders_input]
    max_k = max((max((len(v) for v in runs[s.name].values()), default=1) for s in retrieval), default=1)
    curves = {s.name: ceilings.recall_curve(runs[s.name], qrels, scored.queries, rel, max_k) for s in retrieval}
    marks = {s.name: int(s.candidate_depth or 0) for s in stages if s.reorders_input}
    images = [("metrics.png", plots.metric_bars(table.rows, table.metrics)),
              ("recall_at_k.png", plots.recall_curves(curves, marks)), ("top10_labels.png", plots.label_distribution(table.rows))]  # fmt: skip
    if any(r.ceiling for r in table.rows):
        images.insert(2, ("ceiling.png", plots.ceiling_chart(table.rows)))
    images += [(f"depth_{r.stage}.png", plots.depth_curve(r)) for r in table.rows if r.depths]
    if segs:
        images.append(("segments.png", plots.segments_chart(segs, primary_measure(table.metrics))))
    if matrix is not None:
        images.append(("matrix.png", plots.matrix_heatmaps(matrix)))
    if len(table.rows) > 1:
        points = quality_cost(table, stages)
        if all(p.seconds_per_query > 0 for p in points):
            images.append(("quality_cost.png", plots.quality_cost_chart(points)))
    sections = []
    if view is not None:
        sections.append(("estimated", "Estimated view: the stage table with every hole graded, from a random sample", view.text()))
    if rf.holds(INCOMPLETENESS):  # stagebench incompleteness RUN_DIR --report
        inc = Incompleteness.from_json(json.loads(rf.verified(INCOMPLETENESS).read_text(encoding="utf-8")))
        sections.append(("incompleteness", "Incompleteness: the stage order under fewer judgments", inc.text()))
        images.append(("incompleteness.png", plots.incompleteness_chart(inc)))
    sections.append(("written-by", "The code that ran these stages", manifest.written_by))
    for name, png in images:
        write(f"plots/{name}", png)
    write("report.html", render_html(table, scored.comparisons, images, stages,
                                     explorer_data(manifest, qrels, runs, scored, texts), judge, segs, matrix,
                                     sections))  # fmt: skip
    return rendered


def run_segments(rf: RunFolder, scored: Scored, qrels: dict, texts: dict) -> list[SegmentTable]:
    """The segments table of each segmentation the evaluation names (``evaluation.segments``); the
    segmentations the folder cannot compute again are read (verified) from what the run stored."""
    ev = rf.manifest.evaluation

    def stored():
        return read_stored(rf.verified(STORED_FILE).read_text(encoding="utf-8"), str(rf.path / STORED_FILE))

    src = SegmentSources(lambda: texts["queries"], lambda: qrels, stored, ev.relevance_threshold)
    inputs = {s.name: list(s.inputs or []) for s in rf.manifest.stages}
    return segment_tables(ev.segments, src, ev, scored.per_query, inputs, scored.queries, scored.table.metrics)


def rerender(folder: str | Path) -> Rendered:
    """``stagebench table``: render a finished folder again and record the new files' digests."""
    rf = RunFolder.open(folder)
    with rewritten(rf.path) as tmp:  # the folder changes whole or not at all
        rendered = render(tmp, rf)  # read (and named) in the folder itself, written into the copy
        write_manifest(tmp, rf.manifest, rendered.written)
    return rendered


def explorer_data(manifest: Manifest, qrels: dict, runs: dict[str, Run], scored: Scored, texts: dict) -> tuple[dict, dict]:
    """The per-query explorer's data for report.html and each stage's biggest wins and losses."""
    metric = primary_measure(scored.table.metrics)
    views = build(manifest.stages, runs, qrels, scored.per_query, metric, scored.queries,
                  manifest.evaluation.relevance_threshold, texts)  # fmt: skip
    return explorer_json(views, manifest.stages, metric, label_names_of(manifest, qrels), texts), wins_and_losses(views)


def show_query(folder: str | Path, qid: str) -> str:
    """``stagebench show``: one query's view in text - each stage's top 10 with grades and moves,
    and what each reranker never saw - from a finished run folder (only the primary measure is scored)."""
    rf = RunFolder.open(folder)
    manifest, qrels, runs = rf.manifest, rf.qrels(), rf.runs()
    ev = manifest.evaluation
    metric = primary_measure([parse_measure(m).name for m in ev.metrics])
    names = manifest.stage_names
    per_query = {n: evaluate(qrels, runs[n], [metric], relevance_threshold=ev.relevance_threshold,
                             gain=ev.gain).per_query for n in names}  # fmt: skip
    scored = per_query[names[0]][metric]
    if qid not in scored:
        near = sorted(scored)[:5]
        why = "is judged but has no relevant document" if qid in qrels else "is not in the qrels"
        raise StagebenchError(f"{folder}: query {qid!r} {why}, so it is not scored (scored: {len(scored)} queries, "
                              f"e.g. {', '.join(near)})")  # fmt: skip
    texts = rf.texts()
    view = build(manifest.stages, runs, qrels, per_query, metric, [qid], ev.relevance_threshold, texts)[0]
    return query_text(view, metric, label_names_of(manifest, qrels), texts.get("docs", {}))
