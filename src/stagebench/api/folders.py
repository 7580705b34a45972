"""The verbs that read a finished results folder and answer in text or tables (``show``, ``measure_of``,
``segments``, ``matrix``, ``check``, ``pin``), and upkeep (``reproduce``, ``cache``, ``generate_data``).
Each reads the folder verified, as the CLI's commands do."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stagebench import outputs
from stagebench.cache import Cache, cache_root
from stagebench.config import Config
from stagebench.data.synthetic import SyntheticSpec, generate
from stagebench.errors import ConfigError, StagebenchError
from stagebench.metrics import parse_measure
from stagebench.report.write import show_query
from stagebench.reproductions import Reproduced, run_reproductions
from stagebench.results.check import Check, compare_with_expected, write_expected
from stagebench.results.folder import RunFolder
from stagebench.results.matrix import MatrixTable, matrix_table
from stagebench.results.segments import MIN_QUERIES, SegmentTable, folder_segments


def show(folder: str | Path, query_id: str) -> str:
    """``stagebench show``: one query's view in text - each stage's top 10 with grades and moves."""
    return show_query(folder, query_id)


def measure_of(folder: str | Path, measure: str | None = None) -> str:
    """The name of ``measure`` as the folder scored it (its first measure when None); a measure the
    run did not score is refused."""
    rf = RunFolder.open(folder)
    name = parse_measure(measure).name if measure else rf.metrics[0]
    if name not in rf.metrics:
        raise StagebenchError(f"{folder} was scored with {', '.join(rf.metrics)}")
    return name


def segments(folder: str | Path, by: Sequence[str] | None = None, min_queries: int = MIN_QUERIES) -> list[SegmentTable]:
    """``stagebench segments``: the folder's stages within query segments, each stage's change tested per
    segment. ``by``: built-in segmenters or files (default: the run's own ``evaluation.segments``, else
    length, negation and - where the folder holds its qrels - judged and relevant)."""
    rf = RunFolder.open(folder)
    bys = list(by or rf.manifest.evaluation.segments) or ["length", "negation", *(
        ["judged", "relevant"] if rf.holds_runs() else [])]
    return folder_segments(rf, bys, min_queries)


def matrix(folder: str | Path) -> MatrixTable:
    """``stagebench matrix``: the reranker-by-pool matrix of a run whose config had a ``matrix:`` section."""
    rf = RunFolder.open(folder)
    record = rf.manifest.evaluation.matrix
    if record is None:
        raise StagebenchError(f"{folder}: the run had no matrix (its config has no matrix: section; see "
                              "docs/report.md#the-reranker-by-pool-matrix)")  # fmt: skip
    return matrix_table(record, rf.table(), str(folder))


def check(folder: str | Path, expected: str | Path, *, stored_table: bool = False) -> Check:
    """``stagebench check``: the folder's values against an ``expected.yaml`` (``stored_table``: the
    stored stage table, not one rescored from the runs); :attr:`Check.failed` when any is off."""
    rows, source = compare_with_expected(folder, expected, stored_table=stored_table)
    return Check(rows, source)


def pin(folder: str | Path, expected: str | Path, *, tolerance: float | None = None, stored_table: bool = False) -> Path:
    """``stagebench check --update``: the folder's values written as the expected values (the file's
    tolerances kept unless ``tolerance`` is given)."""
    outputs.check_file(expected, outputs.EXPECTED)
    write_expected(folder, expected, tolerance=tolerance, stored_table=stored_table)
    return Path(expected)


def reproduce(root: str | Path = ".", names: Sequence[str] | None = None, output_root: str | Path = "build/reproduce",
              matrix_path: str | Path | None = None, cache_dir: str | None = None) -> list[Reproduced]:  # fmt: skip
    """``stagebench reproduce``: the published tables under ``root/reproductions`` run when their
    inputs are here and checked; ``matrix_path``: where the Markdown matrix is written."""
    return run_reproductions(Path(root), list(names) if names else None, Path(output_root),
                      None if matrix_path is None else Path(matrix_path), cache_dir)  # fmt: skip


def cache(cache_dir: str | None = None, config: Config | None = None) -> Cache:
    """The stage cache a command uses: ``cache_dir`` > ``$STAGEBENCH_CACHE`` > ``config``'s
    ``cache_dir`` > the default (``stagebench cache``: ``.list()``, ``.verify(kind, key)``, ``.prune(...)``)."""
    return Cache(cache_root(cache_dir, None if config is None else config.cache_dir))


def generate_data(output: str | Path, *, seed: int = 13, products: int = 20000, test_queries: int = 500,
                  train_queries: int = 2000) -> dict:  # fmt: skip
    """``stagebench generate-data``: the synthetic ESCI-style dataset written into ``output``; its
    statistics. A value that cannot make a dataset is refused naming its keyword."""
    spec = SyntheticSpec(seed=seed, n_products=products, n_test_queries=test_queries, n_train_queries=train_queries)
    keywords = {"seed": "seed", "n_products": "products", "n_test_queries": "test_queries",
                "n_train_queries": "train_queries"}  # fmt: skip
    for name, why in spec.problems():
        raise ConfigError(f"{keywords[name]} {getattr(spec, name)}: {why}")
    return generate(output, spec)
