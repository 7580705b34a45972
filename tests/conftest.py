"""Shared fixtures. Real data lives outside the repo at ../shared/data (never copied in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


def stagebench_cli(*args, cwd=None, env=None, **kw) -> subprocess.CompletedProcess:
    """``python -m stagebench ARGS`` in a subprocess, text output captured: the one way tests
    run the real command line. ``env``, when given, is the whole environment."""
    return subprocess.run([sys.executable, "-m", "stagebench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, **kw)  # fmt: skip


def esci_config(tmp_path: Path, dataset: Path, stages: str, name: str = "t", evaluation: str = "") -> Path:
    """A config file ``<tmp_path>/<name>.yaml`` over an ESCI-layout folder (test split), results in
    ``<tmp_path>/<name>`` and the cache in ``<tmp_path>/cache``; ``stages`` is the YAML list body."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"name: {name}\noutput: {tmp_path / name}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {dataset}, split: test}}\nstages:\n{stages}\n"
                   + (f"evaluation: {evaluation}\n" if evaluation else ""))  # fmt: skip
    return cfg


def shared_path(name: str) -> Path:
    p = SHARED / name
    if not p.exists():
        pytest.skip(f"real test data {p} is absent (it lives in ../shared/data next to the repo, as in CI)")
    return p


@pytest.fixture(scope="session")
def esci_real() -> Path:
    return shared_path("esci-real-rows")


@pytest.fixture(scope="session")
def cranfield() -> Path:
    return shared_path("cranfield")


@pytest.fixture(scope="session")
def small_synthetic(tmp_path_factory) -> Path:
    """A small synthetic ESCI-style dataset in the official layout (fast to index)."""
    from stagebench.data.synthetic import SyntheticSpec, generate

    out = tmp_path_factory.mktemp("synthetic-small")
    generate(out, SyntheticSpec(seed=7, n_products=1500, n_test_queries=40, n_train_queries=20))
    return out


@pytest.fixture(scope="session")
def embedded_dataset(tmp_path_factory) -> Path:
    """The embedded synthetic dataset `make bench` uses (data/synthetic-esci); generated with
    the same (deterministic) spec into a temp folder when the repo has not generated it yet."""
    from stagebench.data.synthetic import SyntheticSpec, generate

    local = REPO / "data" / "synthetic-esci"
    if (local / "shopping_queries_dataset_examples.parquet").is_file():
        return local
    out = tmp_path_factory.mktemp("synthetic-esci")
    generate(out, SyntheticSpec())
    return out
