"""Reproduction (`stagebench check`): compare a run folder's metrics with an expected-values file.

The expected file (YAML) pins a stage table::

    config: configs/default.yaml        # informational
    tolerance: 0.002                    # absolute; per metric: tolerances: {RR@10: 0.005}
    dataset:                            # optional: the data the numbers came from
      fingerprint: 3f...                # corpus (ids + indexed texts)
      queries_fingerprint: 9a...
      qrels_fingerprint: 51...
    stages:
      bm25: {nDCG@10: 0.518712, RR@10: 0.684213}
      cross_encoder: {nDCG@10: 0.648011}

Each expected value gets a status: ``OK`` (equal to the 6 decimals results are stored
with), ``OK-within-tolerance`` (differs by at most the tolerance) or ``FAIL`` (differs by
more, or the stage or metric is missing). A dataset fingerprint that differs is a FAIL
too, reported first, because it explains every other difference. Metrics are recomputed
from the folder's run files and qrels, each verified against the manifest's digests; a
missing or changed file is an error naming it. Only when asked (``--stored-table``, for a
folder that holds tables alone, such as the committed ones) are they read from
``stage_table.json`` instead - verified the same way, and said in the report's first line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from stagebench.errors import ConfigError, StagebenchError
from stagebench.files import atomic_write
from stagebench.metrics import evaluate, parse_measure
from stagebench.params import NonNegativeFloat, build, read_yaml
from stagebench.record import Manifest
from stagebench.results.folder import RunFolder

EXACT = 5e-7  # results are stored rounded to 6 decimals
DATASET_KEYS = ("fingerprint", "queries_fingerprint", "qrels_fingerprint")


@dataclass
class Expected:
    stages: dict[str, dict[str, float]]
    tolerance: NonNegativeFloat = 0.001
    tolerances: dict[str, NonNegativeFloat] = field(default_factory=dict)
    dataset: dict[str, str] = field(default_factory=dict)
    config: str | None = None


@dataclass
class CheckRow:
    stage: str
    metric: str
    expected: float | str
    got: float | str | None
    status: str
    tolerance: float | None = None

    @property
    def diff(self) -> float | None:
        if isinstance(self.expected, float) and isinstance(self.got, float):
            return self.got - self.expected
        return None


def _canonical_metrics(values: dict, where: str) -> dict:
    """Metric names as the one alias table spells them (``ndcg@10`` -> ``nDCG@10``)."""
    out = {}
    for name, v in values.items():
        try:
            canon = parse_measure(str(name)).name
        except StagebenchError as exc:
            raise ConfigError(f"{where}.{name}: {exc}") from None
        if canon in out:
            raise ConfigError(f"{where}.{name}: {canon} is given twice")
        out[canon] = v
    return out


def load_expected(path: str | Path) -> Expected:
    path = Path(path)
    raw = read_yaml(path, "expected-values file")
    try:
        exp = build(Expected, raw, "expected")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {str(exc).removeprefix('expected.')}") from None
    if not exp.stages:
        raise ConfigError(f"{path}: stages: no expected values")
    for key in exp.dataset:
        if key not in DATASET_KEYS:
            raise ConfigError(f"{path}: dataset.{key}: unknown key (known: {', '.join(DATASET_KEYS)})")
    exp.stages = {stage: _canonical_metrics(ms, f"{path}: stages.{stage}") for stage, ms in exp.stages.items()}
    exp.tolerances = _canonical_metrics(exp.tolerances, f"{path}: tolerances")
    return exp


def folder_metrics(folder: Path, stored_table: bool = False) -> tuple[dict[str, dict[str, float]], Manifest, str]:
    """stage -> metric -> mean (rounded to 6 decimals, as stage_table.json), the manifest, and the source.
    Every file read is verified against the manifest's digests (:class:`stagebench.results.folder.RunFolder`)."""
    rf = RunFolder.open(folder)
    if not stored_table:
        qrels, runs, ev = rf.qrels(), rf.runs(), rf.manifest.evaluation
        out = {}
        for name, run in runs.items():
            e = evaluate(qrels, run, ev.metrics, relevance_threshold=ev.relevance_threshold, gain=ev.gain)
            out[name] = {m: round(v, 6) for m, v in e.means.items()}
        return out, rf.manifest, "recomputed from runs/ and qrels.trec"
    table = rf.table()
    return ({r.stage: dict(r.metrics) for r in table.rows}, rf.manifest,
            "read from stage_table.json as asked (--stored-table), verified against manifest.json; not recomputed")  # fmt: skip


@dataclass
class Check:
    """A folder's values against expected ones (``stagebench check``): a row per value, and where the
    folder's values came from (rescored from its runs, or its stored stage table)."""

    rows: list[CheckRow]
    source: str

    @property
    def failed(self) -> bool:
        return any(r.status == "FAIL" for r in self.rows)


def compare_with_expected(folder: str | Path, expected_path: str | Path,
                          stored_table: bool = False) -> tuple[list[CheckRow], str]:  # fmt: skip
    folder = Path(folder)
    exp = load_expected(expected_path)
    got, manifest, source = folder_metrics(folder, stored_table)
    rows: list[CheckRow] = []
    ds = manifest.dataset
    for key, want in exp.dataset.items():
        have = getattr(ds, key, None)
        rows.append(CheckRow("(dataset)", key, want, have, "OK" if have == want else "FAIL"))
    for stage, metrics in exp.stages.items():
        for metric, want in metrics.items():
            tol = exp.tolerances.get(metric, exp.tolerance)
            if stage not in got:
                rows.append(CheckRow(stage, metric, float(want), None, "FAIL", tol))
                continue
            have = got[stage].get(metric)
            if have is None:
                rows.append(CheckRow(stage, metric, float(want), None, "FAIL", tol))
                continue
            d = abs(have - want)
            status = "OK" if d <= EXACT else "OK-within-tolerance" if d <= tol + EXACT else "FAIL"
            rows.append(CheckRow(stage, metric, float(want), float(have), status, tol))
    return rows, source


def write_expected(folder: str | Path, expected_path: str | Path, tolerance: float | None = None,
                   metrics: list[str] | None = None, stored_table: bool = False) -> None:  # fmt: skip
    """Pin a run folder's current metrics as the expected values (an on-purpose update). The
    tolerances of the file being replaced are kept (``tolerance`` given: it replaces the global one)."""

    folder = Path(folder)
    got, manifest, _ = folder_metrics(folder, stored_table)
    ds = manifest.dataset
    old = load_expected(expected_path) if Path(expected_path).is_file() else None
    doc = {
        "config": manifest.config_path,
        "tolerance": tolerance if tolerance is not None else old.tolerance if old is not None else 0.001,
        **({"tolerances": old.tolerances} if old is not None and old.tolerances else {}),
        "dataset": {k: getattr(ds, k) for k in DATASET_KEYS if getattr(ds, k) is not None},
        "stages": {s: {m: v for m, v in ms.items() if metrics is None or m in metrics} for s, ms in got.items()},
    }
    header = (f"# Expected metrics of {manifest.config_path} (stagebench check RUN_DIR THIS_FILE).\n"
              "# Regenerate on purpose, after a change that should move the numbers:\n"
              f"#   stagebench check {folder} {expected_path} --update\n")  # fmt: skip
    atomic_write(expected_path, header + yaml.safe_dump(doc, sort_keys=False, width=200))
