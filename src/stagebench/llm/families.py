"""The label-reading LLM reranking families of one query: the engine tasks of the LLM stage
beside the listwise one (:class:`stagebench.llm.windows.QueryTask`).

* :class:`PointwiseTask` - each candidate alone: "is this product what the shopper wants?";
  the score is the expected grade under the labels' probabilities (``yes_no``: P(Yes);
  ``esci``: 3 P(E) + 2 P(S) + P(C)). The pairs of a query go to the model in batches of
  ``batch_size`` (in process; a server gets one request per pair); a pair's prompt, and so
  its score, depends on the pair only.
* :class:`PairwiseTask` - PRP: two candidates, asked in both orders; ``a`` beats ``b`` when
  the average of P(A | a first) and P(B | b first) is above one half (from text: when both
  orders name it; a split is no preference). Sorted by :func:`~stagebench.llm.schemes.prp_sliding`.
* :class:`SetwiseTask` - the best of ``set_size`` candidates per call, sorted by
  :func:`~stagebench.llm.schemes.setwise_heap`.

Every call goes through the content-addressed cache (kind ``llm``) like a listwise window:
a rerun asks nothing, a killed run resumes at the next call not yet answered. A question a
query already asked (PRP's later passes compare some neighbours again) is answered from
memory and not counted again: the calls column counts distinct questions. A call that
failed after every retry is counted; pointwise keeps the query's input order, a comparison
gives no preference (a pair keeps its places; in a set, the earliest in the input wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stagebench.llm.chat import cached_answers
from stagebench.llm.request import Abandoned, ChatRequest, RequestFailed
from stagebench.llm.labels import (
    LABEL_SETS, LabelReading, letters, read_labels, render_pairwise, render_pointwise, render_setwise,
)
from stagebench.llm.schemes import prp_sliding, setwise_heap
from stagebench.llm.windows import QueryTask, WindowAnswer, Stopped

#: the longest answer a label request asks a server for (the label is its first token; a few
#: more let a text-only server write "Product B")
LABEL_TOKENS = 8


class _LabelTask(QueryTask):
    def __init__(self, backend: Any, identity: dict, cache: Any, template: str, p: Any, stage: str) -> None:
        super().__init__(backend, identity, cache, template, p, stage)
        self.label_tokens = p.max_new_tokens or LABEL_TOKENS

    def ask(self, users: Sequence[str], labels: tuple[str, ...], where: Sequence[str], calls: list[WindowAnswer],
            asked: dict[str, LabelReading | None]) -> list[LabelReading | None]:  # fmt: skip
        """Label requests (one per user message), through the cache, batched where the backend
        batches: each one's reading (None: the request failed). A question this query already
        asked (a comparison repeated by a later pass) is not asked or counted again (``asked``);
        each new one's record is added to ``calls``."""
        if self._stop.is_set():
            raise Stopped()
        new = [i for i, u in enumerate(users) if u not in asked]
        reqs = [ChatRequest((*self.system, ("user", users[i])), self.label_tokens, self.temperature, self.seed, labels)
                for i in new]  # fmt: skip
        answers = cached_answers(self.cache, self.backend, self.identity, reqs, self.model, f"stage {self.stage}", "call")
        if any(isinstance(got, Abandoned) for got in answers):
            raise Stopped()
        for i, got in zip(new, answers):
            if isinstance(got, RequestFailed):
                asked[users[i]] = None
                calls.append(self.failed(where[i], got))
                continue
            comp, cached = got
            reading = asked[users[i]] = read_labels(labels, comp.label_logprobs, comp.text)
            calls.append(WindowAnswer(where[i], reading.status, (), comp, cached=cached, mass=reading.mass))
        return [asked[u] for u in users]


class PointwiseTask(_LabelTask):
    def __init__(self, backend: Any, identity: dict, cache: Any, template: str, p: Any, stage: str) -> None:
        super().__init__(backend, identity, cache, template, p, stage)
        self.labels = tuple(lab for lab, _ in LABEL_SETS[p.labels])
        self.grades = tuple(g for _, g in LABEL_SETS[p.labels])
        self.batch_size = p.batch_size

    def rerank(self, unit: tuple) -> tuple[list[str], list[WindowAnswer]]:
        _qid, query, doc_ids, texts, _plan = unit
        calls: list[WindowAnswer] = []
        scores: list[float | None] = []
        for b in range(0, len(doc_ids), self.batch_size):
            idx = range(b, min(b + self.batch_size, len(doc_ids)))
            users = [render_pointwise(self.template, query, texts[i], self.max_doc_words) for i in idx]
            for reading in self.ask(users, self.labels, [f"product {i + 1}" for i in idx], calls, {}):
                scores.append(None if reading is None else sum(p * g for p, g in zip(reading.probs, self.grades)))
        if any(s is None for s in scores):  # a failed pair: the query keeps its input order
            return list(doc_ids), calls
        # score desc, ties by docid desc (trec_eval's rule)
        order = sorted(range(len(doc_ids)), key=lambda i: (scores[i], doc_ids[i]), reverse=True)
        return [doc_ids[i] for i in order], calls


class PairwiseTask(_LabelTask):
    def __init__(self, backend: Any, identity: dict, cache: Any, template: str, p: Any, stage: str) -> None:
        super().__init__(backend, identity, cache, template, p, stage)
        self.top_k = p.top_k

    def rerank(self, unit: tuple) -> tuple[list[str], list[WindowAnswer]]:
        _qid, query, doc_ids, texts, _plan = unit
        calls: list[WindowAnswer] = []
        asked: dict[str, LabelReading | None] = {}

        def prefer(a: int, b: int) -> int:
            users = [render_pairwise(self.template, query, texts[a], texts[b], self.max_doc_words),
                     render_pairwise(self.template, query, texts[b], texts[a], self.max_doc_words)]  # fmt: skip
            where = [f"products {a + 1} and {b + 1}", f"products {b + 1} and {a + 1}"]
            first, second = self.ask(users, ("A", "B"), where, calls, asked)
            if first is None or second is None:
                return 0
            a_wins = (first.probs[0] + second.probs[1]) / 2
            return 1 if a_wins > 0.5 else -1 if a_wins < 0.5 else 0

        order = prp_sliding(len(doc_ids), self.top_k, prefer)
        return [doc_ids[i] for i in order], calls


class SetwiseTask(_LabelTask):
    def __init__(self, backend: Any, identity: dict, cache: Any, template: str, p: Any, stage: str) -> None:
        super().__init__(backend, identity, cache, template, p, stage)
        self.top_k, self.set_size = p.top_k, p.set_size

    def rerank(self, unit: tuple) -> tuple[list[str], list[WindowAnswer]]:
        _qid, query, doc_ids, texts, _plan = unit
        calls: list[WindowAnswer] = []
        asked: dict[str, LabelReading | None] = {}

        def best_of(group: Sequence[int]) -> int | None:
            user = render_setwise(self.template, query, [texts[i] for i in group], self.max_doc_words)
            where = "products " + ", ".join(str(i + 1) for i in group)
            [reading] = self.ask([user], letters(len(group)), [where], calls, asked)
            return None if reading is None else reading.best()

        order = setwise_heap(len(doc_ids), self.top_k, self.set_size, best_of)
        return [doc_ids[i] for i in order], calls


#: the engine task of each label-reading family
TASKS: dict[str, type[_LabelTask]] = {"pointwise": PointwiseTask, "pairwise": PairwiseTask, "setwise": SetwiseTask}

__all__ = ["LABEL_TOKENS", "PairwiseTask", "PointwiseTask", "SetwiseTask", "TASKS"]
