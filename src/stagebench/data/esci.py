"""Amazon Shopping Queries (ESCI) loaders.

* :func:`load_esci` reads the official layout of amazon-science/esci-data:
  ``shopping_queries_dataset_examples.parquet`` + ``shopping_queries_dataset_products.parquet``.
* :func:`load_esci_hf` reads merged rows (``tasksource/esci`` style: one row per judgment
  with the product columns inline) through Hugging Face ``datasets``, from the hub or
  from local parquet files, and goes through the same builder.

Both filter on locale, split and small_version, map labels (letters or words) to grades
through a configurable table, join products on (product_id, product_locale), render the
product text from a template over title/brand/color/bullet_points/description with HTML
stripped, and build the corpus as the whole catalog or only the judged products.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stagebench.data.corpus import Corpus
from stagebench.data.dataset import Dataset, check_queries, judged_doc_ids
from stagebench.runs import check_id
from stagebench.data.text import strip_html
from stagebench.errors import DataError
from stagebench.optional import need
from stagebench.params import Length, PositiveInt, Seed, param

EXAMPLES_FILE = "shopping_queries_dataset_examples.parquet"
PRODUCTS_FILE = "shopping_queries_dataset_products.parquet"
EXAMPLE_COLUMNS = ("query", "query_id", "product_id", "product_locale", "esci_label", "small_version", "split")
PRODUCT_COLUMNS = ("product_id", "product_locale", "product_title")
#: the release's query-source file (``query_id,source``: negations, parse_pattern, behavioral, other),
#: read beside the examples file when present
SOURCES_FILE = "shopping_queries_dataset_sources.csv"
SOURCES_HEADER = ("query_id", "source")
# product column -> corpus field name used by text templates
PRODUCT_FIELDS = {
    "product_title": "title",
    "product_brand": "brand",
    "product_color": "color",
    "product_bullet_point": "bullet_points",
    "product_description": "description",
}
DEFAULT_LABELS = {
    "E": 3, "S": 2, "C": 1, "I": 0,
    "Exact": 3, "Substitute": 2, "Complement": 1, "Irrelevant": 0,
}  # fmt: skip
ESCI_LABEL_NAMES = {3: "E", 2: "S", 1: "C", 0: "I"}
DEFAULT_TEMPLATE = "{title} {brand} {color} {bullet_points} {description}"


@dataclass
class SampleOptions:
    queries: PositiveInt = param(doc="how many query ids to draw")
    seed: Seed = param(42, "the generator's seed")
    method: Literal["numpy_choice"] = param("numpy_choice", "numpy.random.default_rng(seed).choice(the unique query ids "
                                           "in order of first appearance, size=queries, replace=False)")  # fmt: skip


@dataclass
class EsciOptions:
    path: str = param(doc="the folder holding the examples and products parquet files")
    locale: str | None = param("us", "keep rows of this product_locale (null: all; several locales key products as locale:id)")
    split: Literal["train", "test"] | None = param("test", "keep rows of this split (null: both)")
    small_version: bool = param(False, "keep only rows with small_version == 1 (the reduced Task 1 set)")
    labels: Annotated[dict[str, int], Length()] = param(doc="label -> grade (E/S/C/I and the words -> 3/2/1/0)", factory=lambda: dict(DEFAULT_LABELS))
    text_template: str = param(DEFAULT_TEMPLATE, "the indexed text, over title, brand, color, bullet_points, description")
    corpus_scope: Literal["catalog", "judged"] = param("catalog", "index the whole catalog, or only the judged products")
    max_queries: PositiveInt | None = param(None, "keep the first N query ids (sorted), for quick runs")
    sample: SampleOptions | None = param(None, "draw this many queries at random, after the filters (every row of a "
                                         "drawn query is kept), e.g. {queries: 500, seed: 42}")  # fmt: skip


@dataclass
class EsciHfOptions(EsciOptions):
    path: str = param("", "a local parquet file or folder of parquet files (or leave empty and set name)")
    name: str | None = param(None, "a hub dataset name, e.g. tasksource/esci (needs internet)")
    hf_split: str | None = param(None, "the datasets split(s) to read (null: all)")
    revision: str | None = param(None, "the hub revision to read")

    def validate(self) -> list[tuple[str, str]]:
        errs = []
        if bool(self.path) == bool(self.name):
            errs.append(("path", "set exactly one of 'path' (local parquet) or 'name' (hub dataset)"))
        return errs


def _read_parquet(path: Path, required: tuple[str, ...]):
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types; re-raise as one line
        raise DataError(f"{path}: cannot read parquet ({type(exc).__name__}: {exc})") from exc
    _require_columns(df, required, str(path))
    return df


def _require_columns(df, required, source: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{source}: missing required column(s) {', '.join(missing)} (has {', '.join(map(str, df.columns))})")


def _read_products(path: Path) -> pa.Table:
    """The products file as an Arrow table (never as Python objects: a catalog holds millions),
    with only the columns a corpus uses."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        names = pq.read_schema(path).names
        missing = [c for c in PRODUCT_COLUMNS if c not in names]
        if missing:
            raise DataError(f"{path}: missing required column(s) {', '.join(missing)} (has {', '.join(names)})")
        return pq.read_table(path, columns=[c for c in dict.fromkeys((*PRODUCT_COLUMNS, *PRODUCT_FIELDS)) if c in names])
    except DataError:
        raise
    except Exception as exc:  # pyarrow raises several types; re-raise as one line
        raise DataError(f"{path}: cannot read parquet ({type(exc).__name__}: {exc})") from exc


