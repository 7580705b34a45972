"""Dataset loaders, by the name a config's ``dataset.loader`` uses, and the ``dataset:`` section
that names one (:func:`parse_dataset`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stagebench.data.esci import EsciHfOptions, EsciOptions, load_esci, load_esci_hf
from stagebench.data.irds import IrdsOptions, load_irds
from stagebench.data.jsonl import BeirOptions, SrsJsonlOptions, load_beir, load_srs_jsonl
from stagebench.data.dataset import Dataset
from stagebench.data.trec import TrecOptions, load_trec
from stagebench.errors import ConfigError
from stagebench.params import build


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
    "ir_datasets": Loader(IrdsOptions, load_irds, "any ir_datasets id (beir/scifact/test, cranfield, ...), read "
                          "through ir_datasets and its cache (extra: stagebench[irds])"),
}

@dataclass
class DatasetConfig:
    """A config's ``dataset:`` section: the loader's name and its validated options."""

    loader: str
    options: Any


def parse_dataset(raw: Any) -> DatasetConfig:
    """The ``dataset:`` section: a known loader and its options, validated."""
    if not isinstance(raw, dict):
        raise ConfigError("dataset: expected a mapping")
    loader = raw.get("loader")
    if loader not in LOADERS:
        raise ConfigError(f"dataset.loader: unknown loader {loader!r} (known: {', '.join(LOADERS)})")
    options = build(LOADERS[loader].options, {k: v for k, v in raw.items() if k != "loader"}, "dataset")
    return DatasetConfig(loader=loader, options=options)


__all__ = ["Dataset", "DatasetConfig", "LOADERS", "Loader", "parse_dataset"]
