"""The judge's pairs and grades on a finished run: which pairs it is asked (the holes in every
stage's top ``depth``, pooled so each pair is asked once, and a seeded sample of judged pairs from
the same pool for its agreement), its grades as a file of the results folder
(``judge/judgments.tsv``), and the qrels they fill (human labels first, the judge's for the holes,
flagged in a side file so any evaluator can tell them apart).
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stagebench.errors import StagebenchError
from stagebench.metrics import parse_measure
from stagebench.record import JudgeRecord, Manifest
from stagebench.judgments.agreement import Agreement, agreement
from stagebench.results.scoring import Scored, score_folder
from stagebench.runs import Run, ranked_ids
from stagebench.table import StageTable

HOLE, SAMPLE = "hole", "sample"
JUDGMENTS = "judge/judgments.tsv"
FILLED_QRELS = "judge/qrels.filled.trec"
FILLED_FLAGS = "judge/qrels.filled.source.tsv"
_HEADER = ["qid", "docid", "purpose", "grade", "outcome"]


@dataclass(frozen=True)
class Judgment:
    """The judge's grade of one pair (None: its answer was unusable or the request failed)."""

    qid: str
    docid: str
    purpose: str  # hole | sample
    grade: int | None
    outcome: str  # ok | repaired | unusable | failed


def pool(runs: Mapping[str, Run], stages: Sequence[str], qrels: Mapping[str, Mapping[str, int]], queries: Sequence[str],
         depth: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:  # fmt: skip
    """(holes, judged): every (query, document) in the top ``depth`` of any of ``stages`` over the
    scored ``queries``, each once, in query order then first appearance (stage order, rank)."""
    holes: list[tuple[str, str]] = []
    judged: list[tuple[str, str]] = []
    for q in queries:
        seen: set[str] = set()
        for s in stages:
            for d in ranked_ids(runs[s].get(q, {}))[:depth]:
                if d not in seen:
                    seen.add(d)
                    (judged if d in qrels.get(q, {}) else holes).append((q, d))
    return holes, judged


def sample(judged: Sequence[tuple[str, str]], n: int, seed: int) -> list[tuple[str, str]]:
    """A seeded sample of ``n`` judged pairs (all of them when there are fewer), in pool order."""
    if n >= len(judged):
        return list(judged)
    picked = set(random.Random(seed).sample(range(len(judged)), n))
    return [p for i, p in enumerate(judged) if i in picked]


def judgments_tsv(judgments: Sequence[Judgment]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(_HEADER)
    for j in judgments:
        w.writerow([j.qid, j.docid, j.purpose, "" if j.grade is None else j.grade, j.outcome])
    return buf.getvalue()


def read_judgments(text: str, where: str) -> list[Judgment]:
    rows = list(csv.reader(io.StringIO(text), delimiter="\t"))
    if not rows or rows[0] != _HEADER:
        raise StagebenchError(f"{where}: not a judgments file (a header {' '.join(_HEADER)!r}, tab separated, expected)")
    out = []
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(_HEADER) or r[2] not in (HOLE, SAMPLE):
            raise StagebenchError(f"{where}: line {i}: expected qid, docid, purpose (hole|sample), grade, outcome")
        try:
            grade = int(r[3]) if r[3] != "" else None
        except ValueError:
            raise StagebenchError(f"{where}: line {i}: grade {r[3]!r} is not an integer") from None
        out.append(Judgment(r[0], r[1], r[2], grade, r[4]))
    return out


def filled_qrels(qrels: Mapping[str, Mapping[str, int]], judgments: Sequence[Judgment]) -> tuple[dict, list[tuple[str, str, int]]]:
    """The human qrels with the judge's grades added for the holes it graded (a human label is never
    replaced), and the (qid, docid, grade) the judge added."""
    filled = {q: dict(docs) for q, docs in qrels.items()}
    added = []
    for j in judgments:
        if j.purpose == HOLE and j.grade is not None and j.docid not in filled.get(j.qid, {}):
            filled.setdefault(j.qid, {})[j.docid] = j.grade
            added.append((j.qid, j.docid, j.grade))
    return filled, added


def sources_tsv(qrels: Mapping[str, Mapping[str, int]], added: Sequence[tuple[str, str, int]]) -> str:
    """The side file of the filled qrels: every (qid, docid) with who labelled it (human | judge)."""
    by_judge = {(q, d) for q, d, _ in added}
    lines = ["qid\tdocid\tsource"]
    for q in sorted(qrels):
        lines += [f"{q}\t{d}\t{'judge' if (q, d) in by_judge else 'human'}" for d in sorted(qrels[q])]
    return "\n".join(lines) + "\n"


@dataclass
class JudgeResults:
    """What the judge's grades say about a folder: the judge-filled stage table (never mixed with the
    human one), its agreement with the human labels, and the filled qrels with who labelled what."""

    record: JudgeRecord
    table: StageTable
    agreement: Agreement
    filled: dict
    added: list[tuple[str, str, int]]
    scored: Scored


def judge_results(manifest: Manifest, qrels: dict, runs: dict[str, Run], judgments: Sequence[Judgment]) -> JudgeResults:
    record = manifest.judge
    assert record is not None
    ev = manifest.evaluation
    stages = manifest.stage_names
    filled, added = filled_qrels(qrels, judgments)
    smp = [j for j in judgments if j.purpose == SAMPLE]
    agr = agreement([(j.qid, j.docid) for j in smp], [j.grade for j in smp], qrels, sorted(record.scale), runs, stages,
                    [parse_measure(m).name for m in ev.metrics], ev.relevance_threshold, ev.gain, int(record.params.get(
                        "bootstrap", 1000)), int(record.params.get("sample_seed", 13)))  # fmt: skip
    scored = score_folder(manifest, filled, runs)
    t = scored.table
    model = record.params.get("model", "?")
    k = "-" if agr.weighted_kappa is None else f"{agr.weighted_kappa:.3f}"
    ci = "" if not agr.weighted_kappa_ci else f" [{agr.weighted_kappa_ci[0] + 0.0:.3f}, {agr.weighted_kappa_ci[1] + 0.0:.3f}]"
    holes_left = record.holes - len(added)
    if record.params.get("backend") == "rules":
        t.title = f"True stage table: {manifest.name} - every hole graded by the synthetic generator's own rules"
        who = "the generator's rules (a perfect judge of this dataset)"
    else:
        t.title = f"Judge-filled stage table: {manifest.name} - NOT human judgments"
        who = f"the LLM judge {model}"
    t.notes = [f"labels: the human qrels plus {len(added):,} grades by {who} for unjudged documents in the "
               f"top {record.depth} of {', '.join(record.stages)} ({holes_left:,} of the {record.holes:,} pooled holes "
               "stay holes: unusable answers or failed requests); human labels are never replaced",
               f"the judge's agreement with the human labels on {agr.pairs} judged pairs it graded blind: linear-weighted "
               f"Cohen's kappa {k}{ci} (95% bootstrap), exact agreement "
               f"{'-' if agr.exact is None else f'{100 * agr.exact:.1f}%'} (judge/agreement.txt); read every number "
               "below through it", *t.notes]  # fmt: skip
    return JudgeResults(record, t, agr, filled, added, scored)
