"""The stage table rendered: text, Markdown and CSV (one layout, :func:`tables`), the per-query
CSV, and the cost table. Every renderer is a pure function of a
:class:`~stagebench.table.StageTable` (scored by :mod:`stagebench.results.scoring`), so
re-rendering from saved runs reproduces the files byte for byte. The JSON form is
:meth:`StageTable.to_json`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict

from stagebench.record import JudgeRecord, LLMStats, RerankStats, StageRecord
from stagebench.judgments.agreement import Agreement
from stagebench.results.check import CheckRow
from stagebench.results.compare import Comparison
from stagebench.results.matrix import MatrixTable
from stagebench.results.segments import SegmentTable
from stagebench.table import CeilingCells, DepthCells, LLMCells, StageRow, StageTable, measure_key
from stagebench.stats import format_p, latency_percentiles


def _f(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def headroom_cell(c: CeilingCells) -> str:
    """The share of headroom captured, or - when the oracle leaves (almost) no room above the
    input - "no room" with the change in the ceiling measure, so a regression is never hidden by a blank."""
    if c.headroom_captured is not None:
        return _pct(c.headroom_captured)
    return f"no room ({c.change:+.4f})"


def _depth_cols(rows: Sequence[StageRow]) -> list[str]:
    return sorted({k for r in rows for k in r.recall}, key=lambda k: int(k.split("@")[1]))


def tables(table: StageTable) -> list[tuple[str, list[str], list[list[str]], int]]:
    """The report's tables as (title, header, body, number of leading text columns) with cells
    already formatted; text columns are left-aligned, the others right-aligned."""
    rows, metrics = table.rows, table.metrics
    main = [[r.id, r.stage + (" (!)" if r.llm is not None and r.llm.failed else ""), r.type, ",".join(r.inputs) or "-",
             *[main_cell(r, m) for m in metrics], str(r.queries)] for r in rows]  # fmt: skip
    depth_cols = _depth_cols(rows)
    ceil = []
    for r in rows:
        c = r.ceiling
        ceil.append([r.stage, *[_f(r.recall.get(k)) for k in depth_cols], str(r.lost),
                     *([str(c.depth), _f(c.pool_recall), _f(c.input), _f(c.achieved),
                        _f(c.oracle), headroom_cell(c)] if c else ["-"] * 6)])  # fmt: skip
    labels = list(rows[0].top10_labels) if rows else []
    lab = [[r.stage, *[_pct(r.top10_labels[k]) for k in labels]] for r in rows]
    ci = [[r.stage, *[f"[{r.ci95[m][0]:.4f}, {r.ci95[m][1]:.4f}]" for m in metrics]] for r in rows]
    viewed = [m for m in metrics if all(m in r.bounds for r in rows)]  # measures the holes can move (not Judged@k)
    cm = table.ceiling_measure
    out = [
        ("Stage metrics, unjudged documents as irrelevant (^x: significantly better than stage x; x?: significant, "
         "but the bounds leave the order open)", ["id", "stage", "type", "inputs", *metrics, "queries"], main, 4),
        ("Recall ceiling and reranking headroom",
         ["stage", *depth_cols, "lost", "N", "pool R@N", f"input {cm}", f"achieved {cm}", f"oracle {cm}",
          "headroom captured"], ceil, 1),
        ("Top-10 labels (share of top-10 positions)", ["stage", *[f"{k}" for k in labels]], lab, 1),
        ("95% bootstrap confidence intervals of the means", ["stage", *metrics], ci, 1),
    ]  # fmt: skip
    if viewed:
        grade = table.evaluation.get("top_grade")
        out[1:1] = [
            ("Judged only: unjudged documents removed before the cut at k, as trec_eval -J (^x: significantly better "
             "than stage x in this view)", ["id", "stage", *viewed],
             [[r.id, r.stage, *[_f(r.judged_only[m]) + _marks(r.judged_only_better_than.get(m, [])) for m in viewed]]
              for r in rows], 2),
            (f"Bounds: every hole irrelevant .. every hole at the top grade{'' if grade is None else f' ({grade})'} "
             "(~x: the bounds overlap stage x's, so the judgments do not settle their order)", ["id", "stage", *viewed],
             [[r.id, r.stage, *[bounds_cell(r, m) for m in viewed]] for r in rows], 2),
        ]  # fmt: skip
    head = head_rows(rows, metrics)
    if head:  # the question a team came with leads: two stages over one input, or the pairs it named
        estimated = len(head[0]) > 7
        out.insert(0, ("Head to head: stages over the same input and the pairs the config names (a - b: the difference "
                       "of the means, its bootstrap interval of the per-query differences adjusted as the p is (simultaneous over "
                       "the comparisons Holm is over: level 1 - alpha / comparisons, Bonferroni), p Holm-adjusted as the marks, "
                       "wins/ties/losses over the queries; holes: whether the bounds settle the order"
                       + ("; estimated view: the difference with every hole graded, from the sampling round, and its 95% "
                          "interval" if estimated else "") + ")",
                       ["a - b", "measure", "difference", "interval (adjusted)", "p (Holm)", "W/T/L", "holes",
                        *(["estimated view"] if estimated else [])], head, 2))  # fmt: skip
    for r in rows:
        if r.depths:
            out.append((f"Depth sweep: {r.stage} (one scoring pass at the largest depth; its own top {r.ceiling.depth if r.ceiling else '-'} "
                        "is the row above)", depth_columns(cm), [depth_cells(c) for c in r.depths], 0))  # fmt: skip
    llm = [(r.stage, r.llm) for r in rows if r.llm is not None]
    if llm:
        out.append(("LLM reranking: how each call's answer was read (ok / repaired / low mass / no answer used), tokens, cost",
                    [*LLM_COLUMNS], [llm_cells(stage, c) for stage, c in llm], 2))  # fmt: skip
    return out


def head_rows(rows: Sequence[StageRow], metrics: Sequence[str]) -> list[list[str]]:
    """The head-to-head lines (:attr:`StageRow.compared`), a pair's measures together."""
    out = []
    for r in rows:
        for other, by in r.compared.items():
            for m in metrics:
                c = by.get(m)
                if c is None:
                    continue
                e = c.get("estimated")
                out.append([f"{r.stage} - {other}", m, f"{c['difference']:+.4f}", f"[{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}] ({100 * c['ci_level']:g}%)",
                            format_p(c["p"]), f"{c['wins']}/{c['ties']}/{c['losses']}", c["holes"],
                            "-" if e is None else f"{e['difference']:+.4f} [{e['ci95'][0]:+.4f}, {e['ci95'][1]:+.4f}] "
                            + ("settled" if e["settled"] else "open")])  # fmt: skip
    if out and all(row[-1] == "-" for row in out):  # no sampling round's estimate: no column for it
        out = [row[:-1] for row in out]
    return out


