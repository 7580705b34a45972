"""The LLM judge: its answers read, pooled pairs asked once through the cache (a rerun asks nothing,
a failed request is asked again), the filled qrels, and its agreement statistics against
independent implementations (scikit-learn's Cohen's kappa, SciPy's Kendall tau-b)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from stagebench.errors import StagebenchError

from stagebench.cache import Cache
from stagebench.config import parse_config
from stagebench.data import Dataset
from stagebench.errors import ConfigError
from stagebench.judge.ask import Judge, JudgeParams
from stagebench.judge.scale import ESCI, parse_grade, scale_for
from stagebench.judge.grading import judge_runs
from stagebench.params import build
from stagebench.llm.request import ChatRequest, Completion, RequestFailed
from stagebench.judgments.agreement import agreement, kappa, kendall_tau_b
from stagebench.judgments.pool import HOLE, SAMPLE, filled_qrels, pool, read_judgments
from tests.scripted_chat import ScriptedChat

ESCI_NAMES = {3: "E", 2: "S", 1: "C", 0: "I"}
WORDS = {g: name for g, (name, _, _) in ESCI.items()}


class Scripted(ScriptedChat):
    """Answers with the grade written in the product's text ("truth 2"), in the form ``answer`` gives;
    ``fail`` names products whose request fails after every retry."""

    def __init__(self, answer=None, fail=()):
        super().__init__()
        self.answer = answer or (lambda g: WORDS[g])
        self.fail = set(fail)

    def reply(self, req: ChatRequest) -> Completion:
        user = req.messages[-1][1]
        doc = re.search(r"Product: (\S+) truth (\d)", user)
        if doc[1] in self.fail:
            raise RequestFailed("HTTP 503: busy (after 4 attempts)", 4)
        return Completion(self.answer(int(doc[2])), len(user.split()), 1, 0.01)


def dataset() -> Dataset:
    # p{i} has true grade i % 4; q1 judges p0..p3 (human labels = truth), q2 judges p4, p5
    corpus = {f"p{i}": {"text": f"p{i} truth {i % 4}"} for i in range(12)}
    qrels = {"q1": {f"p{i}": i % 4 for i in range(4)}, "q2": {"p4": 0, "p5": 1}}
    return Dataset("t", corpus, {"q1": "first", "q2": "second"}, qrels, "{text}", label_names=ESCI_NAMES)


def runs():
    a = {q: {f"p{i}": float(12 - i) for i in range(12)} for q in ("q1", "q2")}
    b = {q: {f"p{i}": float(i) for i in range(12)} for q in ("q1", "q2")}
    return {"a": a, "b": b}


def judge(backend, **params) -> Judge:
    j = Judge(build(JudgeParams, {"depth": 3, "sample": 10, **params}, "judge"))
    j._backend = backend
    return j


def ask(backend, cache=None, **params):
    j = judge(backend, **params)
    ds = dataset()
    record, tsv = judge_runs(j.params, j, ds, runs(), ["a", "b"], ESCI_NAMES, cache)
    return record, read_judgments(tsv, "judgments")


def test_pooled_pairs_are_asked_once_and_judged_pairs_only_for_the_sample():
    holes, judged = pool(runs(), ["a", "b"], dataset().qrels, ["q1", "q2"], 3)
    # top 3 of a: p0 p1 p2; of b: p11 p10 p9 -> q1: p0-p2 judged, p9-p11 holes; q2: all six holes
    assert judged == [("q1", "p0"), ("q1", "p1"), ("q1", "p2")]
    assert holes == [("q1", "p11"), ("q1", "p10"), ("q1", "p9"),
                     ("q2", "p0"), ("q2", "p1"), ("q2", "p2"), ("q2", "p11"), ("q2", "p10"), ("q2", "p9")]  # fmt: skip
    backend = Scripted()
    record, js = ask(backend)
    assert backend.calls == len(js) == 9 + 3 and (record.holes, record.sample) == (9, 3)
    assert record.outcomes == {"ok": 12, "repaired": 0, "unusable": 0, "failed": 0}
    assert all(j.grade == int(j.docid[1:]) % 4 for j in js)
    filled, added = filled_qrels(dataset().qrels, js)
    assert len(added) == 9 and filled["q1"]["p11"] == 3 and filled["q2"]["p0"] == 0
    assert filled["q2"]["p4"] == 0 and "p5" in filled["q2"]  # human labels kept


def test_a_rerun_asks_nothing_and_a_changed_prompt_asks_again(tmp_path):
    cache = Cache(tmp_path / "cache")
    first = Scripted()
    ask(first, cache)
    again = Scripted()
    record, _ = ask(again, cache)
    assert again.calls == 0 and record.from_cache == 12
    changed = Scripted()
    ask(changed, cache, system_prompt="You grade products.")
    assert changed.calls == 12


def test_malformed_answers_are_repaired_or_unusable_and_counted():
    forms = {3: "Exact.", 2: "I would say Substitute here", 1: "Complement, Irrelevant", 0: "no idea"}
    record, js = ask(Scripted(answer=lambda g: forms[g]))
    by_truth = {int(j.docid[1:]) % 4: (j.grade, j.outcome) for j in js}
    assert by_truth == {3: (3, "ok"), 2: (2, "repaired"), 1: (None, "unusable"), 0: (None, "unusable")}
    assert sum(record.outcomes.values()) == 12 and record.outcomes["unusable"] == sum(j.grade is None for j in js)


def test_a_failed_request_stops_the_judge_or_when_accepted_stays_a_hole_is_not_cached_and_is_asked_again(tmp_path):
    cache = Cache(tmp_path / "cache")
    with pytest.raises(StagebenchError, match=r"^judge: a pair's request failed after every retry \(.*\); the judge's "
                                              r"tables were not written\. .*failed_calls: accept keeps such pairs as holes"):
        ask(Scripted(fail={"p10"}), cache)  # the default: failed_calls: stop
    record, js = ask(Scripted(fail={"p10"}), cache, failed_calls="accept")
    failed = [j for j in js if j.outcome == "failed"]
    assert record.outcomes["failed"] == 2 and {j.docid for j in failed} == {"p10"} and all(j.grade is None for j in failed)
    _, added = filled_qrels(dataset().qrels, js)
    assert not any(d == "p10" for _, d, _ in added)
    retry = Scripted()
    record, js = ask(retry, cache)
    assert retry.calls == 2 and record.outcomes["failed"] == 0


def test_the_scale_and_the_answers_read():
    esci = scale_for(ESCI_NAMES, {0, 1, 2, 3})
    assert [label for _, label, _ in esci.labels] == ["Exact", "Substitute", "Complement", "Irrelevant"]
    assert parse_grade("exact", esci).grade == 3 and parse_grade("S", esci).grade == 2
    assert parse_grade("<think>Exact?</think>Irrelevant", esci).grade == 0
    numeric = scale_for({}, {0, 1, 2})
    assert [label for _, label, _ in numeric.labels] == ["2", "1", "0"]
    assert parse_grade("2", numeric).grade == 2 and parse_grade("1.5", numeric).grade is None
    assert parse_grade("grade: 1", numeric).status == "repaired"


def test_kappa_agrees_with_scikit_learn_and_tau_with_scipy():
    sk = pytest.importorskip("sklearn.metrics")
    st = pytest.importorskip("scipy.stats")
    rng = random.Random(3)
    for _ in range(100):
        n = rng.randint(2, 60)
        h = np.array([rng.randint(0, 3) for _ in range(n)])
        j = np.array([min(3, max(0, x + rng.choice([-1, 0, 0, 1]))) for x in h])
        for power, weights in ((0, None), (1, "linear"), (2, "quadratic")):
            ours = kappa(h, j, 4, power)
            with np.errstate(divide="ignore", invalid="ignore"):
                ref = sk.cohen_kappa_score(h, j, weights=weights, labels=[0, 1, 2, 3])
            if ours is None:
                assert not np.isfinite(ref)
            else:
                assert ours == pytest.approx(ref, abs=1e-9)
        x = [rng.choice([0.1, 0.2, 0.3, 0.4]) for _ in range(6)]
        y = [rng.choice([0.1, 0.2, 0.3]) for _ in range(6)]
        ref = st.kendalltau(x, y, variant="b").statistic
        ours = kendall_tau_b(x, y)
        assert (ours is None and not np.isfinite(ref)) or ours == pytest.approx(ref, abs=1e-9)


def test_agreement_of_a_perfect_and_of_a_constant_judge():
    ds = dataset()
    pairs = [("q1", f"p{i}") for i in range(4)] + [("q2", "p4"), ("q2", "p5")]
    truth = [ds.qrels[q][d] for q, d in pairs]
    perfect = agreement(pairs, truth, ds.qrels, [0, 1, 2, 3], runs(), ["a", "b"], ["nDCG@3", "P@3"], 1, "linear", 200, 1)
    assert perfect.exact == 1.0 and perfect.weighted_kappa == 1.0 and perfect.confusion[0] == [1, 0, 0, 0]
    assert all(o.tau == 1.0 for o in perfect.orders)
    constant = agreement(pairs, [3] * len(pairs), ds.qrels, [0, 1, 2, 3], runs(), ["a", "b"], ["nDCG@3"], 1, "linear",
                         200, 1)  # fmt: skip
    assert constant.weighted_kappa == 0.0 and constant.exact == pytest.approx(1 / 6, abs=1e-6)
    assert [row[0] for row in constant.confusion] == [1, 1, 2, 2]  # everything answered Exact


CONFIG = {"name": "t", "dataset": {"loader": "esci", "path": "data/synthetic-esci"},
          "stages": [{"name": "bm25", "type": "bm25"}]}  # fmt: skip


@pytest.mark.parametrize("section, problem", [
    ({"depth": 0}, "judge.depth"),
    ({"stages": ["nope"]}, "judge.stages[0]: unknown stage 'nope'"),
    ({"backend": "openai"}, "judge.base_url"),
    ({"backend": "openai", "base_url": "http://h:1/v1", "api_key_env": "sk-123 secret"}, "judge.api_key_env"),
    ({"sample": -1}, "judge.sample"),
    ({"colour": 1}, "judge.colour"),
])  # fmt: skip
def test_judge_sections_that_cannot_make_sense_fail_at_load(section, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config({**CONFIG, "judge": section})


def test_a_prompt_without_the_document_fails_at_load(tmp_path):
    bad = tmp_path / "p.txt"
    bad.write_text("Query {query}: grade it.")
    with pytest.raises(ConfigError, match=r"judge.prompt: .*must use \{document\}"):
        parse_config({**CONFIG, "judge": {"prompt": str(bad)}})


def test_the_judgments_file_reads_back_and_bad_lines_are_named():
    _, js = ask(Scripted())
    assert {j.purpose for j in js} == {HOLE, SAMPLE}
    with pytest.raises(Exception, match=r"f.tsv: line 2"):
        read_judgments("qid\tdocid\tpurpose\tgrade\toutcome\nq1\tp1\tother\t3\tok\n", "f.tsv")


def test_a_judge_that_disagrees_with_the_humans_never_replaces_a_human_label():
    """The filled qrels are the human qrels, every label as it was, plus the judge's grades for the
    holes alone: a judge that contradicts every human label on the agreement sample changes none."""
    ds = dataset()
    record, js = ask(Scripted(answer=lambda g: WORDS[3 - g]))  # always the opposite grade
    sampled = [j for j in js if j.purpose == SAMPLE]
    assert sampled and all(j.grade != ds.qrels[j.qid][j.docid] for j in sampled)
    filled, added = filled_qrels(ds.qrels, js)
    for q, docs in ds.qrels.items():
        assert {d: filled[q][d] for d in docs} == docs, q
    holes = {(j.qid, j.docid): j.grade for j in js if j.purpose == HOLE}
    assert {(q, d): g for q, d, g in added} == holes
    assert {(q, d) for q, docs in filled.items() for d in docs} == {(q, d) for q, docs in ds.qrels.items() for d in docs} | set(holes)


def test_the_weighted_kappa_interval_is_the_percentile_bootstrap_of_linear_kappa_over_the_pairs():
    """The 95% interval from its definition: the pairs resampled with replacement (numpy's generator
    seeded with the configured seed, one draw of n indices per resample), scikit-learn's linearly
    weighted kappa of each resample (resamples where it is undefined left out), the 2.5th and 97.5th
    percentiles."""
    sk = pytest.importorskip("sklearn.metrics")
    ds = dataset()
    rng = random.Random(11)
    pairs = [("q1", f"p{i}") for i in range(4)] + [("q2", "p4"), ("q2", "p5")]
    qrels = {"q1": dict(ds.qrels["q1"]), "q2": dict(ds.qrels["q2"])}
    for i in range(6, 40):  # more judged pairs, so the interval is not degenerate
        qrels["q2"][f"x{i}"] = rng.randint(0, 3)
        pairs.append(("q2", f"x{i}"))
    truth = [qrels[q][d] for q, d in pairs]
    judged = [min(3, max(0, g + rng.choice([-2, -1, 0, 0, 0, 1]))) for g in truth]
    got = agreement(pairs, judged, qrels, [0, 1, 2, 3], runs(), ["a", "b"], ["nDCG@3"], 1, "linear", 300, 5)
    h, j = np.array(truth), np.array(judged)
    gen = np.random.default_rng(5)
    boots = []
    for _ in range(300):
        idx = gen.integers(0, len(pairs), len(pairs))
        with np.errstate(divide="ignore", invalid="ignore"):
            v = sk.cohen_kappa_score(h[idx], j[idx], weights="linear", labels=[0, 1, 2, 3])
        if np.isfinite(v):
            boots.append(v)
    want = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]
    assert got.weighted_kappa_ci == pytest.approx(want, abs=2e-6)
    assert got.weighted_kappa_ci[0] < got.weighted_kappa < got.weighted_kappa_ci[1]
    assert got.kappa != got.weighted_kappa  # the weights matter on these pairs
