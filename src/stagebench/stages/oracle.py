"""The oracle pool: a candidate pool that holds every relevant product, to separate a reranker's
ranking ability from what retrieval gave it.

``type: oracle_pool`` with ``inputs: [bm25]`` takes each query's top ``depth`` of its input and
puts every judged product of grade >= ``min_grade`` that is missing from it at a seeded random
rank among them; as many of the input's lowest non-relevant candidates leave the pool, so it keeps
``depth`` candidates (more only when a query has more relevant products than ``depth``). The
input's candidates keep their relative order, and a query's pool depends only on the seed, the
query id and its judgments (``random.Random(f"{seed}:{qid}")``), not on the other queries. A
query the input found nothing for gets a pool of its relevant products alone.

It **reads the qrels**, which is the point: it is an upper-bound device, never a retriever, and
the stage table says so by its type. A reranker over it shows how well the reranker orders a pool
whose recall is 1; the gap to the same reranker over a real pool is what retrieval cost it.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from stagebench.params import PositiveInt, Seed, param
from stagebench.runs import Run, ranked_ids
from stagebench.stages.base import Stage, StageContext

log = logging.getLogger("stagebench")


@dataclass
class OraclePoolParams:
    depth: PositiveInt = param(50, "candidates in each query's pool: the input's top depth, with the missing "
                                   "relevant products put among them")  # fmt: skip
    min_grade: PositiveInt = param(1, "judged products of at least this grade are put in the pool")
    seed: Seed = param(42, "seed of the ranks the missing relevant products are given (per query)")


class OraclePoolStage(Stage):
    type_name = "oracle_pool"
    Params = OraclePoolParams
    min_inputs, max_inputs = 1, 1
    reads_corpus = False
    reads_qrels = True

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: OraclePoolParams = self.params
        qrels = ctx.dataset.qrels
        out: Run = {}
        added = lifted = 0
        for qid in ctx.dataset.query_ids:  # a query the input found nothing for gets its relevant products too
            docs = inputs[0].get(qid, {})
            pool, n_added = oracle_pool(qid, ranked_ids(docs), qrels.get(qid, {}), p.depth, p.min_grade, p.seed)
            if not pool:
                continue
            added += n_added
            lifted += n_added > 0
            out[qid] = {d: float(len(pool) - i) for i, d in enumerate(pool)}
        log.info("stage %s: oracle pool of depth %d: %d relevant products (grade >= %d) put into the pools of %d of "
                 "%d queries; it reads the judgments (an upper-bound device, not a retriever)", self.name, p.depth,
                 added, p.min_grade, lifted, len(out))  # fmt: skip
        return out


def oracle_pool(qid: str, ranking: list[str], judged: dict[str, int], depth: int, min_grade: int,
                seed: int) -> tuple[list[str], int]:  # fmt: skip
    """One query's pool (see the module docstring) and how many relevant products it put in."""
    relevant = {d for d, g in judged.items() if g >= min_grade}
    top = ranking[:depth]
    missing = sorted(relevant - set(top))  # sorted: the pool does not depend on set order
    size = max(depth, len(relevant))
    keep_other = max(size - len(missing) - sum(d in relevant for d in top), 0)
    kept, others = [], 0
    for d in top:  # the input's relevant candidates all stay; its lowest others make room
        if d in relevant:
            kept.append(d)
        elif others < keep_other:
            kept.append(d)
            others += 1
    rng = random.Random(f"{seed}:{qid}")
    pool = list(kept)
    for d in missing:
        pool.insert(rng.randrange(len(pool) + 1), d)
    return pool, len(missing)


__all__ = ["OraclePoolParams", "OraclePoolStage", "oracle_pool"]
