"""A results folder: what makes one (:data:`RESULTS`, the rule for replacing it), its manifest
written with every file's sha256 (:func:`write_manifest`), and :class:`RunFolder`, the one reader
of a finished folder - every file it reads verified against those digests first."""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stagebench.errors import StagebenchError
from stagebench.files import (STAGING_MARK, Owned, atomic_write, check_destination, file_digest, inventory, recover_set_aside,
                              remove_staging, staging, swap_in)
from stagebench.metrics import parse_measure
from stagebench.record import MANIFEST, Manifest, StageRecord
from stagebench.results.queries import TEXTS_FILE, read_texts
from stagebench.runs import Run, read_trec_qrels, read_trec_run
from stagebench.table import StageTable


#: files a results folder may hold that no run writes (``stagebench check``'s expected values,
#: committed next to the results; the screenshots ``make report-check`` takes): a new run into
#: the folder carries them over, never deletes them
KEPT_FILES = ("expected.yaml", "plots/explorer.png", "report_screenshot.png")


def _recorded_files(folder: Path) -> dict[str, str] | str:
    try:
        return Manifest.read(folder).files
    except StagebenchError as exc:
        return str(exc).removeprefix(f"{folder}: ")


#: the one rule for replacing a results folder (``run``, ``Result.save``): every file in it,
#: at every depth, hidden ones included, is listed in its manifest with the digest it has now
RESULTS = Owned("results folder", MANIFEST, _recorded_files, frozenset(KEPT_FILES))


def write_manifest(folder: Path, manifest: Manifest, written: Iterable[str] | None = None) -> Manifest:
    """Write ``manifest.json`` with the sha256 of every file the folder holds that stagebench
    wrote: ``written`` (relative paths, plus those the manifest already lists), or, when None,
    every file in the folder (a staging folder: nothing in it is anyone else's)."""
    if written is None:
        files = inventory(folder, leave_out={MANIFEST, STAGING_MARK, *KEPT_FILES})
    else:
        rels = sorted({*manifest.recorded_files, *written} - {MANIFEST, *KEPT_FILES})
        files = {r: file_digest(folder / r) for r in rels if (folder / r).is_file()}
    manifest = manifest.with_files(files)
    atomic_write(folder / MANIFEST, manifest.dumps())
    return manifest


