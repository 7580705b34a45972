"""``stagebench compare A B``: two run folders side by side, stage by matching stage.

Reads each folder's ``per_query.csv`` (nothing is re-run). For every stage name present in
both and every measure present in both: the means, the difference B - A, the paired
randomization test and the paired t-test on the queries both scored, Holm-Bonferroni
corrected across the matching stages of each measure, and win/tie/loss counts of B vs A.
"""

from __future__ import annotations

import csv
from pathlib import Path

from stagebench import stats
from stagebench.errors import StagebenchError
from stagebench.report import format_p


def read_per_query(folder: Path) -> tuple[list[str], dict[str, dict[str, dict[str, float]]]]:
    """-> (stage order, stage -> measure -> qid -> value)."""
    path = folder / "per_query.csv"
    if not path.is_file():
        raise StagebenchError(f"{folder}: not a finished stagebench run folder (no per_query.csv)")
    out: dict[str, dict[str, dict[str, float]]] = {}
    order: list[str] = []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        measures = [c for c in reader.fieldnames or [] if c not in ("stage", "qid")]
        for row in reader:
            s = row["stage"]
            if s not in out:
                order.append(s)
                out[s] = {m: {} for m in measures}
            for m in measures:
                out[s][m][row["qid"]] = float(row[m])
    return order, out


def compare_dirs(a: str | Path, b: str | Path, permutations: int = 10000, seed: int = 42, alpha: float = 0.05) -> str:
    a, b = Path(a), Path(b)
    order_a, pa = read_per_query(a)
    order_b, pb = read_per_query(b)
    stages = [s for s in order_a if s in pb]
    if not stages:
        raise StagebenchError(f"{a} and {b} have no stage name in common ({', '.join(order_a)} vs {', '.join(order_b)})")
    measures = [m for m in pa[stages[0]] if m in pb[stages[0]]]
    lines = [f"A = {a}", f"B = {b}"]
    rows = []
    n_common = None
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
    lines.append(f"paired tests on the {n_common} queries both scored; p-values Holm-corrected across the "
                 f"{len(stages)} matching stages of each measure; * = randomization p < {alpha}")  # fmt: skip
    only = [s for s in order_a + order_b if s not in stages]
    if only:
        lines.append(f"stages in only one folder (not compared): {', '.join(dict.fromkeys(only))}")
    head = ["stage", "measure", "A", "B", "B-A", "p rand (Holm)", "p t (Holm)", "B win/tie/loss", ""]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()  # noqa: E731
    lines += ["", fmt(head), "  ".join("-" * w for w in widths), *map(fmt, rows)]
    return "\n".join(lines) + "\n"
