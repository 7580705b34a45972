"""PNG plots of a run (matplotlib, Agg backend, deterministic bytes: no timestamps)."""

from __future__ import annotations

import io
from pathlib import Path
from collections.abc import Sequence

import numpy as np

from stagebench.optional import need
from stagebench.results.cost import CostPoint
from stagebench.judgments.incompleteness import Incompleteness
from stagebench.results.matrix import MatrixTable
from stagebench.results.segments import BUILT_IN, SegmentTable
from stagebench.table import StageRow

_METADATA = {"Software": None}


def _fig():
    """pyplot on the non-interactive Agg backend, chosen when the first plot is drawn."""
    need("matplotlib", "plots").use("Agg", force=True)
    return need("matplotlib.pyplot", "plots")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata=_METADATA)
    _fig().close(fig)
    return buf.getvalue()


def metric_bars(rows: Sequence[StageRow], metrics: Sequence[str]) -> bytes:
    plt = _fig()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(metrics) + 2), 4))
    width = 0.8 / max(len(rows), 1)
    x = np.arange(len(metrics))
    for i, r in enumerate(rows):
        vals = [r.metrics[m] for m in metrics]
        lo = [r.metrics[m] - r.ci95[m][0] for m in metrics]
        hi = [r.ci95[m][1] - r.metrics[m] for m in metrics]
        ax.bar(x + i * width, vals, width, yerr=[lo, hi], capsize=3, label=f"{r.id}: {r.stage}")
    ax.set_xticks(x + width * (len(rows) - 1) / 2, metrics)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean (95% bootstrap CI)")
    ax.set_title("Metrics per stage")
    ax.legend(fontsize=8)
    return _png(fig)


def recall_curves(curves: dict[str, list[float]], marks: dict[str, int]) -> bytes:
    """curves: stage -> mean R@k for k = 1..K; marks: reranker name -> its candidate depth."""
    plt = _fig()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, label=name)
    for name, depth in marks.items():
        ax.axvline(depth, color="grey", linestyle="--", linewidth=1)
        ax.text(depth, 0.02, f" {name}: N={depth}", rotation=90, fontsize=8, color="grey", va="bottom")
    ax.set_xscale("log")
    ax.set_xlabel("k (log scale)")
    ax.set_ylabel("mean R@k")
    ax.set_ylim(0, 1)
    ax.set_title("Recall@k of the retrieval stages (reranker candidate depth dashed)")
    ax.legend(fontsize=8)
    return _png(fig)


def ceiling_chart(rows: Sequence[StageRow]) -> bytes:
    plt = _fig()
    rr = [r for r in rows if r.ceiling]
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(rr) + 2), 4))
    x = np.arange(len(rr))
    measure = rr[0].ceiling.measure if rr else ""
    for i, key in enumerate(("input", "achieved", "oracle")):
        ax.bar(x + (i - 1) * 0.27, [getattr(r.ceiling, key) for r in rr], 0.27, label=key)
    for xi, r in zip(x, rr):
        h = r.ceiling.headroom_captured
        text = f"{100 * h:.0f}% captured" if h is not None else f"no room ({r.ceiling.change:+.4f})"
        ax.text(xi, r.ceiling.oracle + 0.02, text, ha="center", fontsize=8)
    ax.set_xticks(x, [f"{r.stage} (N={r.ceiling.depth})" for r in rr])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel(measure)
    ax.set_title(f"Reranking ceiling: input, achieved and oracle {measure}")
    ax.legend(fontsize=8)
    return _png(fig)


def label_distribution(rows: Sequence[StageRow]) -> bytes:
    plt = _fig()
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = list(rows[0].top10_labels) if rows else []
    colors = {"E": "#2e7d32", "S": "#9ccc65", "C": "#ffb300", "I": "#e53935", "unjudged": "#bdbdbd"}
    bottoms = [0.0] * len(rows)
    names = [r.stage for r in rows]
    for lab in labels:
        vals = [r.top10_labels[lab] for r in rows]
        ax.bar(names, vals, bottom=bottoms, label=lab, color=colors.get(lab))
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of top-10 positions")
    ax.set_title("Top-10 label distribution per stage")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    return _png(fig)


