"""stagebench: a config-driven benchmark harness for multi-stage search ranking.

The Python API (see docs/python.md)::

    import stagebench
    result = stagebench.run("configs/default.yaml")   # or a dict, or a Config
    result.table, result.per_query, result.runs, result.save("dir")
    stagebench.evaluate(qrels, run, ["nDCG@10", "RR@10"]).means

Importing stagebench loads no model library: torch, sentence-transformers, faiss and
onnxruntime are imported only by the stages that use them, when they run.
"""

from stagebench.api import Result, config_from, evaluate, run
from stagebench.config import Config, load_config
from stagebench.data.model import Dataset
from stagebench.errors import StagebenchError
from stagebench.metrics import Evaluation
from stagebench.rerank.plugins import Reranker
from stagebench.runs import read_trec_qrels, read_trec_run, write_trec_run
from stagebench.version import __version__

__all__ = [
    "Config", "Dataset", "Evaluation", "Reranker", "Result", "StagebenchError", "config_from", "evaluate",
    "load_config", "read_trec_qrels", "read_trec_run", "run", "write_trec_run", "__version__",
]  # fmt: skip
