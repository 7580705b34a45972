"""A stage that reads an existing run: a frozen candidate pool from a production system, a
published run, another tool's output.

``type: run_file`` with ``params: {path: runs/prod.trec, top_k: 100}`` reads a TREC run file
(``qid Q0 docid rank score tag``). It takes part in the stage table, the ceiling analysis
and the cache like any first stage; its cache key holds the file's sha256, so an edited
file is a new run. Queries the dataset does not evaluate are dropped (and counted in the
log); documents absent from the corpus are kept - they can be judged - and counted, since a
reranker would see an empty text for them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from stagebench.files import file_digest
from stagebench.params import PositiveInt, param
from stagebench.runs import Run, read_trec_run, truncate
from stagebench.stages.base import Stage, StageContext

log = logging.getLogger("stagebench")


@dataclass
class RunFileParams:
    path: str = param(doc="a TREC run file (qid Q0 docid rank score tag), relative to the working directory")
    top_k: PositiveInt | None = param(None, "keep each query's top k (null: all of it)")


class RunFileStage(Stage):
    type_name = "run_file"
    Params = RunFileParams
    reads_corpus = False

    @classmethod
    def check_params(cls, params: RunFileParams, inputs: list[str]) -> list[tuple[str, str]]:
        if not Path(params.path).is_file():
            return [("path", f"run file {params.path!r} not found")]
        return []

    def identity(self) -> dict:
        return {"run_file_sha256": file_digest(Path(self.params.path))}

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: RunFileParams = self.params
        run = read_trec_run(p.path)
        ds = ctx.dataset
        kept = {q: docs for q, docs in run.items() if q in ds.queries}
        dropped = len(run) - len(kept)
        if p.top_k is not None:
            kept = truncate(kept, p.top_k)
        missing = sum(1 for docs in kept.values() for d in docs if d not in ds.corpus)
        log.info("stage %s: read %s: %d queries (%d not evaluated here, dropped), %d of the dataset's %d queries "
                 "without results, %d documents not in the corpus", self.name, p.path, len(kept), dropped,
                 sum(1 for q in ds.queries if q not in kept), len(ds.queries), missing)  # fmt: skip
        if missing:
            log.warning("stage %s: %d documents of %s are not in the corpus; a reranker sees an empty text for them",
                        self.name, missing, p.path)  # fmt: skip
        return kept