def load_esci(opts: EsciOptions) -> Dataset:
    root = Path(opts.path)
    if not root.is_dir():
        raise DataError(f"{root}: ESCI folder not found (expected {EXAMPLES_FILE} and {PRODUCTS_FILE})")
    ex_path = root / EXAMPLES_FILE
    examples = _read_parquet(ex_path, EXAMPLE_COLUMNS)
    products = _read_products(root / PRODUCTS_FILE)
    ds = build_esci(examples, products, opts, str(ex_path), str(root / PRODUCTS_FILE), name=f"esci:{root.name}")
    if (root / SOURCES_FILE).is_file():
        sources = read_sources(root / SOURCES_FILE)
        ds = replace(ds, query_groups={**ds.query_groups, "source": {q: sources[q] for q in ds.queries if q in sources}})
    return ds


def read_sources(path: str | Path) -> dict[str, str]:
    """query id -> source from a ``query_id,source`` CSV (the release's sources file); a missing column,
    an empty source or a query given two sources is one error naming the file and row."""
    p = Path(path)
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise DataError(f"{p}: cannot read the query sources ({type(exc).__name__}: {exc})") from exc
    _require_columns(df, SOURCES_HEADER, str(p))
    out: dict[str, str] = {}
    for row, (qid, source) in enumerate(zip(df["query_id"], df["source"]), start=2):
        where = f"{p}, line {row}"
        qid = check_id(qid.strip(), "query", where)
        source = source.strip()
        if not source:
            raise DataError(f"{where}: query {qid!r} has an empty source")
        if out.setdefault(qid, source) != source:
            raise DataError(f"{where}: query {qid!r} has two sources ({out[qid]!r} and {source!r})")
    return out


def _split_from_filename(path: str) -> str | None:
    """HF parquet exports are named ``<split>-00000-of-00002.parquet``."""
    head = Path(path).name.split("-")[0].split(".")[0]
    return head if head in ("train", "test", "validation", "dev") else None


