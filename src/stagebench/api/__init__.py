"""The Python API: what a notebook or a script needs, in a few names.

    import stagebench

    result = stagebench.run({"name": "mine", "dataset": {...}, "stages": [...]})
    result.table                   # pandas DataFrame, one row per stage
    result.per_query               # pandas DataFrame: stage, qid, one column per measure
    result.runs["bm25"]            # {qid: {docid: score}}
    result.save("elsewhere/")      # a copy of the results folder

    done = stagebench.open("results/default")                  # any results folder a run wrote
    stagebench.compare("results/default", "results/default-trained").row("ce_finetuned", "nDCG@10")

    cascade = stagebench.stage("bm25", k1=0.9) >> stagebench.stage("cross_encoder", top_n=50)
    cascade.run(dataset={"loader": "esci", "path": "data/synthetic-esci"})   # the same run as its YAML

    ds = stagebench.load_dataset({"loader": "esci", "path": "data/synthetic-esci"})
    first = stagebench.stage("bm25", k1=0.9).apply(ds)                        # one stage, through the cache
    reranked = stagebench.stage("cross_encoder", top_n=50).apply(ds, first.run)
    stagebench.api.cross_encoder("cross-encoder/ms-marco-MiniLM-L-12-v2").predict(pairs, 32)   # a model alone

    stagebench.evaluate(qrels, run, ["nDCG@10", "RR@10"]).means

A config is a YAML path, a mapping (validated exactly as a file is) or a loaded
:class:`~stagebench.config.Config`. Results are written where the CLI writes them (the
config's ``output``, or ``output=``), with the same safety rules, and the stage cache is
shared with the CLI.

The façade is a package, one module a verb family (ranx's way): :mod:`.result` (a run's :class:`Result`
and the verbs that give one), :mod:`.folders` (the verbs that read a finished folder, and upkeep),
:mod:`.cascades` (stages and models in Python), :mod:`.evaluation` (runs and qrels scored),
:mod:`.judging` (the judge's and the judging round's commands) and :mod:`.ground` (what a round reads
from a folder). Every public name is importable from here, as ``stagebench.api.<name>``.
"""

from __future__ import annotations

from stagebench.api.cascades import bi_encoder, Cascade, cross_encoder, load_dataset, stage, StageSpec
from stagebench.api.evaluation import (compare_runs, evaluate, evaluate_files, evaluate_views, FileEvaluation, write_trec_run)  # fmt: skip
from stagebench.api.folders import cache, check, generate_data, matrix, measure_of, pin, reproduce, segments, show
from stagebench.api.judging import incompleteness, plan_judgments, simulate_estimates, simulate_plans, Worksheet
from stagebench.api.result import (add_judgments, check_run, compare, config_from, dry_run, judge, open, Result, run, table, train_reranker, tune)  # fmt: skip
from stagebench.config import Config, load_config
from stagebench.data.dataset import Dataset
from stagebench.errors import StagebenchError
from stagebench.execute import StageRun
from stagebench.fitting.tune import TuneResult
from stagebench.judgments.incompleteness import Incompleteness
from stagebench.judgments.planning import Simulation
from stagebench.metrics import Evaluation, HoleViews
from stagebench.metrics.delegate import ir_measures_version
from stagebench.pipeline import RunPlan
from stagebench.reproductions import Reproduced
from stagebench.rerank.plugins import Reranker
from stagebench.results.check import Check
from stagebench.results.compare import Comparison
from stagebench.results.matrix import MatrixTable
from stagebench.results.segments import SegmentTable
from stagebench.runs import read_trec_qrels, read_trec_run

__all__ = [
    # the verbs stagebench itself exports, and the types they return
    "run", "check_run", "dry_run", "open", "compare", "tune", "evaluate", "stage", "load_config", "load_dataset",
    "Result", "Comparison", "Evaluation", "TuneResult", "Config", "Dataset", "StageSpec", "Cascade", "StageRun",
    "Reranker", "StagebenchError",
    # one call per CLI command on a folder, training, reproductions and upkeep (stagebench.api.<name>)
    "table", "show", "measure_of", "segments", "matrix", "check", "pin", "judge", "incompleteness", "plan_judgments",
    "simulate_plans", "simulate_estimates", "add_judgments", "compare_runs", "evaluate_views", "train_reranker", "reproduce", "cache", "generate_data",
    "config_from", "cross_encoder", "bi_encoder", "read_trec_run", "read_trec_qrels", "write_trec_run",
    "evaluate_files", "ir_measures_version",
    # what those return
    "SegmentTable", "MatrixTable", "Check", "FileEvaluation", "Worksheet", "Simulation", "Incompleteness", "HoleViews", "Reproduced",
    "RunPlan",
]  # fmt: skip
