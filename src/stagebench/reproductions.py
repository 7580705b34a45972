"""Published stage tables, reproduced in one command: ``stagebench reproduce [NAME ...]``.

Each folder under ``reproductions/`` is one published table::

    reproductions/cranfield_bm25/
      reproduction.yaml   # title, where the numbers come from, what it needs, rows not reproduced
      config.yaml         # the stagebench config of the published setup
      expected.yaml       # the published values with tolerances (stagebench check's format)
      README.md

``reproduction.yaml`` may point ``config``/``expected`` elsewhere (the default benchmark's are
``configs/default.yaml`` and ``results/default/expected.yaml``) and lists ``needs``: ``internet``
(a hub dataset or model) and ``path:...`` (data outside the repository, e.g. ``../shared/data``).
A reproduction whose needs are not met here is **skipped, with the reason**; the others run into
``OUTPUT_ROOT/NAME`` (through the stage cache, so a rerun is quick) and are checked value by value.
The matrix - reproduction x stage x metric: expected, got, status - is printed and written as
Markdown (``results/reproductions.md`` by default).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from stagebench.config import load_config
from stagebench.errors import StagebenchError
from stagebench.outputs import MATRIX, check_file, write_matrix
from stagebench.models.resolve import hub_offline
from stagebench.params import build, param, read_yaml
from stagebench.pipeline import run_config
from stagebench.results.check import CheckRow, compare_with_expected, load_expected

ROOT = "reproductions"
HUB = ("huggingface.co", 443)


@dataclass
class Reproduction:
    title: str = param(doc="what is reproduced")
    source: str = param(doc="where the published numbers come from")
    needs: list[str] = param(doc="internet | path:RELATIVE/PATH (from the repository root)", factory=list)
    config: str = param("config.yaml", "the config (relative to this folder, or to the repository root if it starts with ./)")
    expected: str = param("expected.yaml", "the expected values (same rule)")
    not_reproduced: dict[str, str] = param(doc="published rows that are not run, and why", factory=dict)
    name: str = field(default="", init=False)
    folder: Path = field(default=Path("."), init=False)


def _resolve(folder: Path, path: str, repo: Path) -> Path:
    return repo / path[2:] if path.startswith("./") else folder / path


def find(repo: Path, names: list[str] | None = None) -> list[Reproduction]:
    root = repo / ROOT
    if not root.is_dir():
        raise StagebenchError(f"{root}: no reproductions folder")
    found = {}
    for d in sorted(p for p in root.iterdir() if (p / "reproduction.yaml").is_file()):
        r = build(Reproduction, read_yaml(d / "reproduction.yaml", "reproduction file"), str(d / "reproduction.yaml"))
        r.name, r.folder = d.name, d
        found[d.name] = r
    for n in names or []:
        if n not in found:
            raise StagebenchError(f"reproduction {n!r} not found under {root} (known: {', '.join(found)})")
    return [found[n] for n in names] if names else list(found.values())


def missing_needs(r: Reproduction, repo: Path) -> str | None:
    """Why ``r`` cannot run here, or None."""
    for need in r.needs:
        if need == "internet":
            if hub_offline():
                return "offline: it needs the Hugging Face hub (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set)"
            try:
                with socket.create_connection(HUB, timeout=3.0):
                    pass
            except OSError as exc:
                return f"offline: it needs the Hugging Face hub, and {HUB[0]} does not answer ({type(exc).__name__})"
        elif need.startswith("path:"):
            p = repo / need[5:]
            if not p.exists():
                return f"its data {p} is absent"
        else:
            raise StagebenchError(f"{r.folder / 'reproduction.yaml'}: needs: unknown need {need!r} (internet, path:...)")
    return None


@dataclass
class Reproduced:
    reproduction: Reproduction
    rows: list[CheckRow]
    skipped: str | None = None

    @property
    def failed(self) -> bool:
        return any(r.status == "FAIL" for r in self.rows)


def run_one(r: Reproduction, repo: Path, output_root: Path, cache_dir: str | None = None) -> Reproduced:
    why = missing_needs(r, repo)
    expected = _resolve(r.folder, r.expected, repo)
    if why is not None:
        exp = load_expected(expected)
        rows = [CheckRow(stage, metric, float(v), None, "skipped")
                for stage, ms in exp.stages.items() for metric, v in ms.items()]  # fmt: skip
        return Reproduced(r, rows, why)
    cwd = os.getcwd()
    os.chdir(repo)  # configs name their data relative to the repository root
    try:
        config = load_config(_resolve(r.folder, r.config, repo).relative_to(repo))
        out = output_root / r.name
        run_config(config, out, cache_dir)
        rows, _ = compare_with_expected(out, expected)
    finally:
        os.chdir(cwd)
    return Reproduced(r, rows)


@dataclass
class Kept:
    """The lines of reproductions not run this time, kept from the matrix already there (``reproduce NAME``
    rewrites NAME's rows, never another reproduction's): their table rows, source lines and notes."""

    rows: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def kept_lines(text: str, run: set[str]) -> Kept:
    """The lines of ``text`` (a matrix stagebench wrote) that belong to reproductions outside ``run``."""
    k = Kept()
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| reproduction |", "|---")):
            name = line.split("|")[1].strip()
            if name not in run:
                k.rows.append(line)
                if name not in k.names:
                    k.names.append(name)
        elif line.startswith("* **"):
            if line[4:].split("**", 1)[0] not in run:
                k.sources.append(line)
        elif line.startswith("* ") and line[2:].split(" ", 1)[0].rstrip(":") not in run:
            k.notes.append(line)
    return k


def reproductions_markdown(outcomes: list[Reproduced], kept: Kept | None = None) -> str:
    """The Markdown matrix: one line per (reproduction, stage, metric); ``kept``: the rows of reproductions not
    run this time, as the matrix already there had them (each says the run that wrote it was an earlier one)."""
    lines = ["# Reproductions", "",
             "Written by `stagebench reproduce` (`make reproduce`). Status: **OK** (equal to 6 decimals), "
             "**within tolerance**, **FAIL**, or **skipped** (with the reason: what it needs is not here).", "",
             "| reproduction | stage | metric | expected | got | diff | tolerance | status |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    notes = []
    for o in outcomes:
        r = o.reproduction
        for row in o.rows:
            if row.stage == "(dataset)":
                continue
            got = "-" if not isinstance(row.got, float) else f"{row.got:.4f}"
            diff = "-" if row.diff is None else f"{row.diff:+.4f}"
            status = {"OK-within-tolerance": "within tolerance"}.get(row.status, row.status)
            status = "skipped (see below)" if o.skipped else f"**{status}**"
            tol = "-" if row.tolerance is None else f"{row.tolerance:g}"
            lines.append(f"| {r.name} | {row.stage} | {row.metric} | {row.expected:.4f} | {got} | {diff} | {tol} | {status} |")
        for stage, why in r.not_reproduced.items():
            lines.append(f"| {r.name} | {stage} | - | - | - | - | - | not reproduced: {why} |")
        if o.skipped:
            notes.append(f"* {r.name} skipped: {o.skipped}.")
        dataset = [row for row in o.rows if row.stage == "(dataset)" and row.status == "FAIL"]
        if dataset:
            notes.append(f"* {r.name}: the data differs from the data the expected values came from "
                         f"({', '.join(row.metric for row in dataset)}), which explains any other difference.")  # fmt: skip
    if kept is not None and kept.rows:
        lines += kept.rows
        notes.append(f"* kept: the rows of {', '.join(kept.names)} are an earlier `stagebench reproduce`'s (this run "
                     f"reproduced {', '.join(o.reproduction.name for o in outcomes)} only)")  # fmt: skip
        notes += kept.notes
    lines += ["", "Sources:", ""] + [f"* **{o.reproduction.name}**: {o.reproduction.title}. {o.reproduction.source}"
                                      for o in outcomes] + (kept.sources if kept is not None else [])  # fmt: skip
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def run_reproductions(repo: Path, names: list[str] | None, output_root: Path, matrix_path: Path | None,
              cache_dir: str | None = None) -> list[Reproduced]:  # fmt: skip
    """Run and check each reproduction (``cache_dir``: the cache root for all of them, as ``--cache-dir``)."""
    if matrix_path is not None:
        check_file(matrix_path, MATRIX)  # before any reproduction runs
    chosen = find(repo, names)
    outcomes = [run_one(r, repo, output_root, cache_dir) for r in chosen]
    if matrix_path is not None:
        kept = None
        if names and Path(matrix_path).is_file():  # a subset: the other reproductions' rows stay as they were
            kept = kept_lines(Path(matrix_path).read_text(encoding="utf-8"), {r.name for r in chosen})
        write_matrix(matrix_path, reproductions_markdown(outcomes, kept))
    return outcomes


__all__ = ["Kept", "Reproduced", "Reproduction", "find", "kept_lines", "missing_needs", "reproductions_markdown", "run_one", "run_reproductions"]