def _marks(letters: Sequence[str]) -> str:
    return "^" + "".join(letters) if letters else ""


def main_cell(r: StageRow, m: str) -> str:
    """A mean with its significance marks; a mark whose order the bounds leave open carries a "?"."""
    open_ = set(r.unsettled.get(m, []))
    marks = "".join(x + ("?" if x in open_ else "") for x in r.better_than.get(m, []))
    return _f(r.metrics[m]) + ("^" + marks if marks else "")


def bounds_cell(r: StageRow, m: str) -> str:
    lo, hi = r.bounds[m]
    return f"[{lo:.4f}, {hi:.4f}]" + ("~" + "".join(r.unsettled[m]) if r.unsettled.get(m) else "")


def depth_columns(measure: str) -> list[str]:
    """The depth sweep's columns, the values named after the ceiling measure."""
    return ["N", "pool R@N", f"input {measure}", f"achieved {measure}", "change", "p (Holm)", f"oracle {measure}",
            "headroom captured", "pairs"]  # fmt: skip


def depth_cells(c: DepthCells) -> list[str]:
    """One depth: the change is marked * when significant (paired randomization test, Holm over the depths)."""
    change = c.achieved - c.input
    headroom = _pct(c.headroom_captured) if c.headroom_captured is not None else f"no room ({change:+.4f})"
    return [str(c.depth), _f(c.pool_recall), _f(c.input), _f(c.achieved),
            f"{change:+.4f}" + ("*" if c.significant else ""), format_p(c.p_value), _f(c.oracle), headroom,
            f"{c.pairs:,}"]  # fmt: skip


