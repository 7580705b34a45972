"""trec_eval 10.0's own test suite (``../shared/data/trec_eval_tests``, its README gives each command
line): every measure trec_eval prints there that stagebench can name, scored by ``stagebench eval``'s
own path (:func:`stagebench.api.evaluate_files`: the same readers, flags and query sets), agrees with
trec_eval to its 4 printed decimals on every query and on ``all`` - or differs exactly as
:data:`PINNED` says, each difference named in docs/metrics.md#trec_eval-10. The measures no name
reaches are counted (``stagebench.metrics.trec_names.UNNAMED``). ``python -m
tests.parity.test_trec_eval_suite`` prints the measure x case table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stagebench import api
from stagebench.errors import StagebenchError
from stagebench.metrics import parse_measure, scored_query_ids
from stagebench.metrics.delegate import ir_measures_version
from stagebench.metrics.trec_names import unnamed
from stagebench.runs import read_trec_qrels
from tests.conftest import SHARED

#: case -> (expected output, qrels, run, eval's flags), as the suite's README lists them
CASES = {
    "plain": ("out.test", "qrels.test", "results.test", {}),
    "with-comments": ("out.test", "qrels.test.with-comments", "results.test", {}),
    "comment": ("out.comment.test", "qrels.comment.test", "results.comment.test", {}),
    "a": ("out.test.a", "qrels.test", "results.test", {}),
    "aq": ("out.test.aq", "qrels.test", "results.test", {}),
    "aqc": ("out.test.aqc", "qrels.test", "results.trunc", {"queries": "judged"}),
    "aqcM": ("out.test.aqcM", "qrels.test", "results.trunc", {"queries": "judged", "max_per_query": 100}),
    "aql": ("out.test.aql", "qrels.rel_level", "results.test", {"relevance_threshold": 2}),
    "meas_params": ("out.test.meas_params", "qrels.test", "results.test", {}),
}
#: trec_eval's ``-mndcg.1=3,2=9,4=4.5``: a gain table, which stagebench takes as the evaluation's gain
GAIN_TABLES = {"ndcg_1=3,2=9,4=4.5": ("nDCG", {0: 0.0, 1: 3.0, 2: 9.0, 4: 4.5})}
#: trec_eval's ``all`` of these is the sum over the queries; stagebench's is the mean, as for every measure
SUMMED = {"NumQ", "NumRet", "NumRel", "Hits"}
#: the differences that are stagebench's on purpose, or another implementation's: trec_eval name prefix ->
#: (why, the (case, qid) values that differ; None: every value, checked by the rule the test applies)
PINNED = {
    "iprec_at_recall": ("ir_measures' IPrec is pytrec_eval's, trec_eval 9 code: the rank at recall x is "
                        "(long)(x R + 0.9) there, lround(x R) in trec_eval 10",
                        {("aq", "301", "0.10"), ("aq", "302", "0.60"), ("aqc", "301", "0.10"), ("aql", "301", "0.10"),
                         ("aql", "302", "0.60"), ("aql", "303", "0.90"), ("meas_params", "301", "0.10"),
                         ("meas_params", "302", "0.25")}),
}  # fmt: skip
TOL = 5e-5 + 1e-12  # trec_eval prints 4 decimals


def suite() -> Path:
    p = SHARED / "trec_eval_tests"
    if not p.exists():
        pytest.skip(f"trec_eval 10's test files {p} are absent (they live in ../shared/data next to the repo, as in CI)")
    return p


@dataclass
class Result:
    """One case: per trec_eval measure name, its stagebench name (or why none) and the compared values."""

    named: dict[str, str] = field(default_factory=dict)
    unnamed: dict[str, str] = field(default_factory=dict)
    agree: dict[str, int] = field(default_factory=dict)
    pinned: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    wrong: list[tuple[str, str, float, float | None]] = field(default_factory=list)


def expected(path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split()[:3]) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_case(case: str) -> Result:
    root = suite()
    out, qrels_file, run_file, flags = CASES[case]
    flags = {"queries": "run", **flags}  # trec_eval averages over the run's queries unless -c
    rows = expected(root / out)
    res = Result()
    for name in dict.fromkeys(n for n, _, _ in rows):
        if name in GAIN_TABLES:
            res.named[name] = f"{GAIN_TABLES[name][0]} under gain {GAIN_TABLES[name][1]}"
            continue
        try:
            res.named[name] = parse_measure(name).name
        except StagebenchError as exc:
            res.unnamed[name] = unnamed(name) or str(exc)
    measures = [n for n in res.named if n not in GAIN_TABLES]
    main = api.evaluate_files(root / qrels_file, root / run_file, measures, **flags).evaluation
    per_query = dict(main.per_query)
    for name, (family, table) in GAIN_TABLES.items():
        if name in res.named:
            per_query[res.named[name]] = api.evaluate_files(root / qrels_file, root / run_file, [family], gain=table,
                                                            **flags).evaluation.per_query[family]  # fmt: skip
    # trec_eval counts a judged query with no positive grade (every measure but NumQ and NumRet 0 there);
    # stagebench leaves it out of every average and reports its count
    qrels = read_trec_qrels(root / qrels_file)
    run = api.read_trec_run(root / run_file, flags.get("max_per_query"))
    theirs_q = [q for q in qrels if flags["queries"] == "judged" or run.get(q)]
    silent = [q for q in theirs_q if q not in scored_query_ids(qrels)]
    for name, qid, value in rows:
        if name not in res.named:
            continue
        ours_name = res.named[name]
        values = per_query[ours_name]
        want = float(value)
        if qid == "all":
            total = sum(values.values())
            family = ours_name.split("(")[0].split("@")[0]
            if family in SUMMED:
                got = total + sum(len(run.get(q, {})) if family == "NumRet" else (1.0 if family == "NumQ" else 0.0)
                                  for q in silent)  # fmt: skip
            else:
                got = total / len(theirs_q)
        else:
            got = values.get(qid)
        if got is not None and abs(got - want) <= TOL:
            res.agree[name] = res.agree.get(name, 0) + 1
            continue
        prefix = next((p for p in PINNED if name.startswith(p)), None)
        if prefix is not None:
            res.pinned.setdefault(name, []).append((qid, want, got))
        else:
            res.wrong.append((name, qid, want, got))
    return res


def _delegated_ready() -> None:
    if ir_measures_version() is None:
        pytest.skip("ir_measures (the interop extra) is absent: the measures it computes cannot be named")


@pytest.mark.parametrize("case", list(CASES))
def test_every_measure_stagebench_names_agrees_with_trec_eval_10_or_differs_as_pinned(case):
    _delegated_ready()
    res = run_case(case)
    assert not res.wrong, f"{case}: {len(res.wrong)} values differ from trec_eval 10: {res.wrong[:8]}"
    assert sum(res.agree.values()) > 0
    for name, diffs in res.pinned.items():
        prefix = next(p for p in PINNED if name.startswith(p))
        where = PINNED[prefix][1]
        point = name.rsplit("_", 1)[-1]
        for qid, want, got in diffs:
            if qid != "all":  # a per-query difference is one of the pinned ones; 'all' is their mean
                assert (case, qid, point) in where, (case, name, qid, want, got)
            assert got is not None and abs(got - want) < 0.05, (case, name, qid, want, got)
    unexplained = {n: why for n, why in res.unnamed.items() if unnamed(n) is None}
    assert not unexplained, f"trec_eval measures with no name and no reason in UNNAMED: {unexplained}"


def test_every_pinned_per_query_difference_still_occurs():
    """A pinned difference that went away (a provider now computing trec_eval 10's rule) must be unpinned."""
    _delegated_ready()
    seen = set()
    for case in {c for c, _, _ in PINNED["iprec_at_recall"][1]}:
        for name, diffs in run_case(case).pinned.items():
            seen |= {(case, qid, name.rsplit("_", 1)[-1]) for qid, _, _ in diffs if qid != "all"}
    assert seen == PINNED["iprec_at_recall"][1]


def test_the_comment_files_read_as_trec_eval_10_reads_them(caplog):
    """qrels.test.with-comments is qrels.test with '#' lines, and one document id that holds a '#' (not a
    comment: only a '#' in the first column is); results.trunc has words after the run tag: both read, the
    second with one logged line that says how many lines had them."""
    root = suite()
    with_comments, plain = read_trec_qrels(root / "qrels.test.with-comments"), read_trec_qrels(root / "qrels.test")
    assert with_comments["301"].pop("CR#93E-1860") == plain["301"].pop("CR93E-1860") == 0
    assert with_comments == plain
    run = api.read_trec_run(root / "results.trunc")
    assert sum(len(d) for d in run.values()) == 584
    assert "results.trunc: 5 line(s) have columns after the run tag" in caplog.text
    assert sum(len(d) for d in api.read_trec_run(root / "results.trunc", 100).values()) == 184  # -M100: trec_eval's num_ret


def table() -> str:
    """The measure x case table: per trec_eval name, in each case, agreed/compared or the pinned count."""
    results = {c: run_case(c) for c in CASES}
    names = list(dict.fromkeys(n for r in results.values() for n in (*r.named, *r.unnamed)))
    lines = ["| trec_eval | stagebench | " + " | ".join(CASES) + " |", "|---|---|" + "---|" * len(CASES)]
    for n in names:
        ours = next((r.named[n] for r in results.values() if n in r.named), None)
        cells = []
        for r in results.values():
            if n in r.named:
                pinned = len(r.pinned.get(n, []))
                wrong = sum(1 for w in r.wrong if w[0] == n)
                cells.append(f"{r.agree.get(n, 0)}" + (f" +{pinned} pinned" if pinned else "") + (f" {wrong} WRONG" if wrong else ""))
            else:
                cells.append("-" if n not in r.unnamed else "unnamed")
        lines.append(f"| {n} | {ours or 'none: ' + (unnamed(n) or '?')} | " + " | ".join(cells) + " |")
    count = len({unnamed(n) for r in results.values() for n in r.unnamed})
    lines.append(f"\n{count} trec_eval measures (runid and relstring among them) with no name in stagebench or ir_measures")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