def load_esci_hf(opts: EsciHfOptions) -> Dataset:
    """Merged ESCI rows via ``datasets``; products are the distinct (product_id, locale) rows.

    The corpus is therefore only the judged products, whatever ``corpus_scope`` says: the
    dataset says ``corpus_scope: judged`` (and the log and the table warn that recall is
    inflated). ``tasksource/esci`` has no ``split`` column: the split is the ``datasets`` split (hub) or
    the file name's prefix (local ``test-00000-of-00002.parquet``), added as a column.
    """

    datasets = need("datasets", "loader: esci_hf")

    frames: list[tuple[str | None, object]] = []
    if opts.name:
        source = opts.name
        ds = datasets.load_dataset(opts.name, split=opts.hf_split, revision=opts.revision)
        if isinstance(ds, datasets.DatasetDict):
            frames = [(name, d.to_pandas()) for name, d in ds.items()]
        else:
            frames = [(opts.hf_split, ds.to_pandas())]
    else:
        p = Path(opts.path)
        files = sorted(str(f) for f in p.glob("*.parquet")) if p.is_dir() else [str(p)]
        if not files or not all(Path(f).is_file() for f in files):
            raise DataError(f"{p}: no parquet file found")
        source = str(p)
        for f in files:
            frames.append((_split_from_filename(f), datasets.load_dataset("parquet", data_files=[f], split="train").to_pandas()))
    parts = []
    for split_name, df in frames:
        if "split" not in df.columns:  # type: ignore[union-attr]
            if split_name is None and opts.split is not None:
                raise DataError(f"{source}: rows have no 'split' column and the split cannot be told from the file "
                                "name (train-*.parquet / test-*.parquet); set split: null to use every row")  # fmt: skip
            df = df.assign(split=split_name)  # type: ignore[union-attr]
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    _require_columns(df, EXAMPLE_COLUMNS + ("product_title",), source)
    product_cols = ["product_id", "product_locale"] + [c for c in PRODUCT_FIELDS if c in df.columns]
    products = df[product_cols].drop_duplicates(subset=["product_id", "product_locale"])
    ds = build_esci(df, products, opts, source, source, name=f"esci-hf:{Path(source).name}")
    if ds.corpus_scope != "judged":
        ds = replace(ds, corpus_scope="judged").with_warnings(
            f"{source}: esci_hf rows carry only judged products, so corpus_scope: catalog is judged-only here; recall "
            "is inflated against a whole-catalog index (use loader: esci with the products file for a catalog corpus)")
    return ds


