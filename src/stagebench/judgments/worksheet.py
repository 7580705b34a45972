"""The judging worksheet: the pairs a plan sends to raters, as CSV or JSONL (query id and text,
document id and text, each stage's rank of it, an empty grade column whose header names the scale,
an optional rater column), and the same file read back with every grade checked against the scale
(``stagebench add-judgments``), merged into a folder's qrels with a record of where each judgment
came from (:data:`ADDED`, :data:`SOURCES`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from stagebench.data.esci import DEFAULT_LABELS, ESCI_LABEL_NAMES
from stagebench.errors import StagebenchError
from stagebench.files import file_digest
from stagebench.judgments.planning import Hole
from stagebench.textfile import utf16

#: the judgments add-judgments added to a folder, one a line, and the worksheets they came from
ADDED = "judgments/added.tsv"
SOURCES = "judgments/sources.json"
_ADDED_HEADER = ["qid", "docid", "grade", "source", "line", "rater", "replaced"]


def scale_text(scale: Mapping[int, str]) -> str:
    """The scale as a grade column's header names it: ``3 = E, 2 = S, 1 = C, 0 = I``."""
    return ", ".join(f"{g} = {name}" for g, name in sorted(scale.items(), reverse=True))


#: what each ESCI label means, for the raters (the Shopping Queries dataset's own definitions, shortened)
ESCI_DEFINITIONS = {
    3: "Exact: the product is relevant for the query and satisfies all its specifications",
    2: "Substitute: somewhat relevant; fails some aspect of the query but can serve as a functional substitute",
    1: "Complement: does not fulfil the query but could be used together with an exact item",
    0: "Irrelevant: irrelevant for the query, or fails a central aspect of it",
}


def grade_header(scale: Mapping[int, str]) -> str:
    """The grade column's header: the scale, each label defined where the scale is ESCI's."""
    if dict(scale) == ESCI_LABEL_NAMES:
        return "grade (" + "; ".join(f"{g} = {scale[g]} = {ESCI_DEFINITIONS[g]}" for g in sorted(scale, reverse=True)) + ")"
    return f"grade ({scale_text(scale)})"


def worksheet_rows(holes: Sequence[Hole], queries: Mapping[str, str], docs: Mapping[str, str],
                   stages: Sequence[str], order: Sequence[str], show_ranks: bool = False,
                   extra: Mapping[tuple[str, str], dict] | None = None) -> list[dict]:  # fmt: skip
    """One row a hole, grouped by query (in ``order``, the folder's query order) and within a query by
    its best rank; blind: the stages' ranks (which stage found the product) only with ``show_ranks``;
    ``extra``: more columns for some rows (a sampling round's unit and probability)."""
    at = {q: i for i, q in enumerate(order)}
    rows = []
    for h in sorted(holes, key=lambda h: (at.get(h.qid, len(at)), h.best_rank, h.docid)):
        row = {"qid": h.qid, "query": queries.get(h.qid, ""), "docid": h.docid, "document": docs.get(h.docid, "")}
        if show_ranks:
            row |= {f"rank_{s}": h.ranks.get(s) for s in stages}
        rows.append(row | dict((extra or {}).get((h.qid, h.docid), {})))
    return rows


