"""The reranker-by-pool matrix: every listed reranker over every listed candidate pool, read from the
stage table of a run whose config had a ``matrix:`` section (:class:`~stagebench.record.MatrixRecord`).

A cell is one stage of the run (the reranker over that pool); its numbers are that stage's row of the
table, so the matrix and the stage table can never disagree:

* ``value``: the reranker's value in the ceiling measure (``evaluation.ceiling``, nDCG@10 by default)
  over the pool (holes as irrelevant, as the main table);
* ``input`` and ``pool_recall``: the pool's own level - its value and its recall at the
  reranker's depth (what any reranker of that depth could reach);
* ``oracle``: the pool's top N in the ideal order; ``headroom_captured``:
  (value - input) / (oracle - input), None where the oracle leaves no room.

In ``matrix.json`` the values are named after the measure (``ndcg10``, ``input_ndcg10``, ``oracle_ndcg10``).

The oracle pool (``oracle``) holds every relevant product, so a reranker's cell there measures its
ordering ability alone; the gap to the same reranker over a real pool is what retrieval cost it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from stagebench.errors import StagebenchError
from stagebench.record import MatrixRecord
from stagebench.table import StageTable, measure_key


@dataclass(frozen=True)
class MatrixCell:
    reranker: str
    pool: str
    stage: str  # the run's stage that holds the cell
    value: float
    input: float
    pool_recall: float
    depth: int
    oracle: float
    headroom_captured: float | None
    better_than_input: bool  # significantly better than its pool (the table's mark, Holm over the table's pairs)
    worse_than_input: bool

    def as_dict(self, measure: str) -> dict:
        """The cell with its values named after ``measure`` (``ndcg10``, ``input_ndcg10``, ``oracle_ndcg10``)."""
        k = measure_key(measure)
        named = {"value": k, "input": f"input_{k}", "oracle": f"oracle_{k}"}
        return {named.get(key, key): v for key, v in asdict(self).items()}


@dataclass(frozen=True)
class MatrixTable:
    rerankers: list[str]
    pools: list[str]
    oracle: str | None
    cells: list[MatrixCell]  # reranker-major, in the config's order
    measure: str  # the ceiling measure (evaluation.ceiling)

    def cell(self, reranker: str, pool: str) -> MatrixCell:
        return next(c for c in self.cells if c.reranker == reranker and c.pool == pool)

    def as_dict(self) -> dict:
        return {"rerankers": self.rerankers, "pools": self.pools, "oracle": self.oracle, "measure": self.measure,
                "cells": [c.as_dict(self.measure) for c in self.cells]}  # fmt: skip


def matrix_table(record: MatrixRecord, table: StageTable, source: str) -> MatrixTable:
    """The matrix of ``record`` from the stage table (``source`` names the folder in an error), in the
    table's ceiling measure."""
    rows = {r.stage: r for r in table.rows}
    measure = table.ceiling_measure
    if measure not in table.metrics:
        raise StagebenchError(f"{source}: the matrix reads {measure} (evaluation.ceiling), which the run did not score "
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
            cells.append(MatrixCell(r, p, name, row.metrics[measure], c.input, c.pool_recall, c.depth,
                                    c.oracle, c.headroom_captured, pool_row.id in row.better_than.get(measure, []),
                                    row.id in pool_row.better_than.get(measure, [])))  # fmt: skip
    return MatrixTable(list(record.rerankers), list(record.pools), record.oracle, cells, measure)


__all__ = ["MatrixCell", "MatrixTable", "matrix_table"]