LLM_COLUMNS = ("stage", "method", "calls", "ok", "repaired", "low mass", "fallback", "failed",
               "repairs (dup/range/missing)", "label mass", "prompt tokens", "completion tokens", "cost")  # fmt: skip


def llm_cells(stage: str, c: LLMCells) -> list[str]:
    """ok/repaired/low mass/fallback as shares of calls; failed = requests that failed after retries."""
    n = max(c.windows, 1)
    r = c.repairs
    return [stage, c.method, str(c.windows), _pct(c.ok / n), _pct(c.repaired / n), _pct(c.low_mass / n),
            _pct(c.fallback / n), str(c.failed), f"{r.get('duplicate', 0)}/{r.get('out_of_range', 0)}/{r.get('missing', 0)}",
            "-" if c.label_mass is None else _pct(c.label_mass), f"{c.prompt_tokens:,}",
            f"{c.completion_tokens:,}", "-" if c.cost is None else f"{c.cost:.4f}"]  # fmt: skip


def render_text(table: StageTable) -> str:
    out = [table.title, *table.notes]
    for sub, head, body, n_text in tables(table):
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]

        def fmt(cells, widths=widths, n_text=n_text):
            return "  ".join(c.ljust(w) if i < n_text else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()  # fmt: skip

        out += ["", sub, fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)]
    return "\n".join(out) + "\n"


def render_markdown(table: StageTable) -> str:
    out = [f"## {table.title}", "", *[f"{n}  " for n in table.notes]]
    for sub, head, body, _ in tables(table):
        out += ["", f"### {sub}", "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        out += ["| " + " | ".join(c.replace("^", "<sup>", 1) + ("</sup>" if "^" in c else "") for c in b) + " |"
                for b in body]  # fmt: skip
    return "\n".join(out) + "\n"


def render_csv(table: StageTable) -> str:
    rows, metrics = table.rows, table.metrics
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    depth_cols = _depth_cols(rows)
    viewed = [m for m in metrics if rows and all(m in r.bounds for r in rows)]
    k = measure_key(table.ceiling_measure)
    w.writerow(["stage", "id", "type", "inputs", *metrics, *[f"{m}_ci_low" for m in metrics], *[f"{m}_ci_high" for m in metrics],
                *[f"better_than_{m}" for m in metrics], "queries", "queries_without_results",
                *depth_cols, "lost", "pool_depth", "pool_recall", f"input_{k}", f"achieved_{k}", f"oracle_{k}",
                "headroom_captured", f"{k}_change", *[f"{m}_judged_only" for m in viewed],
                *[f"judged_only_better_than_{m}" for m in viewed], *[f"{m}_low" for m in viewed],
                *[f"{m}_high" for m in viewed], *[f"unsettled_{m}" for m in viewed]])  # fmt: skip
    for r in rows:
        c = {} if r.ceiling is None else asdict(r.ceiling)
        w.writerow([r.stage, r.id, r.type, " ".join(r.inputs), *[f"{r.metrics[m]:.6f}" for m in metrics],
                    *[f"{r.ci95[m][0]:.6f}" for m in metrics], *[f"{r.ci95[m][1]:.6f}" for m in metrics],
                    *["".join(r.better_than.get(m, [])) for m in metrics], r.queries, r.queries_without_results,
                    *[f"{r.recall[k]:.6f}" if k in r.recall else "" for k in depth_cols], r.lost,
                    *[("" if c.get(k) is None else (f"{c[k]:.6f}" if isinstance(c[k], float) else c[k]))
                      for k in ("depth", "pool_recall", "input", "achieved", "oracle", "headroom_captured", "change")],
                    *[f"{r.judged_only[m]:.6f}" for m in viewed],
                    *["".join(r.judged_only_better_than.get(m, [])) for m in viewed],
                    *[f"{r.bounds[m][0]:.6f}" for m in viewed], *[f"{r.bounds[m][1]:.6f}" for m in viewed],
                    *["".join(r.unsettled.get(m, [])) for m in viewed]])  # fmt: skip
    if any(r.llm for r in rows):  # the LLM stages' window outcomes, as extra rows of their own
        w.writerow([])
        w.writerow(["stage", "llm_method", "llm_calls", "llm_ok", "llm_repaired", "llm_low_mass", "llm_fallback",
                    "llm_failed", "llm_repair_duplicate", "llm_repair_out_of_range", "llm_repair_missing",
                    "llm_label_mass", "llm_prompt_tokens", "llm_completion_tokens", "llm_cost"])  # fmt: skip
        for r in rows:
            if r.llm is not None:
                c = r.llm
                w.writerow([r.stage, c.method, c.windows, c.ok, c.repaired, c.low_mass, c.fallback, c.failed,
                            c.repairs.get("duplicate", 0), c.repairs.get("out_of_range", 0), c.repairs.get("missing", 0),
                            "" if c.label_mass is None else f"{c.label_mass:.4f}", c.prompt_tokens,
                            c.completion_tokens, "" if c.cost is None else f"{c.cost:.6f}"])  # fmt: skip
    return buf.getvalue()


