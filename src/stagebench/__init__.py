"""stagebench: a config-driven benchmark harness for multi-stage search ranking.

The Python API (see docs/python.md)::

    import stagebench
    result = stagebench.run("configs/default.yaml")   # or a dict, or a Config
    result.table, result.per_query, result.runs, result.save("dir")
    done = stagebench.open("results/default")           # a finished results folder
    stagebench.compare("results/default", "results/default-trained")
    stagebench.tune("configs/tune-bm25.yaml").record["tuned_params"]   # docs/baselines.md
    (stagebench.stage("bm25") >> stagebench.stage("cross_encoder", top_n=50)).run(dataset={...})
    ds = stagebench.load_dataset({...}); stagebench.stage("bm25").apply(ds).run   # one stage
    stagebench.evaluate(qrels, run, ["nDCG@10", "RR@10"]).means

The package exports these verbs and the types they return; :mod:`stagebench.api` holds one call
for every other command (``stagebench.api.segments(folder)``, ``stagebench.api.judge(folder)``, ...),
TREC files and models alone.

Importing stagebench loads no model library: torch, sentence-transformers, faiss and
onnxruntime are imported only by the stages that use them, when they run. The verbs themselves are
loaded on first use (``stagebench.run`` imports :mod:`stagebench.api`), so that ``import stagebench``
is instant and the command line can take a signal before its heavy imports (:mod:`stagebench.__main__`).
"""

from __future__ import annotations

import importlib

from stagebench.version import __version__

#: typing.TYPE_CHECKING without importing typing (tens of milliseconds, more on a loaded machine): the command
#: line's signal handler (stagebench.__main__) goes in only after this module has run
TYPE_CHECKING = False
if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and readers
    from stagebench.api import (Cascade, Comparison, Config, Dataset, Evaluation, Reranker, Result, StageRun, StageSpec,
                                StagebenchError, TuneResult, compare, evaluate, load_config, load_dataset, open, run,
                                stage, tune)  # fmt: skip

__all__ = [
    "run", "open", "compare", "tune", "evaluate", "stage", "load_config", "load_dataset",
    "Result", "Comparison", "Evaluation", "TuneResult", "Config", "Dataset", "StageSpec", "Cascade", "StageRun",
    "Reranker", "StagebenchError", "__version__",
]  # fmt: skip


def __getattr__(name: str) -> object:
    """The package's verbs and types from :mod:`stagebench.api`, and its subpackages, on first use (PEP 562)."""
    if name.startswith("__"):  # a tool probing for a dunder: no submodule is named so
        raise AttributeError(f"module 'stagebench' has no attribute {name!r}")
    if name in __all__:
        value = getattr(importlib.import_module("stagebench.api"), name)
    else:
        try:
            value = importlib.import_module(f"stagebench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"stagebench.{name}":
                raise
            raise AttributeError(f"module 'stagebench' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
