"""Score and render a finished run folder - the one code path behind `run` and `table`.

A run folder holds ``runs/<stage>.trec``, ``qrels.trec`` and ``manifest.json`` (config,
evaluation settings, stage metadata, dataset statistics and timings). :func:`render`
reads only those files, scores every stage, runs the analysis and the significance
tests, and writes ``stage_table.{txt,md,csv,json}``, ``significance.json``,
``per_query.csv``, ``plots/*.png`` and ``report.html``. Nothing in it runs a stage, so
``stagebench table RUN_DIR`` reproduces the files of ``stagebench run`` byte for byte.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from string import ascii_lowercase

import stagebench.explorer as explorer
import stagebench.analysis as analysis
import stagebench.plots as plots
import stagebench.report as report
import stagebench.stats as stats
from stagebench.errors import StagebenchError
from stagebench.files import STAGING_MARK, Owned, atomic_write, file_digest, inventory
from stagebench.metrics import compute
from stagebench.metrics.compute import gain_map
from stagebench.metrics import evaluate, parse_measure
from stagebench.runs import Run, ranked_ids, read_trec_qrels, read_trec_run
from stagebench.table import CeilingCells, DepthCells, LLMCells, StageRow, StageTable

MANIFEST = "manifest.json"
#: files a results folder may hold that no run writes (``stagebench check``'s expected values,
#: committed next to the results; the screenshots ``make report-check`` takes): a new run into
#: the folder carries them over, never deletes them
KEPT_FILES = ("expected.yaml", "plots/explorer.png", "report_screenshot.png")
#: what a manifest must hold to be read
MANIFEST_KEYS = ("stagebench_version", "stages", "evaluation", "dataset", "config", "files")


def _recorded_files(folder: Path) -> dict[str, str] | str:
    try:
        return read_manifest(folder)["files"]
    except StagebenchError as exc:
        return str(exc).removeprefix(f"{folder}: ")


#: the one rule for replacing a results folder (``run``, ``Result.save``): every file in it,
#: at every depth, hidden ones included, is listed in its manifest with the digest it has now
RESULTS = Owned("results folder", MANIFEST, _recorded_files, frozenset(KEPT_FILES))

@dataclass
class Rendered:
    table: StageTable
    comparisons: list[dict]
    text: str
    per_query: dict[str, dict[str, dict[str, float]]]  # stage -> measure -> qid -> value
    queries: list[str]
    written: list[str] = field(default_factory=list)  # files render() wrote, relative to the folder


def stage_letter(i: int) -> str:
    return ascii_lowercase[i] if i < 26 else f"s{i}"


def read_manifest(folder: Path) -> dict:
    """A results folder's manifest; absent, unreadable or not stagebench's is one clear error."""
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise StagebenchError(f"{folder}: not a stagebench results folder (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StagebenchError(f"{mpath}: not a readable stagebench manifest ({exc})") from None
    if not isinstance(manifest, dict) or "stagebench_version" not in manifest or not isinstance(manifest.get("stages"), list):
        raise StagebenchError(f"{mpath}: not a stagebench manifest (no stagebench_version / stages)")
    if not isinstance(manifest.get("files"), dict):
        raise StagebenchError(f"{mpath}: written by an older stagebench ({manifest['stagebench_version']}) that recorded no "
                              "file digests, so nothing in the folder can be verified; run its config again into a "
                              "new folder")  # fmt: skip
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if missing:
        raise StagebenchError(f"{mpath}: not a complete stagebench manifest (no {', '.join(missing)})")
    return manifest


def write_manifest(folder: Path, manifest: dict, written: Iterable[str] | None = None) -> None:
    """Write ``manifest.json`` with the sha256 of every file the folder holds that stagebench
    wrote: ``written`` (relative paths, plus those the manifest already lists), or, when None,
    every file in the folder (a staging folder: nothing in it is anyone else's)."""
    if written is None:
        files = inventory(folder, leave_out={MANIFEST, STAGING_MARK, *KEPT_FILES})
    else:
        rels = sorted({*manifest.get("files", {}), *written} - {MANIFEST, *KEPT_FILES})
        files = {r: file_digest(folder / r) for r in rels if (folder / r).is_file()}
    manifest["files"] = files
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=2, default=str) + "\n")


