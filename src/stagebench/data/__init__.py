"""Dataset loaders, by the name a config's ``dataset.loader`` uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stagebench.data.esci import EsciHfOptions, EsciOptions, load_esci, load_esci_hf
from stagebench.data.jsonl import BeirOptions, SrsJsonlOptions, load_beir, load_srs_jsonl
from stagebench.data.model import Dataset
from stagebench.data.trec import TrecOptions, load_trec


@dataclass(frozen=True)
class Loader:
    options: type
    load: Callable[..., Dataset]
    doc: str


LOADERS: dict[str, Loader] = {
    "esci": Loader(EsciOptions, load_esci, "official esci-data parquet layout (examples + products)"),
    "esci_hf": Loader(EsciHfOptions, load_esci_hf, "merged ESCI rows via Hugging Face datasets (hub or parquet)"),
    "srs_jsonl": Loader(SrsJsonlOptions, load_srs_jsonl, "search-ranking-stack corpus/queries/qrels.jsonl"),
    "beir": Loader(BeirOptions, load_beir, "BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv"),
    "trec": Loader(TrecOptions, load_trec, "TREC qrels + topics file + corpus file"),
}

__all__ = ["Dataset", "LOADERS", "Loader"]
