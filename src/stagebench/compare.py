"""``stagebench compare A B``: two run folders side by side, stage by matching stage.

Two folders are comparable only when their numbers mean the same thing: the same gain and
relevance threshold, the same corpus, and the same judgments for the queries they share;
otherwise ``compare`` refuses with the difference (identical runs scored with linear and
with exponential gain are not "significantly different", they are incomparable). Measures
are matched by their canonical names (``ndcg@10`` is ``nDCG@10``, order does not matter);
those in one folder only are listed, not compared. With different query sets it compares
the common queries and says how many there are.

Reads each folder's manifest, ``per_query.csv`` and ``qrels.trec`` (when it is there), each
verified against the manifest's digests (nothing is re-run). For every stage name present in
both and every measure present in both: the means, the difference B - A, the paired
randomization test and the paired t-test on the queries both scored, Holm-Bonferroni
corrected across the matching stages of each measure, and win/tie/loss counts of B vs A.
"""

from __future__ import annotations

from pathlib import Path

import stagebench.stats as stats
from stagebench.errors import StagebenchError
from stagebench.report import format_p
from stagebench.results import RunFolder

#: evaluation settings that change what a number means
EVALUATION_KEYS = ("gain", "relevance_threshold")


def check_comparable(fa: RunFolder, fb: RunFolder) -> None:
    """Refuse folders whose evaluation settings, corpus or shared judgments differ."""
    a, b, ma, mb = fa.path, fb.path, fa.manifest, fb.manifest
    for key in EVALUATION_KEYS:
        va, vb = ma.get("evaluation", {}).get(key), mb.get("evaluation", {}).get(key)
        if va != vb:
            raise StagebenchError(f"{a} and {b} are scored differently: evaluation.{key} is {va!r} vs {vb!r}; "
                                  "their numbers cannot be compared (re-run one with the other's settings)")  # fmt: skip
    ca, cb = ma.get("dataset", {}).get("fingerprint"), mb.get("dataset", {}).get("fingerprint")
    if ca != cb:
        raise StagebenchError(f"{a} and {b} ran on different corpora (dataset fingerprints {str(ca)[:12]} vs "
                              f"{str(cb)[:12]}): their numbers cannot be compared")  # fmt: skip
    if fa.holds("qrels.trec") and fb.holds("qrels.trec"):
        ra, rb = fa.qrels(), fb.qrels()
        for q in sorted(set(ra) & set(rb)):
            if ra[q] != rb[q]:
                raise StagebenchError(f"{a} and {b} judge query {q!r} differently (qrels.trec): their numbers cannot "
                                      "be compared")  # fmt: skip
    elif ma.get("dataset", {}).get("qrels_fingerprint") != mb.get("dataset", {}).get("qrels_fingerprint"):
        raise StagebenchError(f"{a} and {b} were scored against different qrels: their numbers cannot be compared")


def compare_dirs(a: str | Path, b: str | Path, permutations: int = 10000, seed: int = 42, alpha: float = 0.05) -> str:
    a, b = Path(a), Path(b)
    fa, fb = RunFolder.open(a), RunFolder.open(b)
    check_comparable(fa, fb)
    pa, pb = fa.per_query(), fb.per_query()
    order_a, order_b = list(pa), list(pb)
    stages = [s for s in order_a if s in pb]
    if not stages:
        raise StagebenchError(f"{a} and {b} have no stage name in common ({', '.join(order_a)} vs {', '.join(order_b)})")
    measures = [m for m in pa[stages[0]] if m in pb[stages[0]]]
    lines = [f"A = {a}", f"B = {b}"]
    rows = []
    if not measures:
        raise StagebenchError(f"{a} and {b} have no measure in common ({', '.join(pa[stages[0]])} vs "
                              f"{', '.join(pb[stages[0]])})")  # fmt: skip
    one_side = [m for m in [*pa[stages[0]], *pb[stages[0]]] if m not in measures]
    qa, qb = set(pa[stages[0]][measures[0]]), set(pb[stages[0]][measures[0]])
    n_common = len(qa & qb)
    if n_common == 0:
        raise StagebenchError(f"{a} and {b} have no scored query in common")
    for m in measures:
        family = []
        for s in stages:
            qs = sorted(set(pa[s][m]) & set(pb[s][m]))
            n_common = len(qs)
            va, vb = [pa[s][m][q] for q in qs], [pb[s][m][q] for q in qs]
            family.append((s, stats.compare("B", "A", m, vb, va, permutations, seed)))
        for (s, c), pr, pt in zip(family, stats.holm([c.p_rand for _, c in family]), stats.holm([c.p_t for _, c in family])):
            rows.append([s, m, f"{c.mean_b:.4f}", f"{c.mean_a:.4f}", f"{c.mean_a - c.mean_b:+.4f}", format_p(pr),
                         format_p(pt), f"{c.wins}/{c.ties}/{c.losses}", "*" if pr < alpha else ""])
    if qa != qb:
        lines.append(f"different query sets: A scored {len(qa)}, B scored {len(qb)}; only the {n_common} common "
                     "queries are compared (means below are over those)")  # fmt: skip
    lines.append(f"paired tests on the {n_common} queries both scored; p-values Holm-corrected across the "
                 f"{len(stages)} matching stages of each measure; * = randomization p < {alpha}")  # fmt: skip
    if one_side:
        lines.append(f"measures in only one folder (not compared): {', '.join(dict.fromkeys(one_side))}")
    only = [s for s in order_a + order_b if s not in stages]
    if only:
        lines.append(f"stages in only one folder (not compared): {', '.join(dict.fromkeys(only))}")
    head = ["stage", "measure", "A", "B", "B-A", "p rand (Holm)", "p t (Holm)", "B win/tie/loss", ""]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()  # noqa: E731
    lines += ["", fmt(head), "  ".join("-" * w for w in widths), *map(fmt, rows)]
    return "\n".join(lines) + "\n"