@dataclass
class RunFolder:
    """A finished results folder, read one way by ``table``, ``check``, ``compare`` and the
    report: the manifest, then - verified against the digests it recorded - the qrels and
    runs, or the stored stage table and per-query values."""

    path: Path
    manifest: dict

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        return cls(Path(path), read_manifest(Path(path)))

    @property
    def stages(self) -> list[str]:
        return [s["name"] for s in self.manifest["stages"]]

    @property
    def metrics(self) -> list[str]:
        """The measure columns, as the alias table spells them."""
        return [parse_measure(m).name for m in self.manifest["evaluation"]["metrics"]]

    def verified(self, rel: str) -> Path:
        """The path of ``rel`` in the folder, after checking it against the manifest: recorded
        there, present, and with the sha256 the manifest holds. Anything else is one error
        naming the file; nothing is ever read unverified or replaced by a fallback."""
        p = self.path / rel
        files = self.manifest["files"]
        if rel not in files:
            raise StagebenchError(f"{p}: not recorded in {self.path / MANIFEST} (no run wrote it there), so it cannot "
                                  "be verified")  # fmt: skip
        if not p.is_file():
            raise StagebenchError(f"{p}: missing; {MANIFEST} records it (the folder is incomplete: run its config "
                                  "again{})".format(", or check the stored table with --stored-table" if rel.startswith(("runs/", "qrels")) else ""))  # fmt: skip
        if file_digest(p) != files[rel]:
            raise StagebenchError(f"{p}: changed after the run (its sha256 differs from the one in {MANIFEST}); "
                                  "run the config again")  # fmt: skip
        return p

    def holds(self, rel: str) -> bool:
        """Whether the manifest records ``rel`` and it is here (a committed folder holds its
        tables but not its runs); reading it still verifies it."""
        return rel in self.manifest["files"] and (self.path / rel).is_file()

    def qrels(self) -> dict:
        return read_trec_qrels(self.verified("qrels.trec"))

    def runs(self) -> dict[str, Run]:
        """Every stage's run and its depth-sweep runs, each file verified first."""
        runs = {}
        for s in self.manifest["stages"]:
            for name in (s["name"], *s.get("depth_runs", [])):
                runs[name] = read_trec_run(self.verified(f"runs/{name}.trec"))
        return runs

    def table(self) -> StageTable:
        return StageTable.from_json(self.verified("stage_table.json").read_text(encoding="utf-8"), self.metrics)

    def texts(self) -> dict:
        return explorer.read_texts(self.verified(explorer.TEXTS_FILE))

    def per_query(self) -> dict[str, dict[str, dict[str, float]]]:
        """stage -> measure -> qid -> value, from per_query.csv (verified), stages in pipeline order."""
        path = self.verified("per_query.csv")
        out: dict[str, dict[str, dict[str, float]]] = {}
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            measures = [c for c in reader.fieldnames or [] if c not in ("stage", "qid")]
            for row in reader:
                values = out.setdefault(row["stage"], {m: {} for m in measures})
                for m in measures:
                    values[m][row["qid"]] = float(row[m])
        return out


def comparisons_for(stages: list[dict], baseline: str) -> list[tuple[str, str]]:
    """Each stage vs the stage(s) before it in the cascade - its inputs, or for a stage
    without inputs the one listed before it - and vs the baseline; no pair twice."""
    names = [s["name"] for s in stages]
    pairs: list[tuple[str, str]] = []
    for i, s in enumerate(stages[1:], start=1):
        for other in [*(s["inputs"] or [names[i - 1]]), baseline]:
            if other != s["name"] and (s["name"], other) not in pairs and (other, s["name"]) not in pairs:
                pairs.append((s["name"], other))
    return pairs