def per_query_csv(stage_order: Sequence[str], per_query: dict[str, dict[str, dict[str, float]]], queries: Sequence[str]) -> str:
    """per_query: stage -> measure -> qid -> value."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = list(per_query[stage_order[0]])
    w.writerow(["stage", "qid", *names])
    for s in stage_order:
        for q in queries:
            w.writerow([s, q, *[f"{per_query[s][n][q]:.6f}" for n in names]])
    return buf.getvalue()


def cost_table(stages: Sequence[StageRecord]) -> tuple[list[str], list[list[str]]]:
    """Per stage: cached or computed in this run, wall time now, compute time and peak RSS when computed,
    and the stage's own latency serving one query at a time (p50 / p95 / p99 over the sampled queries).
    Machine-dependent, so it is kept out of the stage table files (which are deterministic)."""
    measured = [len(s.latency_ms) for s in stages if s.latency_ms]
    over = f" ({max(measured)} queries)" if measured and min(measured) == max(measured) else ""
    head = ["stage", "this run", "time (s)", "compute time (s)", "peak RSS when computed (MB)",
            f"one query at a time p50 / p95 / p99 (ms){over}", "LLM wall s/query", "LLM retries",
            "depth sweep: scoring s per depth"]  # fmt: skip
    body = []
    for s in stages:
        comp, peak, st = s.computed_seconds, s.computed_peak_rss_mb, s.stats
        llm = st if isinstance(st, LLMStats) else None
        per_depth = st.seconds if s.depth_runs and isinstance(st, (LLMStats, RerankStats)) else None
        lat = "-" if not s.latency_ms else " / ".join(f"{v:.1f}" for v in latency_percentiles(list(s.latency_ms.values())))
        body.append([s.name, s.status, f"{s.seconds:.2f}", "-" if comp is None else f"{comp:.1f}",
                     "-" if peak is None else f"{peak:.0f}", lat, "-" if llm is None or llm.wall_seconds is None else f"{llm.seconds_per_query:.2f}",
                     "-" if llm is None else str(llm.retries),
                     "-" if not per_depth else ", ".join(f"{n}: {v:.1f}" for n, v in sorted(per_depth.items()))])  # fmt: skip
    return head, body


def check_text(rows: Sequence[CheckRow], folder: str, expected_path: str, source: str) -> str:
    def cell(v) -> str:
        if v is None:
            return "missing"
        if isinstance(v, float):
            return f"{v:.6f}"
        return str(v)[:16] + ("..." if len(str(v)) > 16 else "")

    head = ["stage", "metric", "expected", "got", "diff", "tolerance", "status"]
    body = [[r.stage, r.metric, cell(r.expected), cell(r.got), "-" if r.diff is None else f"{r.diff:+.6f}",
             "-" if r.tolerance is None else f"{r.tolerance:g}", r.status] for r in rows]  # fmt: skip
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = [f"check {folder} against {expected_path} (metrics {source})",
             "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(), "  ".join("-" * w for w in widths)]  # fmt: skip
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
    counts = {s: sum(r.status == s for r in rows) for s in ("OK", "OK-within-tolerance", "FAIL")}
    verdict = "FAIL" if counts["FAIL"] else "OK"
    lines.append(f"{verdict}: {len(rows)} values: {counts['OK']} OK, {counts['OK-within-tolerance']} OK-within-tolerance, "
                 f"{counts['FAIL']} FAIL")  # fmt: skip
    return "\n".join(lines) + "\n"


def comparison_text(c: Comparison) -> str:
    """``stagebench compare``'s output: the folders, what was compared, one row per stage and measure."""
    lines = [f"A = {c.a}", f"B = {c.b}"]
    if c.judgments == "each":
        lines.append("each folder under its own judgments (--judgments each): a difference is the stage's change AND "
                     "the judgments' change (a judging round's before and after), not the stage's alone")  # fmt: skip
    if not c.same_query_sets:
        lines.append(f"different query sets: A scored {c.queries_a}, B scored {c.queries_b}; only the {c.queries} common "
                     "queries are compared (means below are over those)")  # fmt: skip
    lines.append(f"paired tests on the {c.queries} queries both scored; p-values Holm-corrected across the "
                 f"{len(c.stages)} matching stages of each measure; * = randomization p < {c.alpha}")  # fmt: skip
    if c.only_measures:
        lines.append(f"measures in only one folder (not compared): {', '.join(c.only_measures)}")
    if c.only_stages:
        lines.append(f"stages in only one folder (not compared): {', '.join(c.only_stages)}")
    rows = [[r.stage, r.measure, f"{r.mean_a:.4f}", f"{r.mean_b:.4f}", f"{r.delta:+.4f}", format_p(r.p_rand),
             format_p(r.p_t), f"{r.wins}/{r.ties}/{r.losses}", "*" if r.significant else ""] for r in c.rows]  # fmt: skip
    head = ["stage", "measure", "A", "B", "B-A", "p rand (Holm)", "p t (Holm)", "B win/tie/loss", ""]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()  # noqa: E731
    lines += ["", fmt(head), "  ".join("-" * w for w in widths), *map(fmt, rows)]
    return "\n".join(lines) + "\n"


