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

Importing stagebench loads no model library: torch, sentence-transformers, faiss and
onnxruntime are imported only by the stages that use them, when they run.
"""

from stagebench.api import (
    Cascade,
    Result,
    StageSpec,
    bi_encoder,
    compare,
    config_from,
    cross_encoder,
    evaluate,
    load_dataset,
    open,
    run,
    stage,
    tune,
)
from stagebench.config import Config, load_config
from stagebench.data.model import Dataset
from stagebench.errors import StagebenchError
from stagebench.execute import StageRun
from stagebench.metrics import Evaluation
from stagebench.report.tables import comparison_text
from stagebench.results.compare import Comparison, MeasureDelta
from stagebench.rerank.plugins import Reranker
from stagebench.runs import read_trec_qrels, read_trec_run, write_trec_run
from stagebench.version import __version__

__all__ = [
    "Cascade", "Comparison", "Config", "Dataset", "Evaluation", "MeasureDelta", "Reranker", "Result", "StageSpec",
    "StageRun", "StagebenchError", "bi_encoder", "compare", "comparison_text", "config_from", "cross_encoder", "evaluate",
    "load_config", "load_dataset", "open", "read_trec_qrels",
    "read_trec_run", "run", "stage", "tune", "write_trec_run", "__version__",
]  # fmt: skip