def score_folder(manifest: dict, qrels: dict, runs: dict[str, Run]) -> Rendered:
    """Score every stage of a folder: measures, significance, ceilings, labels; the stage table."""
    ev = manifest["evaluation"]
    rel, gain = ev["relevance_threshold"], ev["gain"]
    stages = manifest["stages"]
    names = [s["name"] for s in stages]
    letters = {n: stage_letter(i) for i, n in enumerate(names)}
    evals = {n: evaluate(qrels, runs[n], ev["metrics"], relevance_threshold=rel, gain=gain) for n in names}
    metric_names = [m.name for m in evals[names[0]].measures]
    queries = evals[names[0]].scored_queries
    label_names = label_names_of(manifest, qrels, unnamed="grade {}")

    # significance: each stage vs the one before it and vs the baseline; Holm per metric
    baseline = ev.get("baseline") or names[0]
    pairs = comparisons_for(stages, baseline)
    comps: list[stats.Comparison] = []
    for m in metric_names:
        family = [stats.compare(a, b, m, [evals[a].per_query[m][q] for q in queries],
                                [evals[b].per_query[m][q] for q in queries], ev["permutations"], ev["seed"])
                  for a, b in pairs]  # fmt: skip
        for c, pt, pr in zip(family, stats.holm([c.p_t for c in family]), stats.holm([c.p_rand for c in family])):
            c.p_t_holm, c.p_rand_holm = pt, pr
        comps += family
    key = "p_rand_holm" if ev["test"] == "randomization" else "p_t_holm"
    better: dict[str, dict[str, list[str]]] = {n: {} for n in names}
    for c in comps:
        if getattr(c, key) < ev["alpha"] and c.mean_a != c.mean_b:
            win, lose = (c.a, c.b) if c.mean_a > c.mean_b else (c.b, c.a)
            better[win].setdefault(c.metric, []).append(letters[lose])

    rows: list[StageRow] = []
    for s in stages:
        n = s["name"]
        e = evals[n]
        ceiling = None
        if s.get("reorders_input") and s["inputs"]:
            depth = int(s["candidate_depth"])
            c = analysis.ceiling(runs[s["inputs"][0]], runs[n], qrels, queries, depth, rel, gain)
            ceiling = CeilingCells(depth=depth, pool_recall=round(c.pool_recall, 6), input_ndcg10=round(c.input, 6),
                                   achieved_ndcg10=round(c.achieved, 6), oracle_ndcg10=round(c.oracle, 6),
                                   ndcg10_change=round(c.achieved - c.input, 6),
                                   headroom_captured=None if c.headroom_captured is None else round(c.headroom_captured, 6))  # fmt: skip
            lost = analysis.lost(runs[s["inputs"][0]], qrels, queries, rel, depth)
        else:
            lost = analysis.lost(runs[n], qrels, queries, rel)
        rows.append(StageRow(
            stage=n, id=letters[n], type=s["type"], inputs=list(s["inputs"]),
            metrics={m: round(v, 6) for m, v in e.means.items()},
            ci95={m: [round(x, 6) for x in stats.bootstrap_ci([e.per_query[m][q] for q in queries], ev["bootstrap"],
                                                              ev["seed"])] for m in metric_names},
            better_than={m: sorted(v) for m, v in better[n].items()}, queries=len(queries),
            queries_without_results=len(e.missing_queries), queries_excluded=e.excluded,
            recall={k: round(v, 6) for k, v in analysis.recall_at(runs[n], qrels, queries, rel).items()},
            ceiling=ceiling, lost=lost,
            top10_labels={k: round(v, 6) for k, v in analysis.top_labels(runs[n], qrels, queries, label_names).items()},
            llm=LLMCells.from_stats(s["stats"]) if (s.get("stats") or {}).get("kind") == "llm" else None,
            depths=depth_cells(s, runs, qrels, queries, rel, gain, ev) if s.get("depth_runs") else None,
        ))  # fmt: skip

    title = f"Stage table: {manifest['config'].get('name', '')}"
    ds = manifest["dataset"]
    first = evals[names[0]]
    scope = ds["corpus_scope"] + (" - only judged documents are indexed, which inflates recall"
                                  if ds["corpus_scope"] == "judged" else "")  # fmt: skip
    notes = [
        f"dataset: {ds['name']} ({ds['documents']:,} documents, corpus scope: {scope})",
        f"queries: {len(queries)} scored = every judged query with a positive grade, for every measure and threshold; "
        f"left out: {first.judged_without_positive} judged with no positive grade, "
        f"{first.unjudged_run_queries} in the runs but not judged",
        report.conventions_line(rel, gain),
        f"significance: ^x = significantly better than stage x ({'paired randomization test, ' + str(ev['permutations']) + ' permutations' if ev['test'] == 'randomization' else 'paired t-test'}, "
        f"seed {ev['seed']}, Holm-Bonferroni over the {len(pairs)} comparisons of each metric, alpha {ev['alpha']}); "
        f"each stage is compared with its inputs (a retriever: with the stage listed before it) and with the baseline ({baseline})",
        "ceiling: for rerankers, N = candidate depth, pool R@N = recall of the candidates it received, oracle = nDCG@10 of "
        "their ideal order; lost = queries with no relevant document among the stage's candidates",
    ]  # fmt: skip
    if any(r.llm for r in rows):
        notes.append("LLM reranking: windows are model calls; ok = a complete permutation, repaired = duplicates or "
                     "unknown ids dropped / missing ones appended, fallback and failed = the window kept its input "
                     "order (docs/llm.md)")  # fmt: skip
    g = gain_map(gain)
    table = StageTable(rows, metric_names, title, notes, {"gain": g.as_json(), "gain_map": g.describe(),
                                                          "relevance_threshold": rel})  # fmt: skip
    per_query = {n: evals[n].per_query for n in names}
    return Rendered(table, [c.as_dict() for c in comps], report.render_text(table), per_query, queries)