def _grid(head: list[str], body: list[list[str]], n_text: int = 1) -> list[str]:
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i < n_text else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)]


def _order(means: dict[str, float]) -> str:
    """Stages best first with their means, "=" between tied ones."""
    ranked = sorted(means, key=lambda s: -means[s])
    out = f"{ranked[0]} {means[ranked[0]]:.3f}"
    for prev, s in zip(ranked, ranked[1:]):
        out += (" = " if means[s] == means[prev] else " > ") + f"{s} {means[s]:.3f}"
    return out


def judge_text(record: JudgeRecord, agreement: Agreement) -> str:
    """The judge: who, which pairs, how its answers were read, what it cost, and its agreement with
    the human labels (``judge/agreement.txt``, and report.html's judge section)."""
    p, o = record.params, record.outcomes
    n = max(sum(o.values()), 1)
    llm = record.identity.get("llm", {})
    where = llm.get("base_url") or f"in process, {llm.get('precision', '?')} on {llm.get('device', '?')}"
    cost = "-" if record.cost is None else f"{record.cost:.4f}"
    if p.get("backend") == "rules":
        spec = record.identity.get("spec", {})
        who = (f"Rules judge: the synthetic generator's own rules (seed {spec.get('seed')}, {spec.get('n_products')} "
               "products): a perfect judge of this dataset, so the judge-filled table is its true table")  # fmt: skip
    else:
        who = (f"LLM judge: {p.get('model')} ({p.get('backend')}, {where}); prompt template "
               f"{record.identity.get('prompt_template')}"
               f"{' (from ' + str(p.get('prompt')) + ')' if p.get('prompt') else ' (built in)'}; temperature {p.get('temperature')}")  # fmt: skip
    lines = [
        who,
        f"pairs: {record.holes:,} unjudged (the top {record.depth} of {', '.join(record.stages)}, pooled) + {record.sample:,} "
        f"judged (the agreement sample, seed {p.get('sample_seed')}); {record.from_cache:,} answers from the cache",
        f"parse health: ok {_pct(o.get('ok', 0) / n)}, repaired {_pct(o.get('repaired', 0) / n)}, unusable "
        f"{_pct(o.get('unusable', 0) / n)}, failed {o.get('failed', 0)} (failed and unusable pairs stay holes)",
        f"cost: {record.prompt_tokens:,} prompt + {record.completion_tokens:,} completion tokens, {record.retries} retries, "
        f"model {record.model_seconds:.1f} s, wall {record.seconds:.1f} s this run, price {cost}",
        f"reproducibility: {record.reproducibility or '-'}",
        "",
        f"Agreement with the human labels on {agreement.pairs} judged pairs graded blind "
        f"({agreement.unusable} without a usable grade, left out)",
    ]  # fmt: skip
    names = [record.scale.get(g, str(g)) for g in agreement.grades]
    body = [[f"{names[i]} (human)", *map(str, row), str(sum(row))] for i, row in enumerate(agreement.confusion)]
    body.append(["total", *[str(sum(r[j] for r in agreement.confusion)) for j in range(len(names))],
                 str(agreement.pairs)])  # fmt: skip
    lines += _grid(["human \\ judge", *names, "total"], body)
    f3 = lambda v: "-" if v is None else f"{v + 0.0:.3f}".replace("-0.000", "0.000")  # noqa: E731
    ci = "" if not agreement.weighted_kappa_ci else f" [{f3(agreement.weighted_kappa_ci[0])}, {f3(agreement.weighted_kappa_ci[1])}]"
    lines.append(f"exact agreement {'-' if agreement.exact is None else _pct(agreement.exact)}; Cohen's kappa "
                 f"{f3(agreement.kappa)}; linear-weighted {f3(agreement.weighted_kappa)}{ci} (95% bootstrap, "
                 f"{agreement.bootstrap} resamples, seed {agreement.seed}); quadratic-weighted {f3(agreement.quadratic_kappa)}")  # fmt: skip
    if agreement.orders:
        lines += ["", "Stage order on the sample (each stage scored against the sampled pairs' labels alone): human "
                      "grades against the judge's (tau -: undefined, every stage tied on one side)"]  # fmt: skip
        body = [[od.measure, _order(od.human), _order(od.judge), f3(od.tau)] for od in agreement.orders]
        lines += _grid(["measure", "human order", "judge order", "Kendall tau-b"], body, 3)
    return "\n".join(lines) + "\n"