def _linked_copy(src: Path, dst: Path) -> None:
    """``src``'s tree into the existing folder ``dst``: hard links where the file system has them (the
    copy costs no space), else copies. An error is the OSError itself, naming its path (not
    shutil.copytree's list of them)."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        for d in dirnames:
            (dst / rel / d).mkdir(exist_ok=True)
        for f in filenames:
            try:
                os.link(Path(dirpath) / f, dst / rel / f)
            except FileExistsError:
                raise
            except OSError:
                shutil.copy2(Path(dirpath) / f, dst / rel / f)


@contextmanager
def rewritten(folder: Path) -> Iterator[Path]:
    """A finished results folder changed as a whole or not at all (``judge``, ``table``,
    ``incompleteness --report``): the block writes into a copy built beside it (hard links: every
    file is replaced by :func:`~stagebench.files.atomic_write`, never written in place, so the
    original's files are never touched), which is swapped in when the block ends. An error or a
    kill on the way leaves the folder as it was and the copy for the next run to remove. The block
    reads the files it needs verified (a changed one is refused as changed); before the swap, the
    folder must still hold only what stagebench wrote."""
    tmp = staging(folder)
    try:
        _linked_copy(folder, tmp)
        yield tmp
        check_destination(folder, RESULTS)  # it may have changed meanwhile
        swap_in(tmp, folder)
    except BaseException:
        remove_staging(tmp)
        raise


@dataclass
class RunFolder:
    """A finished results folder, read one way by ``table``, ``check``, ``compare`` and the
    report: the manifest, then - verified against the digests it recorded - the qrels and
    runs, or the stored stage table and per-query values."""

    path: Path
    manifest: Manifest

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        recover_set_aside(Path(path))  # a replacement killed half-way: the folder as it was, first
        return cls(Path(path), Manifest.read(Path(path)))

    @property
    def stages(self) -> list[StageRecord]:
        return self.manifest.stages

    @property
    def metrics(self) -> list[str]:
        """The measure columns, as the alias table spells them."""
        return [parse_measure(m).name for m in self.manifest.evaluation.metrics]

    def verified(self, rel: str) -> Path:
        """The path of ``rel`` in the folder, after checking it against the manifest: recorded
        there, present, and with the sha256 the manifest holds. Anything else is one error
        naming the file; nothing is ever read unverified or replaced by a fallback."""
        p = self.path / rel
        files = self.manifest.files
        if rel not in files:
            raise StagebenchError(f"{p}: not recorded in {self.path / MANIFEST} (no run wrote it there), so it cannot "
                                  "be verified")  # fmt: skip
        if not p.is_file():
            if rel.startswith(("runs/", "qrels")) and not self.holds_any_run():
                config = self.manifest.config_path or "its config"
                raise StagebenchError(f"{self.path}: its runs and qrels are missing: a committed results folder keeps "
                                      f"its tables (stage_table.txt, report.html), not what they were scored from; run "
                                      f"`stagebench run {config}` to rebuild it whole (for results/default: make bench-publish; "
                                      "make bench writes build/default) (stagebench check --stored-table checks the stored "
                                      "table instead)")  # fmt: skip
            raise StagebenchError(f"{p}: missing; {MANIFEST} records it (the folder is incomplete: run its config "
                                  "again{})".format(", or check the stored table with stagebench check --stored-table"
                                                    if rel.startswith(("runs/", "qrels")) else ""))  # fmt: skip
        if file_digest(p) != files[rel]:
            raise StagebenchError(f"{p}: changed after the run (its sha256 differs from the one in {MANIFEST}); "
                                  "run the config again")  # fmt: skip
        return p

    def holds_any_run(self) -> bool:
        """Whether any of the runs or qrels the manifest records is here."""
        return any((self.path / r).is_file() for r in self.manifest.files if r.startswith(("runs/", "qrels")))

    def holds(self, rel: str) -> bool:
        """Whether the manifest records ``rel`` and it is here (a committed folder holds its
        tables but not its runs); reading it still verifies it."""
        return rel in self.manifest.files and (self.path / rel).is_file()

    def holds_runs(self) -> bool:
        """Whether the folder holds what its runs were scored from: every stage's run files and the
        qrels (True), or none of them (False: a committed folder keeps its tables only). Some present
        and some missing is an incomplete folder: one error naming the first file missing."""
        wanted = ["qrels.trec", *(f"runs/{n}.trec" for s in self.stages for n in (s.name, *s.depth_runs))]
        recorded = [rel for rel in wanted if rel in self.manifest.files]
        here = [rel for rel in recorded if (self.path / rel).is_file()]
        if here and len(here) < len(recorded):
            missing = next(rel for rel in recorded if rel not in here)
            raise StagebenchError(f"{self.path / missing}: missing; {MANIFEST} records it and the folder holds the other "
                                  "runs (the folder is incomplete: run its config again)")  # fmt: skip
        return bool(here) and len(here) == len(wanted)

    def qrels(self) -> dict:
        return read_trec_qrels(self.verified("qrels.trec"))

    def runs(self) -> dict[str, Run]:
        """Every stage's run and its depth-sweep runs, each file verified first."""
        runs = {}
        for s in self.stages:
            for name in (s.name, *s.depth_runs):
                runs[name] = read_trec_run(self.verified(f"runs/{name}.trec"))
        return runs

    def table(self) -> StageTable:
        return StageTable.from_json(self.verified("stage_table.json").read_text(encoding="utf-8"), self.metrics)

    def texts(self) -> dict:
        return read_texts(self.verified(TEXTS_FILE))

    def per_query(self) -> dict[str, dict[str, dict[str, float]]]:
        """stage -> measure -> qid -> value, from per_query.csv (verified), stages in pipeline order."""
        path = self.verified("per_query.csv")
        out: dict[str, dict[str, dict[str, float]]] = {}
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            measures = [c for c in reader.fieldnames or [] if c not in ("stage", "qid")]
            for row in reader:
                values = out.setdefault(row["stage"], {m: {} for m in measures})
                for m in measures:
                    values[m][row["qid"]] = float(row[m])
        return out