def depth_cells(s: dict, runs: dict[str, Run], qrels: dict, queries: list[str], rel: int, gain, ev: dict) -> list[DepthCells]:
    """A reranker's depth sweep: per depth, its ceiling, what it achieved, whether that differs
    significantly from its input (paired randomization test, Holm over the depths), and its cost."""
    inp = runs[s["inputs"][0]]
    st = s.get("stats") or {}
    pairs = st.get("pairs", {})
    in_q = {q: compute.ndcg(ranked_ids(inp.get(q, {})), qrels[q], 10, gain) for q in queries}
    rows = []
    for name in s["depth_runs"]:
        n = int(name.rsplit("@", 1)[1])
        c = analysis.ceiling(inp, runs[name], qrels, queries, n, rel, gain)
        out_q = [compute.ndcg(ranked_ids(runs[name].get(q, {})), qrels[q], 10, gain) for q in queries]
        cmp = stats.compare(name, s["inputs"][0], "nDCG@10", out_q, [in_q[q] for q in queries], ev["permutations"],
                            ev["seed"])  # fmt: skip
        rows.append((n, c, cmp))
    holm = stats.holm([cmp.p_rand for _, _, cmp in rows])
    return [DepthCells(depth=n, pool_recall=round(c.pool_recall, 6), input_ndcg10=round(c.input, 6),
                       achieved_ndcg10=round(c.achieved, 6), oracle_ndcg10=round(c.oracle, 6),
                       headroom_captured=None if c.headroom_captured is None else round(c.headroom_captured, 6),
                       p_value=float(f"{p:.4g}"), significant=bool(p < ev["alpha"] and cmp.mean_a != cmp.mean_b),
                       pairs=int(pairs.get(str(n), 0)))
            for (n, c, cmp), p in zip(rows, holm)]  # fmt: skip


def render(folder: str | Path, rf: RunFolder | None = None) -> Rendered:
    """Score, analyse and write every table, plot and the report of a run folder (its runs,
    qrels and texts verified against the manifest first)."""
    folder = Path(folder)
    rf = rf or RunFolder.open(folder)
    manifest, qrels, runs, texts = rf.manifest, rf.qrels(), rf.runs(), rf.texts()
    rendered = score_folder(manifest, qrels, runs)
    table = rendered.table
    names = [s["name"] for s in manifest["stages"]]

    def write(rel: str, data) -> None:
        atomic_write(folder / rel, data)
        rendered.written.append(rel)

    write("stage_table.txt", rendered.text)
    write("stage_table.md", report.render_markdown(table))
    write("stage_table.csv", report.render_csv(table))
    write("stage_table.json", table.to_json())
    write("significance.json", json.dumps(rendered.comparisons, indent=2) + "\n")
    write("per_query.csv", report.per_query_csv(names, rendered.per_query, rendered.queries))

    rel = manifest["evaluation"]["relevance_threshold"]
    retrieval = [s for s in manifest["stages"] if not s.get("reorders_input")]
    max_k = max((max((len(v) for v in runs[s["name"]].values()), default=1) for s in retrieval), default=1)
    curves = {s["name"]: analysis.recall_curve(runs[s["name"]], qrels, rendered.queries, rel, max_k) for s in retrieval}
    marks = {s["name"]: int(s["candidate_depth"]) for s in manifest["stages"] if s.get("reorders_input")}
    images = [("metrics.png", plots.metric_bars(table.rows, table.metrics)),
              ("recall_at_k.png", plots.recall_curves(curves, marks)), ("top10_labels.png", plots.label_distribution(table.rows))]  # fmt: skip
    if any(r.ceiling for r in table.rows):
        images.insert(2, ("ceiling.png", plots.ceiling_chart(table.rows)))
    images += [(f"depth_{r.stage}.png", plots.depth_curve(r)) for r in table.rows if r.depths]
    if len(table.rows) > 1:
        points = [(n, c, q, f) for n, c, q, _, f in report.quality_cost(table, manifest["stages"])]
        if all(c > 0 for _, c, _, _ in points):
            images.append(("quality_cost.png", plots.quality_cost(points)))
    for name, png in images:
        write(f"plots/{name}", png)
    write("report.html", report.render_html(table, rendered.comparisons, images, manifest["stages"],
                                            explorer_data(manifest, qrels, runs, rendered, texts)))  # fmt: skip
    return rendered