def segment_grid(t: SegmentTable, measure: str) -> tuple[list[str], list[list[str]]]:
    """The segments of ``t`` for one measure: queries, each stage's mean, each change against an input
    (``*``: Holm-corrected p below alpha; ``n/a``: too few queries to test), the stage order."""
    pairs = [(c.stage, c.against) for c in t.segments[0].changes[measure]] if t.segments else []
    head = ["segment", "queries", *t.stages, *(f"{s} vs {i}" for s, i in pairs), "order"]
    body = []
    for seg in t.segments:
        cells = [seg.label, str(seg.queries), *(f"{seg.means[s][measure]:.4f}" for s in t.stages)]
        for c in seg.changes[measure]:
            test = "(too few)" if c.p_holm is None else f"(p {c.p_holm:.2g}){'*' if c.significant(t.alpha) else ''}"
            cells.append(f"{c.delta:+.4f} {test}")
        cells.append(_order({s: seg.means[s][measure] for s in t.stages}))
        body.append(cells)
    return head, body


def segments_caption(t: SegmentTable, measure: str) -> str:
    tested = sum(c.p is not None for seg in t.segments for c in seg.changes[measure])
    return (f"Segments: {t.describe} ({measure}; each stage against its input, paired randomization test, "
            f"{t.permutations} permutations, seed {t.seed}, p Holm-corrected over the {tested} tested (segment, stage, "
            f"input); * = p < {t.alpha}; segments of fewer than {t.min_queries} queries are not tested)")  # fmt: skip


