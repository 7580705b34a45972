"""Every param's ``affects`` declaration checked by recomputation (issue 81): each field of a stage's
params changed on its own, the stage run again from an empty cache, and what it wrote or shared
compared with the default params' - the BM25 index (the analysed corpus), the corpus embeddings, the
pair scores rerankers share, the run. An entry whose content moved must be declared (else a stale one
would be served under the old key: a stemmer declared as affecting the run only reuses an unstemmed
index); a declared entry whose content does not move here is named in ``DECLARED_FOR_SAFETY`` with
the reason. The keys themselves, against the same declarations: tests/test_cache_keys.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stagebench.cache import Cache
from stagebench.data.jsonl import BeirOptions, load_beir
from stagebench.execute import canonical
from stagebench.params import EMBEDDINGS, INDEX, SCORES, affecting
from stagebench.stages import STAGE_TYPES, StageContext
from tests.conftest import REPO, seed_models
from tests.test_cache_keys import default_params, variations

#: texts on which every analyser param changes the analysed corpus: capitals, stopwords, inflections,
#: and punctuation that the three tokenizers cut differently
DOCS = {"d1": "The Running Shoes for men", "d2": "blue running-shoes, size 9", "d3": "a garden hose's nozzle",
        "d4": "Hoses and nozzles", "d5": "water bottle (1.5l)", "d6": "RUNNING socks", "d7": "t_shirt"}  # fmt: skip
QUERIES = {"q1": "running shoes", "q2": "Garden hoses"}

#: (stage type, param) -> why the entry it is declared to affect does not move on these texts
DECLARED_FOR_SAFETY = {
    ("dense", "batch_size"): "the embeddings move with the batch only at bf16 autocast (issue 66); fp32 here",
    ("dense", "device"): "cpu is what auto resolves to on a machine without a GPU",
    ("plugin", "pairs_per_call"): "a batch-invariant plug-in scores a pair alike in any batch; one that is not would not",
    ("plugin", "per_query"): "the same: one call per query or per batch, the same scores from a batch-invariant plug-in",
    ("cross_encoder", "batch_size"): "per-token INT8 is batch-invariant (tests/models/test_batch_invariance.py)",
    ("cross_encoder", "pairs_per_call"): "the same: batch-invariant",
    ("cross_encoder", "per_query"): "the same: batch-invariant",
    ("cross_encoder", "device"): "cpu is what auto resolves to on a machine without a GPU",
}
#: fields not varied here, each with its reason (model identity: tests/test_cache_keys.py's IDENTITY_FIELDS)
NOT_VARIED = {
    ("dense", "precision"): "int8-token is a second model build; the placement keys the embeddings (test_cache_keys)",
    ("cross_encoder", "precision"): "the same: a second model build, keyed through the placement",
    ("dense", "cache"): "off, nothing is written to compare; the run it gives: test_cache_keys' UNKEYED_CHECKED",
}
#: values that reach the texts here (the default variation of max_length, 257, truncates none of them)
VALUES = {("bm25", "top_k"): 2, ("dense", "max_length"): 4, ("cross_encoder", "max_length"): 8, ("plugin", "depths"): [2, 4],
          ("plugin", "kwargs"): {"salt": "b"},
          ("cross_encoder", "depths"): [2, 4]}


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    root = tmp_path_factory.mktemp("declared")
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": t.split()[-1], "text": t}) + "\n" for d, t in DOCS.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    (root / "qrels" / "test.tsv").write_text("q1\td1\t2\nq2\td3\t1\n")
    return load_beir(BeirOptions(path=str(root)))


def written(cache: Cache, kind: str) -> list[dict]:
    """The data files (name -> sha256) of each entry of ``kind`` the cache holds."""
    out = []
    for e in cache.list():
        if e["kind"] == kind:
            info = json.loads((cache.root / kind / e["key"] / "entry.json").read_text())
            out.append({name: f["sha256"] for name, f in info["files"].items()})
    return out


def differs(entry, a, b) -> bool:
    """Whether an entry's content moved: pair scores by the pairs both scored (a stage that scores more
    candidates shares the same scores for the pairs in common), anything else whole."""
    if entry == SCORES:
        return any(a[k] != b[k] for k in a.keys() & b.keys())
    return a != b


def walk(stype, base, outcome, skip=()):
    """(param, entry) for every entry whose content moved when the param alone changed, and every
    declared (param, entry) pair; ``outcome(params)`` -> {entry: content}."""
    cls = STAGE_TYPES[stype]
    first = outcome(base)
    moved, declared = set(), set()
    for name, changed in variations(base):
        if (stype, name) in NOT_VARIED or name in skip:
            continue
        if (stype, name) in VALUES:
            changed = dataclasses.replace(base, **{name: VALUES[stype, name]})
        now = outcome(changed)
        for entry in first:
            if now[entry] == []:  # nothing written (another backend, no cache): nothing stale to serve
                continue
            if differs(entry, now[entry], first[entry]):
                moved.add((name, entry))
            if name in affecting(cls.Params, entry):
                declared.add((name, entry))
    return moved, declared


def check(stype, moved, declared):
    stale = moved - declared
    assert not stale, f"{stype}: content moved but the param is not declared to affect it (a stale entry): {sorted(stale)}"
    idle = {(stype, name) for name, _ in declared - moved}
    assert idle == {k for k in DECLARED_FOR_SAFETY if k[0] == stype and k in idle}, sorted(idle - set(DECLARED_FOR_SAFETY))


def test_bm25_params_move_exactly_the_index_and_the_run_they_declare(texts, tmp_path):
    base = default_params("bm25")
    counter = iter(range(10**6))

    def outcome(params):
        cache = Cache(tmp_path / f"c{next(counter)}")
        run = canonical(STAGE_TYPES["bm25"]("s", params)(StageContext(texts, cache), []))
        return {INDEX: written(cache, "bm25-index"), "run": run}

    moved, declared = walk("bm25", base, outcome)
    check("bm25", {m for m in moved if m[1] == INDEX}, {d for d in declared if d[1] == INDEX})
    assert {n for n, e in moved if e == INDEX} == {"lowercase", "stopwords", "stemmer", "tokens"}
    # the run: every param but those declared to change nothing moves it here (backend: the same ranking
    # from another library, keyed because its float rounding may differ)
    assert {n for n, e in moved if e == "run"} >= {"k1", "b", "top_k", "lowercase", "stopwords", "stemmer", "tokens"}


def test_a_plugins_params_move_exactly_the_pair_scores_they_declare(texts, monkeypatch):
    """Pair scores are shared between rerankers whose scoring params agree: every param that moves a
    pair's score must be declared to (``affects`` scores), or a stage would read another's scores."""
    monkeypatch.chdir(REPO)
    stype, target = "plugin", "tests.shuffle_plugin:PairHash"  # batched (score_pairs): it shares its scores
    base = STAGE_TYPES[stype].build_params({"salt": "a"}, "params", target)
    inp = {q: {d: float(9 - i) for i, d in enumerate(DOCS)} for q in texts.queries}

    def outcome(params):
        shared: dict = {}
        out = STAGE_TYPES[stype]("s", params).apply(StageContext(texts, shared_scores=shared), [inp])
        return {SCORES: dict(sorted(shared.items())), "run": canonical(out.run)}

    moved, declared = walk(stype, base, outcome, skip=("target",))
    check(stype, {m for m in moved if m[1] == SCORES}, {d for d in declared if d[1] == SCORES})
    assert ("kwargs", SCORES) in moved  # the class's own arguments score differently


@pytest.mark.slow
def test_dense_params_move_exactly_the_embeddings_they_declare(texts, tmp_path, model_variants):
    base = default_params("dense")
    counter = iter(range(10**6))

    def outcome(params):
        cache = Cache(seed_models(model_variants, tmp_path / f"c{next(counter)}"))
        if params.index == "hnsw" or params.hnsw_m != base.hnsw_m or params.hnsw_ef_construction != base.hnsw_ef_construction \
                or params.hnsw_ef_search != base.hnsw_ef_search:  # fmt: skip
            params = dataclasses.replace(params, index="hnsw")
        run = canonical(STAGE_TYPES["dense"]("s", params)(StageContext(texts, cache), []))
        return {EMBEDDINGS: written(cache, "embeddings"), "run": run}

    moved, declared = walk("dense", base, outcome)
    check("dense", {m for m in moved if m[1] == EMBEDDINGS}, {d for d in declared if d[1] == EMBEDDINGS})
    assert {n for n, e in moved if e == EMBEDDINGS} >= {"passage_prefix", "max_length"}


@pytest.mark.slow
def test_a_cross_encoders_params_move_exactly_the_pair_scores_they_declare(texts, tmp_path, model_variants, monkeypatch):
    """The model's own params (max_length) move a pair's score and are declared to; those that choose
    and merge candidates (top_n, tail, activation, depths) do not move it and are not; the batch
    params are declared for safety (the per-token INT8 path is batch-invariant)."""
    monkeypatch.chdir(REPO)
    stype = "cross_encoder"
    base = dataclasses.replace(default_params(stype), top_n=4)
    inp = {q: {d: float(9 - i) for i, d in enumerate(DOCS)} for q in texts.queries}
    counter = iter(range(10**6))

    def outcome(params):
        cache = Cache(seed_models(model_variants, tmp_path / f"c{next(counter)}"))
        shared: dict = {}
        out = STAGE_TYPES[stype]("s", params).apply(StageContext(texts, cache, shared_scores=shared), [inp])
        return {SCORES: {k: round(v, 4) for k, v in sorted(shared.items())}, "run": canonical(out.run)}

    moved, declared = walk(stype, base, outcome)
    check(stype, {m for m in moved if m[1] == SCORES}, {d for d in declared if d[1] == SCORES})
    assert ("max_length", SCORES) in moved
