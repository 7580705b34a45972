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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from stagebench.errors import StagebenchError
from stagebench.files import file_digest
from stagebench.results.planning import Hole

#: the judgments add-judgments added to a folder, one a line, and the worksheets they came from
ADDED = "judgments/added.tsv"
SOURCES = "judgments/sources.json"
_ADDED_HEADER = ["qid", "docid", "grade", "source", "line", "rater", "replaced"]


def scale_text(scale: Mapping[int, str]) -> str:
    """The scale as a grade column's header names it: ``3 = E, 2 = S, 1 = C, 0 = I``."""
    return ", ".join(f"{g} = {name}" for g, name in sorted(scale.items(), reverse=True))


def grade_header(scale: Mapping[int, str]) -> str:
    return f"grade ({scale_text(scale)})"


def worksheet_rows(holes: Sequence[Hole], queries: Mapping[str, str], docs: Mapping[str, str],
                   stages: Sequence[str]) -> list[dict]:  # fmt: skip
    return [{"qid": h.qid, "query": queries.get(h.qid, ""), "docid": h.docid, "document": docs.get(h.docid, ""),
             **{f"rank_{s}": h.ranks.get(s) for s in stages}, "weight": h.weight} for h in holes]  # fmt: skip


def worksheet_csv(rows: Sequence[dict], scale: Mapping[int, str]) -> str:
    buf = io.StringIO()
    fields = [*rows[0], grade_header(scale), "rater"] if rows else ["qid", "docid", grade_header(scale), "rater"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for r in rows:
        w.writerow([("" if v is None else v) for v in r.values()] + ["", ""])
    return buf.getvalue()


def worksheet_jsonl(rows: Sequence[dict], scale: Mapping[int, str]) -> str:
    text = scale_text(scale)
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


def _grade(value: object, scale: Mapping[int, str]) -> int | None | str:
    """The grade a cell holds (a number on the scale or a label name); None: empty; str: why not."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        return f"{value!r} is not a grade"
    names = {name.lower(): g for g, name in scale.items()}
    text = str(value).strip()
    if text.lower() in names:
        return names[text.lower()]
    try:
        g = int(text) if not isinstance(value, float) or value.is_integer() else None
    except ValueError:
        g = None
    if g is None or g not in scale:
        return f"grade {text!r} is not on the scale ({scale_text(scale)})"
    return g


def read_worksheet(path: str | Path, index: int, scale: Mapping[int, str], queries: Sequence[str],
                   read_at: str) -> tuple[list[Graded], Source, list[str]]:  # fmt: skip
    """Every graded row of one worksheet (CSV, or JSONL by its ``.jsonl`` name), its source record,
    and one line per bad row (file, line, value); a row with an empty grade is left out."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise StagebenchError(f"{p}: cannot read the worksheet ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise StagebenchError(f"{p}: not a UTF-8 text file (a worksheet is CSV or JSONL)") from None
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
    else:
        reader = csv.DictReader(io.StringIO(text))
        fields = reader.fieldnames or []
        grade_cols = [f for f in fields if f.strip().lower().startswith("grade")]
        if len(grade_cols) != 1:
            raise StagebenchError(f"{p}: line 1: expected one grade column (a header starting with 'grade'), found "
                                  f"{len(grade_cols)}")  # fmt: skip
        grade_key = grade_cols[0]
        records = [(i, row) for i, row in enumerate(reader, start=2)]
    if records and not all(k in records[0][1] for k in ("qid", "docid")):
        raise StagebenchError(f"{p}: the worksheet needs the columns qid and docid (a worksheet plan-judgments wrote)")
    known = set(queries)
    graded, bad, raters = [], [], set()
    for i, r in records:
        g = _grade(r.get(grade_key), scale)
        if g is None:
            continue
        qid, docid = str(r.get("qid") or "").strip(), str(r.get("docid") or "").strip()
        if isinstance(g, str):
            bad.append(f"{p}: line {i}: {g}")
        elif not qid or not docid:
            bad.append(f"{p}: line {i}: a grade without a qid and a docid")
        elif qid not in known:
            bad.append(f"{p}: line {i}: query {qid!r} is not a query of this results folder")
        else:
            rater = str(r.get("rater") or "").strip()
            raters.add(rater) if rater else None
            graded.append(Graded(qid, docid, g, index, i, rater))
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


__all__ = ["ADDED", "SOURCES", "Graded", "Merged", "Source", "added_tsv", "grade_header", "merge", "read_worksheet",
           "scale_text", "sources_json", "sources_note", "worksheet_csv", "worksheet_jsonl", "worksheet_rows"]
