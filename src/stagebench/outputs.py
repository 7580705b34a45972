"""The files a command writes at a path the user names, each declared once: what it is, the mark a
file stagebench wrote for it carries, and so whether a later run may replace it
(:class:`stagebench.files.OutputFile`, one rule for all of them). None is ever written inside a
folder stagebench keeps a record of (:data:`OWNED`: a results folder, a generated dataset, a tuning
folder, a trained model) unless that folder keeps it (a results folder's ``expected.yaml``):
a file it does not record makes stagebench refuse the folder later as changed.

* ``incompleteness --json`` and ``plan-judgments --simulate --json``: JSON whose first key is
  ``"written_by": "stagebench <the option>"``; replaced when it carries that key;
* ``incompleteness --plot``: a PNG with a text chunk naming the option; replaced when it has it;
* ``plan-judgments --output``: the worksheet (.csv and .jsonl); never replaced (raters may have
  filled it), except by the very bytes the same plan writes (a run cut short, run again);
* ``check EXPECTED --update``: YAML whose ``stages`` is a mapping (an expected-values file, edited
  by hand since or not);
* ``reproduce --matrix``: Markdown whose first line is a comment naming it (or an older
  stagebench's matrix);
* ``stagebench.api.write_trec_run``: a TREC run file, replacing only an empty file or another TREC run.

Folders (``run --output``, ``add-judgments --output``, ...) have their own rule
(:func:`stagebench.files.check_destination`), and are refused inside a folder of :data:`OWNED` too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from stagebench.data.synthetic import DATASET
from stagebench.errors import StagebenchError
from stagebench.files import OutputFile, check_outside, check_output_file, first_line_mark, json_mark, png_mark
from stagebench.files import with_png_chunk, write_output_file
from stagebench.record import MODEL, TUNED
from stagebench.params import build
from stagebench.results.check import Expected
from stagebench.results.folder import RESULTS

#: the folders stagebench keeps a record of: no output file goes inside one
OWNED = (RESULTS, DATASET, TUNED, MODEL)


@dataclass(frozen=True)
class JsonOutput:
    """A JSON output: the object written with ``written_by`` first."""

    purpose: str

    @property
    def out(self) -> OutputFile:
        return OutputFile(f"{self.purpose} file", json_mark(self.purpose)[1])

    def write(self, path: str | Path, obj: dict) -> None:
        text = json.dumps({"written_by": json_mark(self.purpose)[0], **obj}, indent=2) + "\n"
        write_output_file(path, text, self.out, OWNED)


@dataclass(frozen=True)
class PngOutput:
    """A PNG output: the image with a text chunk naming the purpose."""

    purpose: str

    @property
    def out(self) -> OutputFile:
        return OutputFile(f"{self.purpose} image", png_mark(self.purpose)[1])

    def write(self, path: str | Path, png: bytes) -> None:
        write_output_file(path, with_png_chunk(png, png_mark(self.purpose)[0]), self.out, OWNED)


INCOMPLETENESS_JSON = JsonOutput("incompleteness --json")
INCOMPLETENESS_PLOT = PngOutput("incompleteness --plot")
SIMULATION_JSON = JsonOutput("plan-judgments --simulate --json")
#: a worksheet (either of its two files): never written over, whatever it holds
WORKSHEET = OutputFile("worksheet", lambda head: False, replace=False)


def _expected_values(head: bytes) -> bool:
    """An expected-values file: YAML that reads as :class:`stagebench.results.check.Expected` (written by
    ``check --update``, and maybe edited since: per-measure tolerances are added by hand)."""
    try:
        build(Expected, yaml.safe_load(head.decode("utf-8")), "expected")
    except (yaml.YAMLError, UnicodeDecodeError, StagebenchError):
        return False
    return True


#: ``stagebench check --update``'s file
EXPECTED = OutputFile("expected-values file", _expected_values)
MATRIX_MARK = "<!-- written_by: stagebench reproduce --matrix -->"
_MATRIX_FIRST = first_line_mark(MATRIX_MARK)
#: ``stagebench reproduce``'s Markdown matrix (an older stagebench's, without the mark line, too)
MATRIX = OutputFile("reproduction matrix", lambda head: _MATRIX_FIRST(head)
                    or head.startswith(b"# Reproductions\n\nWritten by `stagebench reproduce`"))  # fmt: skip


_TREC_LINE = re.compile(rb"^\S+[ \t]+\S+[ \t]+\S+[ \t]+-?\d+[ \t]+\S+[ \t]+\S+[ \t]*\r?$")
#: ``stagebench.api.write_trec_run``'s file: replaced only where it is a TREC run already (its first
#: line ``qid Q0 docid rank score tag``), or empty
TREC_RUN = OutputFile("TREC run file", lambda head: not head.strip() or bool(_TREC_LINE.match(head.split(b"\n", 1)[0])))


def check_file(path: str | Path | None, out: OutputFile) -> None:
    """Before any work: ``path`` (when given) may receive ``out`` (:func:`stagebench.files.check_output_file`)."""
    if path is not None:
        check_output_file(path, out, OWNED)


def check_folder(path: str | Path, what: str) -> None:
    """A new folder (a results folder, a tuning folder, ...) is not put inside a folder of :data:`OWNED`."""
    check_outside(path, what, OWNED)


def write_matrix(path: str | Path, text: str) -> None:
    write_output_file(path, f"{MATRIX_MARK}\n{text}", MATRIX, OWNED)


__all__ = ["EXPECTED", "INCOMPLETENESS_JSON", "INCOMPLETENESS_PLOT", "MATRIX", "OWNED", "SIMULATION_JSON", "TREC_RUN", "WORKSHEET",
           "JsonOutput", "PngOutput", "check_file", "check_folder", "write_matrix"]
