"""An example reranker plug-in: field-aware lexical scoring that boosts title matches.

score = title_weight * (share of query tokens found in the title)
      + text_weight  * (share of query tokens found anywhere in the indexed text)
      + prior_weight * (the document's position prior: 1 / (1 + input rank))

It sets ``wants_fields = True`` so the stage hands it each document's fields (title,
brand, ...) and not just the indexed text. Use it from a config::

    - name: title_boost
      type: plugin
      target: "examples.title_boost:TitleBoostReranker"
      inputs: [rrf]
      params: {top_n: 100, title_weight: 2.0}
"""

from __future__ import annotations

from stagebench.analyzer import Tokenizer


class TitleBoostReranker:
    wants_fields = True

    def __init__(self, title_weight: float = 2.0, text_weight: float = 1.0, prior_weight: float = 0.5,
                 stemmer: str | None = "english") -> None:  # fmt: skip
        self.title_weight = title_weight
        self.text_weight = text_weight
        self.prior_weight = prior_weight
        self.tok = Tokenizer(stemmer=stemmer)

    def score(self, query: str, docs: list[dict]) -> list[float]:
        q = set(self.tok(query))
        if not q:
            return [0.0] * len(docs)
        out = []
        for rank, doc in enumerate(docs):
            title = set(self.tok(doc.get("title", "")))
            text = set(self.tok(doc.get("text", "")))
            out.append(self.title_weight * len(q & title) / len(q) + self.text_weight * len(q & text) / len(q)
                       + self.prior_weight / (1 + rank))  # fmt: skip
        return out