def depth_curve(row: StageRow) -> bytes:
    """A reranker's depth sweep: achieved and oracle values of the ceiling measure (nDCG@10 by default)
    against N (log scale), its input's flat, pool recall R@N on the second axis; significant changes marked."""
    plt = _fig()
    cells = row.depths or []
    m = cells[0].measure if cells else ""
    n = [c.depth for c in cells]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(n, [c.oracle for c in cells], "o--", color="tab:green", label=f"oracle {m} (ideal order of the top N)")
    ax.plot(n, [c.achieved for c in cells], "o-", color="tab:blue", label=f"achieved {m}")
    sig = [c for c in cells if c.significant]
    if sig:
        ax.plot([c.depth for c in sig], [c.achieved for c in sig], "*", color="tab:blue", markersize=12,
                label="achieved: significantly different from the input")  # fmt: skip
    ax.axhline(cells[0].input if cells else 0, color="grey", linestyle=":", label=f"input {m}")
    ax.set_xscale("log")
    ax.set_xticks(n, [str(x) for x in n])
    ax.minorticks_off()
    ax.set_xlabel("N: candidates reranked (log scale)")
    ax.set_ylabel(m)
    ax.set_ylim(0, 1)
    ax2 = ax.twinx()
    ax2.plot(n, [c.pool_recall for c in cells], "s:", color="tab:orange", label="pool R@N (right axis)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("pool recall R@N")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
    ax.set_title(f"How deep to rerank: {row.stage}")
    return _png(fig)


def quality_cost_chart(points: Sequence[CostPoint]) -> bytes:
    """Each stage's nDCG@10 against its cumulative seconds per query (batch compute) and, where
    measured, against the p95 latency of serving one query through the cascade (log x); each
    panel's Pareto front joined."""
    plt = _fig()
    timed = [p for p in points if p.latency_ms is not None]
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(12 if timed else 7, 4), squeeze=False)
    panels = [(axes[0][0], points, lambda p: p.seconds_per_query, lambda p: p.pareto,
               "cumulative compute seconds per query (log scale; batch; this machine)", "Quality against batch cost")]
    if timed:
        panels.append((axes[0][1], timed, lambda p: p.latency_ms[1], lambda p: p.pareto_latency,
                       "p95 ms to serve one query through the cascade (log scale; this machine)",
                       "Quality against per-query latency"))  # fmt: skip
    for ax, pts, x, front_of, xlabel, title in panels:
        for p in pts:
            ax.plot(x(p), p.quality, "o", color="tab:red" if front_of(p) else "tab:grey")
            ax.annotate(p.stage, (x(p), p.quality), textcoords="offset points", xytext=(5, 4), fontsize=8)
        front = sorted((x(p), p.quality) for p in pts if front_of(p))
        if len(front) > 1:
            ax.plot([c for c, _ in front], [q for _, q in front], "-", color="tab:red", linewidth=1, label="Pareto front")
            ax.legend(fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("nDCG@10")
        ax.set_title(title)
    return _png(fig)


def segments_chart(tables: Sequence[SegmentTable], measure: str) -> bytes:
    """Small multiples: one panel per segmentation, each segment's mean of ``measure`` per stage
    (bars), the segment's query count under its label."""
    plt = _fig()
    n = len(tables)
    fig, axes = plt.subplots(1, n, figsize=(max(5.0, 4.2 * n), 3.8), squeeze=False, sharey=True)
    for ax, t in zip(axes[0], tables):
        stages = t.stages
        width = 0.8 / max(len(stages), 1)
        x = np.arange(len(t.segments))
        for i, s in enumerate(stages):
            ax.bar(x + i * width, [seg.means[s][measure] for seg in t.segments], width, label=s)
        ax.set_xticks(x + width * (len(stages) - 1) / 2, [f"{seg.label}\n({seg.queries} q)" for seg in t.segments], fontsize=8)
        ax.set_title(f"by {t.by}" if t.by in BUILT_IN else f"by {Path(t.by).name}", fontsize=10)
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel(measure)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{measure} per query segment", fontsize=11)
    return _png(fig)


def matrix_heatmaps(t: MatrixTable) -> bytes:
    """Two heatmaps, pools by rerankers: the reranker's value in the ceiling measure over each pool (the pool's
    own level in the row label), and the share of the pool's headroom it captured."""
    plt = _fig()
    fig, axes = plt.subplots(1, 2, figsize=(4.0 + 2.4 * len(t.rerankers), 1.4 + 0.55 * len(t.pools)), squeeze=False)
    value = np.array([[t.cell(r, p).value for r in t.rerankers] for p in t.pools])
    room = np.array([[np.nan if t.cell(r, p).headroom_captured is None else t.cell(r, p).headroom_captured
                      for r in t.rerankers] for p in t.pools])  # fmt: skip
    labels = [f"{p}\n(pool {t.cell(t.rerankers[0], p).input:.3f})" for p in t.pools]
    for ax, values, title, fmt, (lo, hi) in ((axes[0][0], value, t.measure, "{:.3f}", (0.0, 1.0)),
                                             (axes[0][1], room, "headroom captured", "{:.0%}", (-0.5, 1.0))):  # fmt: skip
        ax.imshow(np.ma.masked_invalid(values), cmap="RdYlGn", vmin=lo, vmax=hi, aspect="auto")
        ax.set_xticks(range(len(t.rerankers)), t.rerankers, fontsize=8)
        ax.set_yticks(range(len(t.pools)), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        for i in range(len(t.pools)):
            for j in range(len(t.rerankers)):
                v = values[i, j]
                ax.text(j, i, "no room" if np.isnan(v) else fmt.format(v), ha="center", va="center", fontsize=8)
    fig.suptitle("Each reranker over each candidate pool", fontsize=11)
    return _png(fig)


def incompleteness_chart(inc: Incompleteness) -> bytes:
    """Each view's Kendall tau (against all the judgments, and against the truth when known) by the
    share of judgments kept."""
    plt = _fig()
    fig, ax = plt.subplots(figsize=(7, 4))
    for view in dict.fromkeys(c.view for c in inc.cells):
        cells = sorted((c for c in inc.cells if c.view == view), key=lambda c: c.rate)
        line = ax.plot([100 * c.rate for c in cells], [c.tau for c in cells], marker="o", label=f"{view}: vs all judgments")
        if inc.truth is not None:
            ax.plot([100 * c.rate for c in cells], [c.tau_truth for c in cells], marker="x", linestyle="--",
                    color=line[0].get_color(), label=f"{view}: vs the truth")  # fmt: skip
    ax.set_xlabel("judgments kept (%)")
    ax.set_ylabel(f"Kendall's tau of the stage order ({inc.measure})")
    ax.set_ylim(-1.05, 1.05)
    ax.set_title("Stage order under fewer judgments, per view of the holes")
    ax.legend(fontsize=8)
    return _png(fig)
