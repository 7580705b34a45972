"""A test plug-in that reorders candidates by a hash of (query, text): a reranker that moves many
documents and hurts nDCG the deeper it reaches, so depth sweeps have p-values that Holm changes
(``keep: true``: it keeps the input order)."""

from __future__ import annotations

import atexit
import hashlib
import os
import time


class HashShuffle:
    def __init__(self, salt: str = "", keep: bool = False) -> None:
        self.salt, self.keep = salt, keep

    def score(self, query: str, docs: list[str]) -> list[float]:
        if self.keep:  # the input order (a reranker that changes nothing)
            return [float(len(docs) - i) for i in range(len(docs))]
        return [int.from_bytes(hashlib.sha256(f"{self.salt}{query}\x00{d}".encode()).digest()[:4], "big") / 2**32
                for d in docs]


class PairHash(HashShuffle):
    """The same scores through ``score_pairs`` (batched: the stage may share them between like stages)."""

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        return [self.score(q, [d])[0] for q, d in pairs]


class Sleepy(HashShuffle):
    """HashShuffle that takes ``pause`` seconds per query (a stage slow enough to be interrupted)."""

    def __init__(self, pause: float = 0.5, **kw) -> None:
        super().__init__(**kw)
        self.pause = pause

    def score(self, query: str, docs: list[str]) -> list[float]:
        time.sleep(self.pause)
        return super().score(query, docs)


class Reverse:
    """Reverses the head it is shown: significantly worse than a good pool, and significantly better
    than a pool that is itself reversed (the reranker-by-pool matrix's marks, both ways)."""

    def score(self, query: str, docs: list[str]) -> list[float]:
        return [float(i) for i in range(len(docs))]


class HeadHash(HashShuffle):
    """A reranker whose scores depend on the head it is shown (a hash salted with the head's size), as a
    listwise model's may: a depth sweep cannot derive its runs from one deeper pass."""

    def score(self, query: str, docs: list[str]) -> list[float]:
        self.salt = f"{len(docs)}:"
        return super().score(query, docs)


class Fails:
    """A reranker that raises its own error on the query it is shown (``on``: a word of the query; empty: every
    query): the words must reach the user, on every engine."""

    def __init__(self, on: str = "") -> None:
        self.on = on

    def score(self, query: str, docs: list[str]) -> list[float]:
        if self.on in query:
            raise RuntimeError(f"the plug-in's own words about {query!r}")
        return [0.0] * len(docs)


class FailsAndTearsDown(Fails):
    """Fails, in a process whose last act at exit ends it with status 1, after stagebench has printed and
    reported its outcome: as Ray's teardown does to a driver when a thread of its still fetches."""

    def score(self, query: str, docs: list[str]) -> list[float]:
        atexit.register(os._exit, 1)
        return super().score(query, docs)
