"""A run's runs and qrels handed to the other IR tools: ranx and ir_measures.

Both are optional (``pip install 'stagebench[interop]'``) and imported when asked for.

* :func:`to_ranx`: ranx ``Qrels`` over the stage table's query set (every judged query with a
  positive grade) and one ranx ``Run`` per stage, named by the stage. ranx orders a query's
  documents by score alone, and tied scores in whatever order its sort leaves them; the stage
  table breaks ties as trec_eval does (score descending, then docid descending). With
  ``ties="trec_eval"`` (the default) every tied score is moved down by the fewest float steps
  (``numpy.nextafter``) that make the order strict in trec_eval's order, so ranx ranks exactly as
  the table did and its ``evaluate(..., make_comparable=True)`` gives the table's values;
  ``ties="keep"`` hands the scores over as stored.
* :func:`ir_measures_qrels` and :func:`ir_measures_run`: ``ir_measures.Qrel`` and
  ``ir_measures.ScoredDoc`` records, the form ``ir_measures.calc_aggregate`` and
  ``iter_calc`` read (their trec_eval-based measures break ties as the table does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import numpy as np

from stagebench.errors import StagebenchError
from stagebench.metrics import scored_query_ids
from stagebench.optional import need
from stagebench.runs import Qrels, Run, ranked

TIES = ("trec_eval", "keep")


def strict_order(scores: Mapping[str, float]) -> dict[str, float]:
    """One query's scores in trec_eval's order with every tie broken by moving the later score
    down by float steps (as few as keep the order strict); distinct scores are left as they are
    unless a run of ties pushes a score to (or past) the next lower one."""
    out: dict[str, float] = {}
    prev = np.inf
    for doc, s in ranked(scores):
        v = float(s) if float(s) < prev else float(np.nextafter(prev, -np.inf))
        out[doc] = v
        prev = v
    return out


def ranx_qrels(qrels: Qrels) -> Any:
    """ranx ``Qrels`` over the stage table's query set (queries with a positive grade)."""
    ranx = need("ranx", "to_ranx()")
    scored = scored_query_ids(qrels)
    return ranx.Qrels({q: dict(qrels[q]) for q in scored}, name="qrels")


def ranx_run(run: Run, name: str, ties: Literal["trec_eval", "keep"] = "trec_eval") -> Any:
    """One stage's run as a ranx ``Run`` named ``name`` (queries without documents left out:
    ranx cannot hold an empty query; ``make_comparable=True`` scores them 0, as the table does)."""
    if ties not in TIES:
        raise StagebenchError(f"ties={ties!r}: expected one of {', '.join(TIES)}")
    ranx = need("ranx", "to_ranx()")
    runs = {q: (strict_order(docs) if ties == "trec_eval" else {d: float(s) for d, s in docs.items()})
            for q, docs in run.items() if docs}  # fmt: skip
    return ranx.Run(runs, name=name)


def to_ranx(qrels: Qrels, runs: Mapping[str, Run], ties: Literal["trec_eval", "keep"] = "trec_eval") -> tuple[Any, dict[str, Any]]:
    """``(ranx.Qrels, {stage: ranx.Run})`` (see the module docstring)."""
    return ranx_qrels(qrels), {name: ranx_run(run, name, ties) for name, run in runs.items()}


def ir_measures_qrels(qrels: Qrels) -> Iterator[Any]:
    """The judgments as ``ir_measures.Qrel(query_id, doc_id, relevance)``, query by query."""
    irm = need("ir_measures", "ir_measures_qrels()")
    for q, docs in qrels.items():
        for d, g in docs.items():
            yield irm.Qrel(q, d, int(g))


def ir_measures_run(run: Run) -> Iterator[Any]:
    """One run as ``ir_measures.ScoredDoc(query_id, doc_id, score)``, each query in trec_eval's order."""
    irm = need("ir_measures", "ir_measures_run()")
    for q, docs in run.items():
        for d, s in ranked(docs):
            yield irm.ScoredDoc(q, d, float(s))
