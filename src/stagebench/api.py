"""The Python API: what a notebook or a script needs, in a few names.

    import stagebench

    result = stagebench.run({"name": "mine", "dataset": {...}, "stages": [...]})
    result.table                   # pandas DataFrame, one row per stage
    result.per_query               # pandas DataFrame: stage, qid, one column per measure
    result.runs["bm25"]            # {qid: {docid: score}}
    result.save("elsewhere/")      # a copy of the results folder

    stagebench.evaluate(qrels, run, ["nDCG@10", "RR@10"]).means

A config is a YAML path, a mapping (validated exactly as a file is) or a loaded
:class:`~stagebench.config.Config`. Results are written where the CLI writes them (the
config's ``output``, or ``output=``), with the same safety rules, and the stage cache is
shared with the CLI.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagebench.config import Config, load_config, parse_config
from stagebench.errors import ConfigError
from stagebench.metrics import Evaluation, Measure
from stagebench.metrics import evaluate as _evaluate
from stagebench.files import check_apart, check_destination, remove_staging, staging, swap_in
from stagebench.pipeline import RunResult, run_config
from stagebench.results.folder import RESULTS, RunFolder
from stagebench.runs import Run, checked_qrels, checked_run
from stagebench.table import StageTable


def config_from(config: Config | Mapping[str, Any] | str | Path, engine: str | None = None) -> Config:
    """A validated config from a YAML path, a mapping or a Config; ``engine`` (local | ray) puts
    every stage on that engine, as ``stagebench run --engine``."""
    if isinstance(config, Config):
        return config if engine is None else parse_config(config.raw, config.path, engine)
    if isinstance(config, Mapping):
        try:
            return parse_config(dict(config), "<dict>", engine)
        except ConfigError as exc:
            raise ConfigError(f"<dict>: {exc}") from None
    return load_config(config, engine)


@dataclass
class Result:
    """A finished run: its stage table, per-query values and runs, and its results folder."""

    output: Path
    stage_table: StageTable
    runs: dict[str, Run]
    per_query_values: dict[str, dict[str, dict[str, float]]]  # stage -> measure -> qid -> value
    table_text: str

    @property
    def table(self):
        """The stage table as a pandas DataFrame: one row per stage, the measures as columns
        (plus queries, pool recall and headroom for rerankers)."""
        import pandas as pd

        records = []
        for r in self.stage_table.rows:
            c = r.ceiling
            records.append({"id": r.id, "stage": r.stage, "type": r.type, "inputs": ",".join(r.inputs), **r.metrics,
                            "queries": r.queries, "pool_depth": c and c.depth, "pool_recall": c and c.pool_recall,
                            "oracle_ndcg10": c and c.oracle_ndcg10, "headroom_captured": c and c.headroom_captured})  # fmt: skip
        return pd.DataFrame.from_records(records).set_index("stage")

    @property
    def measures(self) -> list[str]:
        return list(self.stage_table.metrics)

    @property
    def per_query(self):
        """Per-query values as a long pandas DataFrame: stage, qid, one column per measure."""
        import pandas as pd

        records = [{"stage": s, "qid": q, **{m: values[m][q] for m in values}}
                   for s, values in self.per_query_values.items() for q in next(iter(values.values()), {})]  # fmt: skip
        return pd.DataFrame.from_records(records)

    def save(self, folder: str | Path) -> Path:
        """Copy the results folder to ``folder``, under the rule every results folder follows:
        ``folder`` is absent, empty, or a results folder stagebench wrote (docs/config.md). The
        copy is built beside it and swapped in complete, so a copy that fails half-way leaves
        the old folder as it was. Saving a result into its own folder changes nothing."""
        dest = Path(folder)
        if dest.exists() and not dest.is_symlink() and dest.resolve() == self.output.resolve():
            return dest
        RunFolder.open(self.output)  # the source is still a results folder
        check_apart(self.output, "results folder", dest, "copy")
        check_destination(dest, RESULTS)
        tmp = staging(dest)
        try:
            shutil.copytree(self.output, tmp, dirs_exist_ok=True)
            check_destination(dest, RESULTS)  # it may have changed while the copy ran
            swap_in(tmp, dest, kept=RESULTS.kept)
        except BaseException:
            remove_staging(tmp)
            raise
        return dest

    def __repr__(self) -> str:
        return f"Result({self.output}, stages={[r.stage for r in self.stage_table.rows]})"


def run(config: Config | Mapping[str, Any] | str | Path, output: str | Path | None = None,
        cache_dir: str | None = None, recompute: bool = False, engine: str | None = None) -> Result:  # fmt: skip
    """Run a config (path, mapping or Config) and return its :class:`Result`; ``engine``: local or
    ray for every stage (default: what the config says)."""
    res: RunResult = run_config(config_from(config, engine), output, cache_dir=cache_dir, recompute=recompute)
    return Result(output=res.output, stage_table=res.table, runs=res.runs, per_query_values=res.per_query,
                  table_text=res.table_text)  # fmt: skip


def evaluate(qrels: Mapping[Any, Mapping[Any, Any]], run: Mapping[Any, Mapping[Any, Any]],
             measures: Iterable[Measure | str], *, relevance_threshold: int = 1, gain: Any = "linear") -> Evaluation:  # fmt: skip
    """Score ``run`` ({qid: {docid: score}}) against ``qrels`` ({qid: {docid: grade}}) as
    ``stagebench eval`` scores files: ids checked as every loader checks them (strings, or
    integers read as their decimal strings; no null, float, whitespace or newline), scores
    finite, grades integers - anything else is one :class:`~stagebench.errors.DataError`
    naming the query and document."""
    return _evaluate(checked_qrels(qrels, "qrels"), checked_run(run, "run"), measures,
                     relevance_threshold=relevance_threshold, gain=gain)  # fmt: skip
