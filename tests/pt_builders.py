"""PyTerrier transformers for the ``type: pyterrier`` tests, built by plain functions as a user's are."""

from __future__ import annotations

import pyterrier as pt


def reverse():
    """Reverses the ranked documents it is given (its score: the input rank, from 0 at the top)."""
    return pt.apply.doc_score(lambda row: float(row["rank"]))


def word_overlap(boost: float = 1.0):
    """Scores a document by the query words its text holds (times ``boost``): a reranker on the text column."""
    return pt.apply.doc_score(lambda row: boost * len(set(row["query"].lower().split()) & set(row["text"].lower().split())))


def fixed(docnos: list[str]):
    """A retriever without input: every query gets ``docnos``, in that order."""
    def rank(queries):
        import pandas as pd

        return pd.DataFrame([{"qid": q, "docno": d, "score": float(len(docnos) - i)}
                             for q in queries["qid"] for i, d in enumerate(docnos)])  # fmt: skip
    return pt.apply.generic(rank)


def adds_a_document():
    """A broken reranker: it answers a document it was not given."""
    def rank(df):
        extra = df.groupby("qid", as_index=False).first().assign(docno="not-a-candidate", score=0.0)
        return __import__("pandas").concat([df, extra], ignore_index=True)
    return pt.apply.generic(rank)


def not_a_transformer():
    return lambda df: df


def overlap_index(corpus):
    """A retriever that indexes the corpus it is handed (as PyTerrier's indexers take it): every
    document scored by the query words its text holds, those with none left out."""
    import pandas as pd

    docs = [(d["docno"], set(d["text"].lower().split())) for d in corpus]

    def rank(queries):
        rows = []
        for q, text in zip(queries["qid"], queries["query"]):
            words = set(text.lower().split())
            rows += [{"qid": q, "docno": d, "score": float(len(words & w))} for d, w in docs if words & w]
        return pd.DataFrame(rows, columns=["qid", "docno", "score"])
    return pt.apply.generic(rank)


def needs_a_download():
    """A builder whose first use downloads (as pt.terrier fetches Terrier's jars), offline."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen("http://127.0.0.1:9/terrier-assemblies.jar", timeout=2)
    except OSError as exc:
        raise RuntimeError("could not fetch the jar") from urllib.error.URLError(exc)
    raise AssertionError("port 9 answered")


def stored_index(index: str):
    """A retriever over an index it opens by path, as a prebuilt Terrier index is opened (here a JSON
    file of docno -> score): every query gets those documents with those scores."""
    import json

    import pandas as pd

    with open(index, encoding="utf-8") as fh:
        scores = json.load(fh)

    def rank(queries):
        rows = [{"qid": q, "docno": d, "score": float(s)} for q in queries["qid"] for d, s in scores.items()]
        return pd.DataFrame(rows, columns=["qid", "docno", "score"])
    return pt.apply.generic(rank)
