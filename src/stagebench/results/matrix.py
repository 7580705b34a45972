"""The reranker-by-pool matrix: every listed reranker over every listed candidate pool, read from the
stage table of a run whose config had a ``matrix:`` section (:class:`~stagebench.record.MatrixRecord`).

A cell is one stage of the run (the reranker over that pool); its numbers are that stage's row of the
table, so the matrix and the stage table can never disagree:

* ``ndcg10``: the reranker's nDCG@10 over the pool (holes as irrelevant, as the main table);
* ``input_ndcg10`` and ``pool_recall``: the pool's own level - its nDCG@10 and its recall at the
  reranker's depth (what any reranker of that depth could reach);
* ``oracle_ndcg10``: the pool's top N in the ideal order; ``headroom_captured``:
  (ndcg10 - input) / (oracle - input), None where the oracle leaves no room.

The oracle pool (``oracle``) holds every relevant product, so a reranker's cell there measures its
ordering ability alone; the gap to the same reranker over a real pool is what retrieval cost it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from stagebench.errors import StagebenchError
from stagebench.record import MatrixRecord
from stagebench.table import StageTable

MEASURE = "nDCG@10"


@dataclass(frozen=True)
class MatrixCell:
    reranker: str
    pool: str
    stage: str  # the run's stage that holds the cell
    ndcg10: float
    input_ndcg10: float
    pool_recall: float
    depth: int
    oracle_ndcg10: float
    headroom_captured: float | None
    better_than_input: bool  # significantly better than its pool (the table's mark, Holm over the table's pairs)
    worse_than_input: bool


@dataclass(frozen=True)
class MatrixTable:
    rerankers: list[str]
    pools: list[str]
    oracle: str | None
    cells: list[MatrixCell]  # reranker-major, in the config's order

    def cell(self, reranker: str, pool: str) -> MatrixCell:
        return next(c for c in self.cells if c.reranker == reranker and c.pool == pool)

    def as_dict(self) -> dict:
        return {"rerankers": self.rerankers, "pools": self.pools, "oracle": self.oracle, "measure": MEASURE,
                "cells": [asdict(c) for c in self.cells]}  # fmt: skip


def matrix_table(record: MatrixRecord, table: StageTable, source: str) -> MatrixTable:
    """The matrix of ``record`` from the stage table (``source`` names the folder in an error)."""
    rows = {r.stage: r for r in table.rows}
    if MEASURE not in table.metrics:
        raise StagebenchError(f"{source}: the matrix reads {MEASURE}, which the run did not score "
                              f"({', '.join(table.metrics)})")  # fmt: skip
    cells = []
    for r in record.rerankers:
        for p in record.pools:
            name = record.cells[r][p]
            row = rows.get(name)
            if row is None or row.ceiling is None:
                raise StagebenchError(f"{source}: the matrix's cell {r} x {p} is stage {name!r}, which the stage table "
                                      "does not hold as a reranker")  # fmt: skip
            c = row.ceiling
            pool_row = rows[row.inputs[0]]  # the pool as this reranker read it (an oracle pool is as deep as its top_n)
            cells.append(MatrixCell(r, p, name, row.metrics[MEASURE], c.input_ndcg10, c.pool_recall, c.depth,
                                    c.oracle_ndcg10, c.headroom_captured, pool_row.id in row.better_than.get(MEASURE, []),
                                    row.id in pool_row.better_than.get(MEASURE, [])))  # fmt: skip
    return MatrixTable(list(record.rerankers), list(record.pools), record.oracle, cells)


__all__ = ["MEASURE", "MatrixCell", "MatrixTable", "matrix_table"]