def worksheet_csv(rows: Sequence[dict], scale: Mapping[int, str]) -> str:
    buf = io.StringIO()
    fields = [*rows[0], grade_header(scale), "rater"] if rows else ["qid", "docid", grade_header(scale), "rater"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for r in rows:
        w.writerow([("" if v is None else v) for v in r.values()] + ["", ""])
    return buf.getvalue()


def worksheet_jsonl(rows: Sequence[dict], scale: Mapping[int, str]) -> str:
    text = grade_header(scale)[len("grade ("):-1]
    return "".join(json.dumps({**r, "grade": None, "grade_scale": text, "rater": None}, ensure_ascii=False) + "\n"
                   for r in rows)  # fmt: skip


@dataclass(frozen=True)
class Graded:
    """One graded row of a worksheet."""

    qid: str
    docid: str
    grade: int
    source: int  # index into the sources
    line: int
    rater: str
    probability: str = ""  # a sampling round's row: its probability as the worksheet holds it
    round: str = ""  # a sampling round's row: the round's id (its record's)


@dataclass(frozen=True)
class Source:
    """A worksheet that added judgments: where it was, its sha256, what it held."""

    path: str
    sha256: str
    rows: int
    graded: int
    raters: list[str]
    added: int = 0
    read_at: str = ""


def grade_aliases(scale: Mapping[int, str]) -> dict[str, int]:
    """Every way a worksheet may write a grade, lower-cased: the scale's names (``E``), and for ESCI's
    scale its labels in full (``exact``, ``Substitute``)."""
    names = {name.lower(): g for g, name in scale.items()}
    if dict(scale) == ESCI_LABEL_NAMES:
        names |= {label.lower(): g for label, g in DEFAULT_LABELS.items()}
    return names


def _grade(value: object, scale: Mapping[int, str], aliases: Mapping[str, int]) -> int | None | str:
    """The grade a cell holds (a number on the scale, as ``3``, ``3.0`` or ``3,0``, or a label in
    any case); None: empty; str: why not."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        return f"{value!r} is not a grade"
    text = str(value).strip()
    if text.lower() in aliases:
        return aliases[text.lower()]
    number = text.replace(",", ".", 1) if text.count(",") == 1 and "." not in text else text
    try:
        x = float(number)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x.is_integer() and int(x) in scale):
        full = [label for label, g in DEFAULT_LABELS.items() if len(label) > 1] if dict(scale) == ESCI_LABEL_NAMES else []
        return f"grade {text!r} is not on the scale ({scale_text(scale)}{'; in full: ' + ', '.join(full) if full else ''})"
    return int(x)


#: the separators a worksheet's CSV may use: a spreadsheet saves with ',' or, in locales whose decimal
#: mark is a comma, ';' (and may say so on a first line ``sep=;``); tab-separated text too
SEPARATORS = (",", ";", "\t")


def _csv_records(p: Path, text: str) -> tuple[list[tuple[int, dict]], str]:
    """A CSV worksheet's rows (line number, column -> cell; column names stripped, ``qid``, ``docid``
    and ``rater`` in any case), and the name of its grade column."""
    lines = text.splitlines(keepends=True)
    first = 1
    sep = None
    if lines and lines[0].strip().lower().startswith("sep=") and len(lines[0].strip()) == 5:
        sep, first, lines = lines[0].strip()[4], 2, lines[1:]
    body = "".join(lines)
    header = lines[0] if lines else ""

    def names(delimiter: str) -> list[str]:
        return [c.strip() for c in next(csv.reader([header], delimiter=delimiter), [])]

    if sep is None:
        sep = next((d for d in SEPARATORS if {"qid", "docid"} <= {c.lower() for c in names(d)}), None)
    if sep is None:
        raise StagebenchError(f"{p}: line {first}: no qid and docid columns (read with ',', ';' and tab as the "
                              f"separator; a worksheet plan-judgments wrote has them)")  # fmt: skip
    fields = names(sep)
    canonical = {c: c.lower() if c.lower() in ("qid", "docid", "rater") else c for c in fields}
    grade_cols = [c for c in fields if c.lower().startswith("grade")]
    if len(grade_cols) != 1:
        raise StagebenchError(f"{p}: line {first}: expected one grade column (a header starting with 'grade'), found "
                              f"{len(grade_cols)}")  # fmt: skip
    reader = csv.reader(io.StringIO(body), delimiter=sep)
    next(reader, None)
    records = []
    for i, row in enumerate(reader, start=first + 1):
        if not any(c.strip() for c in row):
            continue
        records.append((i, {canonical[c]: v for c, v in zip(fields, row)}))
    return records, grade_cols[0]


def read_worksheet(path: str | Path, index: int, scale: Mapping[int, str], queries: Container[str],
                   read_at: str, docs: Container[str] | None = None) -> tuple[list[Graded], Source, list[str]]:  # fmt: skip
    """Every graded row of one worksheet (CSV, or JSONL by its ``.jsonl`` name), its source record,
    and one line per bad row (file, line, value); a row with an empty grade is left out. Read as
    raters' tools write it: a byte-order mark, CRLF line ends, ',' ';' or tab as the separator,
    columns in any order and extra ones, grades as numbers (``3``, ``3.0``) or labels in any case.
    A row naming a query not in ``queries``, or a document not in ``docs`` (when given), is bad."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if utf16(raw) is not None:  # its NULs decode as UTF-8: the columns would be "missing", not the encoding
            raise StagebenchError(f"{p}: the worksheet is saved as {utf16(raw)}, not UTF-8 (a spreadsheet saves it "
                                  "as 'CSV UTF-8')")  # fmt: skip
        text = raw.decode("utf-8-sig")
    except OSError as exc:
        raise StagebenchError(f"{p}: cannot read the worksheet ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise StagebenchError(f"{p}: not a UTF-8 text file (a worksheet is CSV or JSONL; a spreadsheet saves it as "
                              "'CSV UTF-8')") from None  # fmt: skip
    records: list[tuple[int, dict]] = []
    if p.suffix.lower() == ".jsonl":
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise StagebenchError(f"{p}: line {i}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise StagebenchError(f"{p}: line {i}: expected a JSON object")
            records.append((i, obj))
        grade_key = "grade"
        if records and not all(k in records[0][1] for k in ("qid", "docid")):
            raise StagebenchError(f"{p}: line {records[0][0]}: the worksheet needs the keys qid and docid (a worksheet "
                                  "plan-judgments wrote)")  # fmt: skip
    else:
        records, grade_key = _csv_records(p, text)
    aliases = grade_aliases(scale)
    graded, bad, raters = [], [], set()
    for i, r in records:
        g = _grade(r.get(grade_key), scale, aliases)
        if g is None:
            continue
        qid, docid = str(r.get("qid") or "").strip(), str(r.get("docid") or "").strip()
        if isinstance(g, str):
            bad.append(f"{p}: line {i}: {g}")
        elif not qid or not docid:
            bad.append(f"{p}: line {i}: a grade without a qid and a docid")
        elif qid not in queries:
            bad.append(f"{p}: line {i}: query {qid!r} is not a query of this results folder")
        elif docs is not None and docid not in docs:
            bad.append(f"{p}: line {i}: document {docid!r} is not in the dataset's corpus")
        else:
            rater = str(r.get("rater") or "").strip()
            raters.add(rater) if rater else None
            graded.append(Graded(qid, docid, g, index, i, rater, str(r.get("probability") or "").strip(),
                                 str(r.get("round") or "").strip()))
    return graded, Source(str(p), file_digest(p), len(records), len(graded), sorted(raters), read_at=read_at), bad


@dataclass
class Merged:
    qrels: dict[str, dict[str, int]]
    added: list[tuple[Graded, int | None]]  # each judgment that went in, with the human grade it replaced
    sources: list[Source]
    kept: int  # graded rows that matched a grade already there (or lost to --prefer existing)


def merge(qrels: Mapping[str, Mapping[str, int]], graded: Sequence[Graded], sources: Sequence[Source],
          prefer: str | None) -> Merged | list[str]:  # fmt: skip
    """The qrels with the worksheets' grades added; or, when any pair is graded twice differently
    across the worksheets, or differently from the folder's human grade without ``prefer``
    (``existing`` | ``worksheet``), one line per such pair."""
    first: dict[tuple[str, str], Graded] = {}
    bad = []
    for g in graded:
        seen = first.setdefault((g.qid, g.docid), g)
        if seen.grade != g.grade:
            bad.append(f"{sources[g.source].path}: line {g.line}: {g.qid} {g.docid} graded {g.grade}, but "
                       f"{sources[seen.source].path} line {seen.line} grades it {seen.grade}")  # fmt: skip
    if bad:
        return bad
    merged = {q: dict(d) for q, d in qrels.items()}
    added: list[tuple[Graded, int | None]] = []
    kept = 0
    for (q, d), g in first.items():
        old = qrels.get(q, {}).get(d)
        if old is None:
            merged.setdefault(q, {})[d] = g.grade
            added.append((g, None))
        elif old == g.grade or prefer == "existing":
            kept += 1
        elif prefer == "worksheet":
            merged[q][d] = g.grade
            added.append((g, old))
        else:
            bad.append(f"{sources[g.source].path}: line {g.line}: {q} {d} graded {g.grade}, but the folder's qrels "
                       f"grade it {old} (say which wins: --prefer existing or --prefer worksheet)")  # fmt: skip
    if bad:
        return bad
    counts = [sum(1 for g, _ in added if g.source == i) for i in range(len(sources))]
    return Merged(merged, added, [Source(**{**asdict(s), "added": n}) for s, n in zip(sources, counts)], kept)


def added_tsv(m: Merged) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(_ADDED_HEADER)
    for g, old in sorted(m.added, key=lambda x: (x[0].qid, x[0].docid)):
        w.writerow([g.qid, g.docid, g.grade, m.sources[g.source].sha256[:16], g.line, g.rater, "" if old is None else old])
    return buf.getvalue()


def sources_json(m: Merged, from_folder: str) -> str:
    return json.dumps({"from": from_folder, "added": len(m.added), "replaced": sum(1 for _, o in m.added if o is not None),
                       "already_there": m.kept, "sources": [asdict(s) for s in m.sources]}, indent=2) + "\n"  # fmt: skip


def sources_note(text: str) -> str:
    """The stage table's line on where the added judgments came from (from :data:`SOURCES`)."""
    rec = json.loads(text)
    each = "; ".join(f"{Path(s['path']).name} (sha256 {s['sha256'][:12]}, {s['added']} added"
                     + (f", raters {', '.join(s['raters'])}" if s["raters"] else "") + ")" for s in rec["sources"])  # fmt: skip
    replaced = f", {rec['replaced']} of them replacing a human grade" if rec["replaced"] else ""
    return (f"judgments: the qrels of {rec['from']} plus {rec['added']} added by stagebench add-judgments{replaced}: "
            f"{each} ({ADDED} lists each one)")  # fmt: skip


__all__ = ["ADDED", "ESCI_DEFINITIONS", "SEPARATORS", "SOURCES", "Graded", "Merged", "Source", "added_tsv", "grade_aliases", "grade_header", "merge", "read_worksheet",
           "scale_text", "sources_json", "sources_note", "worksheet_csv", "worksheet_jsonl", "worksheet_rows"]