def rerender(folder: str | Path) -> Rendered:
    """``stagebench table``: render a finished folder again and record the new files' digests."""
    rf = RunFolder.open(folder)
    rendered = render(rf.path, rf)
    write_manifest(rf.path, rf.manifest, rendered.written)
    return rendered


def query_views(manifest: dict, qrels: dict, runs: dict[str, Run], rendered: Rendered,
                texts: dict) -> tuple[list[explorer.QueryView], str, dict[int, str]]:  # fmt: skip
    """Every scored query's view (explorer.build), the primary measure, and the grade labels."""
    metric = explorer.primary_measure(rendered.table.metrics)
    views = explorer.build(manifest["stages"], runs, qrels, rendered.per_query, metric, rendered.queries,
                           manifest["evaluation"]["relevance_threshold"], texts)  # fmt: skip
    return views, metric, label_names_of(manifest, qrels)


def explorer_data(manifest: dict, qrels: dict, runs: dict[str, Run], rendered: Rendered, texts: dict) -> tuple[dict, dict]:
    views, metric, labels = query_views(manifest, qrels, runs, rendered, texts)
    return explorer.as_json(views, manifest["stages"], metric, labels, texts), explorer.wins_and_losses(views)


def label_names_of(manifest: dict, qrels: dict, unnamed: str = "{}") -> dict[int, str]:
    """grade -> display label (E/S/C/I for ESCI); a dataset without names (e.g. BEIR): each grade
    formatted with ``unnamed``, highest first."""
    names = {int(k): v for k, v in manifest["dataset"].get("label_names", {}).items()}
    return names or {g: unnamed.format(g) for g in sorted({g for docs in qrels.values() for g in docs.values()}, reverse=True)}


def show_query(folder: str | Path, qid: str) -> str:
    """``stagebench show``: one query's view in text - each stage's top 10 with grades and moves,
    and what each reranker never saw - from a finished run folder (only the primary measure is scored)."""
    rf = RunFolder.open(folder)
    manifest, qrels, runs = rf.manifest, rf.qrels(), rf.runs()
    ev = manifest["evaluation"]
    metric = explorer.primary_measure([parse_measure(m).name for m in ev["metrics"]])
    names = [s["name"] for s in manifest["stages"]]
    per_query = {n: evaluate(qrels, runs[n], [metric], relevance_threshold=ev["relevance_threshold"],
                             gain=ev["gain"]).per_query for n in names}  # fmt: skip
    scored = per_query[names[0]][metric]
    if qid not in scored:
        near = sorted(scored)[:5]
        why = "is judged but has no relevant document" if qid in qrels else "is not in the qrels"
        raise StagebenchError(f"{folder}: query {qid!r} {why}, so it is not scored (scored: {len(scored)} queries, "
                              f"e.g. {', '.join(near)})")  # fmt: skip
    texts = rf.texts()
    view = explorer.build(manifest["stages"], runs, qrels, per_query, metric, [qid], ev["relevance_threshold"], texts)[0]
    return explorer.render_text(view, metric, label_names_of(manifest, qrels), texts.get("docs", {}))