def segments_text(t: SegmentTable, measure: str) -> str:
    head, body = segment_grid(t, measure)
    extra = [f"{t.unassigned} scored queries have no segment"] if t.unassigned else []
    return "\n".join([segments_caption(t, measure), *extra, *t.notes, *_grid(head, body, 1)]) + "\n"


def segments_markdown(t: SegmentTable, measure: str) -> str:
    head, body = segment_grid(t, measure)
    extra = [f"{t.unassigned} scored queries have no segment  "] if t.unassigned else []
    lines = [segments_caption(t, measure) + "  ", *extra, *(n + "  " for n in t.notes), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(b) + " |" for b in body)]  # fmt: skip
    return "\n".join(lines) + "\n"


def segments_csv(found: Sequence[SegmentTable]) -> str:
    """One row per (segmentation, segment, stage, measure): the mean, and the change against each
    input (blank for a stage without inputs)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["by", "segment", "queries", "stage", "measure", "mean", "against", "delta", "p", "p_holm"])
    for t, seg in ((t, seg) for t in found for seg in t.segments):
        for m in t.measures:
            changes = {c.stage: [] for c in seg.changes[m]}
            for c in seg.changes[m]:
                changes[c.stage].append(c)
            for s in t.stages:
                for c in changes.get(s) or [None]:
                    w.writerow([t.by, seg.label, seg.queries, s, m, f"{seg.means[s][m]:.6f}",
                                *(["", "", "", ""] if c is None else [c.against, f"{c.delta:.6f}",
                                  "" if c.p is None else f"{c.p:.6f}", "" if c.p_holm is None else f"{c.p_holm:.6f}"])])  # fmt: skip
    return buf.getvalue()


def matrix_caption(t: MatrixTable) -> str:
    oracle = (f"; {t.oracle}: a first stage's candidates with every relevant product put in at seeded ranks, as deep as "
              "the reranker's top N (it reads the judgments: an upper bound on the pool, not a retriever)") if t.oracle else ""  # fmt: skip
    return (f"Reranker by pool: each reranker over each candidate pool, {t.measure} (change against the pool; * "
            "significantly better, ! significantly worse, Holm over the stage table's comparisons) and headroom captured "
            f"(of the pool's top N ideally ordered); the pool columns as the first reranker read it{oracle}")  # fmt: skip


def matrix_grid(t: MatrixTable) -> tuple[list[str], list[list[str]]]:
    """Rows: the pools, with their own level; columns: each reranker's value in the ceiling measure and headroom
    captured."""
    head = ["pool", f"pool {t.measure}", "pool R@N"]
    for r in t.rerankers:
        head += [f"{r} {t.measure}", f"{r} headroom"]
    body = []
    for p in t.pools:
        first = t.cell(t.rerankers[0], p)
        row = [p, _f(first.input), f"{_f(first.pool_recall)} @{first.depth}"]
        for r in t.rerankers:
            c = t.cell(r, p)
            mark = "*" if c.better_than_input else "!" if c.worse_than_input else ""
            room = _pct(c.headroom_captured) if c.headroom_captured is not None else "no room"
            row += [f"{_f(c.value)} ({c.value - c.input:+.4f}){mark}", room]
        body.append(row)
    return head, body


def matrix_text(t: MatrixTable) -> str:
    head, body = matrix_grid(t)
    return "\n".join([matrix_caption(t), *_grid(head, body, 1)]) + "\n"


def matrix_markdown(t: MatrixTable) -> str:
    head, body = matrix_grid(t)
    rows = [head, ["---"] + ["---:"] * (len(head) - 1), *body]
    return "\n".join([matrix_caption(t), "", *("| " + " | ".join(r) + " |" for r in rows)]) + "\n"


def matrix_csv(t: MatrixTable) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    fields = list(t.cells[0].as_dict(t.measure)) if t.cells else []
    w.writerow(fields)
    for c in t.cells:
        w.writerow(["" if v is None else f"{v:.6f}" if isinstance(v, float) else v for v in c.as_dict(t.measure).values()])
    return buf.getvalue()