def build_esci(examples, products, opts: EsciOptions, ex_source: str, prod_source: str, name: str) -> Dataset:
    ex = examples
    for col in ("query_id", "product_id"):  # one null turns a whole integer column into floats (100164.0)
        nulls = ex[col].isna().to_numpy()
        if nulls.any():
            first = int(np.flatnonzero(nulls)[0])
            row = f"example_id {ex['example_id'].iloc[first]}" if "example_id" in ex.columns else f"row {first}"
            raise DataError(f"{ex_source}: {row}: {col} is null ({int(nulls.sum())} null {col} value(s) in the file); "
                            "every example needs a query and a product id")  # fmt: skip
    if opts.locale is not None:
        ex = ex[ex["product_locale"] == opts.locale]
    if opts.split is not None:
        ex = ex[ex["split"] == opts.split]
    if opts.small_version:
        ex = ex[ex["small_version"] == 1]
    if len(ex) == 0:
        raise DataError(
            f"{ex_source}: no examples left after filters locale={opts.locale!r} split={opts.split!r} "
            f"small_version={opts.small_version}"
        )
    if opts.sample is not None:
        ex = sample_queries(ex, opts.sample, ex_source)
    if opts.max_queries is not None:
        keep = sorted(ex["query_id"].astype(str).unique())[: opts.max_queries]
        ex = ex[ex["query_id"].astype(str).isin(set(keep))]
    # one locale: products keyed by product_id; several (locale: null): by locale and id, so the
    # same ASIN in "us" and "es" stays two products (and a US query is judged against US text)
    locales = sorted(set(ex["product_locale"].astype(str)))
    multi = len(locales) > 1

    def doc_key(pid: object, locale: object) -> str:
        return f"{locale}:{pid}" if multi else str(pid)

    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    locale_of: dict[str, str] = {}
    id_col = ex["example_id"] if "example_id" in ex.columns else ex.index
    for ex_id, qid, qtext, pid, loc, label in zip(id_col, ex["query_id"], ex["query"], ex["product_id"],
                                                  ex["product_locale"], ex["esci_label"]):  # fmt: skip
        where = f"{ex_source}: example_id {ex_id}"
        qid = check_id(qid, "query", where)
        if label not in opts.labels:
            raise DataError(f"{where}: unknown esci_label {label!r} (known: {', '.join(map(str, opts.labels))})")
        if not isinstance(qtext, str) or not qtext.strip():  # pandas reads a null text as None or NaN
            raise DataError(f"{where}: empty or null query text for query_id {qid} ({qtext!r})")
        pid = check_id(pid, "product", where)
        prev = queries.setdefault(qid, qtext)
        locale_of.setdefault(qid, str(loc))
        if prev != qtext:
            raise DataError(f"{where}: query_id {qid} has two texts ({prev!r} and {qtext!r})")
        docs = qrels.setdefault(qid, {})
        key = doc_key(pid, loc)
        if key in docs:
            raise DataError(f"{where}: duplicate judgment for query_id {qid} product_id {pid}")
        docs[key] = int(opts.labels[label])
    check_queries(queries, ex_source)

    prods = products if isinstance(products, pa.Table) else pa.Table.from_pandas(products, preserve_index=False)
    if prods.num_rows == 0:
        raise DataError(f"{prod_source}: the products file has no rows")
    prods = prods.filter(pc.is_in(pc.cast(prods["product_locale"], pa.string()), value_set=pa.array(locales)))
    if prods.num_rows == 0:
        raise DataError(f"{prod_source}: no product in locale(s) {', '.join(locales)}")
    pid = pc.cast(prods["product_id"], pa.string())
    loc = pc.cast(prods["product_locale"], pa.string())
    counts = pa.table({"p": pid, "l": loc}).group_by(["p", "l"]).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts["count_all"], 1))
    if dup.num_rows:
        raise DataError(f"{prod_source}: duplicate product (product_id={dup['p'][0].as_py()}, "
                        f"product_locale={dup['l'][0].as_py()})")  # fmt: skip
    keys = pc.binary_join_element_wise(loc, pid, ":") if multi else pid
    if opts.corpus_scope == "judged":  # filtered before the corpus is built: a catalog can hold millions
        keep = pc.is_in(keys, value_set=pa.array(sorted(judged_doc_ids(qrels)), pa.string()))
        prods, keys = prods.filter(keep), keys.filter(keep)
    for chunk in (keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]):
        for key in chunk.to_pylist():
            check_id(key, "product", prod_source)
    cols = [c for c in PRODUCT_FIELDS if c in prods.column_names]
    fields = {PRODUCT_FIELDS[c]: prods[c] for c in cols}
    for f in PRODUCT_FIELDS.values():  # absent optional columns behave as empty fields
        fields.setdefault(f, pa.nulls(prods.num_rows, pa.large_string()))
    corpus = Corpus.from_arrow(keys, fields, clean=lambda v: strip_html(v) if isinstance(v, str) else "")
    del prods, fields

    ds = Dataset(
        name=name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        text_template=opts.text_template,
        corpus_scope=opts.corpus_scope,
        label_names=_label_names(opts.labels),
        splits={q: opts.split for q in queries} if opts.split else None,
        source=ex_source,
        query_groups={"locale": locale_of},
    )
    if ds.qrels_docs_missing:
        ds = ds.with_warnings(
            f"{ex_source}: {ds.qrels_docs_missing} judgment(s) name products absent from {prod_source}; "
            "they stay in the qrels (they count in recall denominators and can never be retrieved)"
        )
    return ds


def sample_queries(ex, sample: SampleOptions, source: str):
    """The rows of ``sample.queries`` query ids drawn with ``numpy.random.default_rng(seed).choice``
    from the unique ids in order of first appearance (search-ranking-stack's draw)."""
    unique = pd.unique(ex["query_id"])
    if sample.queries > len(unique):
        raise DataError(f"{source}: sample.queries {sample.queries} is more than the {len(unique)} queries left after "
                        "the filters")  # fmt: skip
    chosen = np.random.default_rng(sample.seed).choice(unique, size=sample.queries, replace=False)
    return ex[ex["query_id"].isin(set(chosen.tolist()))]


def _label_names(labels: dict[str, int]) -> dict[int, str]:
    """grade -> shortest label naming it (E/S/C/I when letters are in the table)."""
    out: dict[int, str] = {}
    for lab, g in labels.items():
        if g not in out or len(lab) < len(out[g]):
            out[g] = lab
    return dict(sorted(out.items(), reverse=True))
