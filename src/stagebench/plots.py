"""PNG plots of a run (matplotlib, Agg backend, deterministic bytes: no timestamps)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from stagebench.optional import need
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
    for i, (key, label) in enumerate((("input_ndcg10", "input"), ("achieved_ndcg10", "achieved"), ("oracle_ndcg10", "oracle"))):
        ax.bar(x + (i - 1) * 0.27, [getattr(r.ceiling, key) for r in rr], 0.27, label=label)
    for xi, r in zip(x, rr):
        h = r.ceiling.headroom_captured
        text = f"{100 * h:.0f}% captured" if h is not None else f"no room ({r.ceiling.ndcg10_change:+.4f})"
        ax.text(xi, r.ceiling.oracle_ndcg10 + 0.02, text, ha="center", fontsize=8)
    ax.set_xticks(x, [f"{r.stage} (N={r.ceiling.depth})" for r in rr])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("nDCG@10")
    ax.set_title("Reranking ceiling: input, achieved and oracle nDCG@10")
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
