"""Cache-key completeness, property-style, derived from the parameter declarations.

For every stage type, every field of its ``Params`` dataclass is changed to another valid
value: the run's cache key must change, unless the stage declares the field as not changing
the output (``unkeyed_params``). A field added tomorrow is covered the day it is added.
And a run computed through a warm cache (filled under the default params) must equal the
run computed with no cache at all: a stale BM25 index or embedding matrix served under an
incomplete key would differ.

The other keys the project computes, each against its declaration, and each declaration checked
to hold (the output really does not change), every table derived from the one declaration each
param makes (``param(..., affects=...)``): the BM25 index, the corpus embeddings, pair scores shared
between rerankers (scoring_key), the params declared to affect nothing; an LLM's answers are in
tests/llm/test_keys.py, a depth sweep's runs in tests/results/test_depth.py.
"""

from __future__ import annotations

import ast
import dataclasses
from importlib import metadata
import json
import typing
from pathlib import Path

import pytest

from stagebench.cache import Cache
from stagebench.config import StageConfig
from stagebench.data.jsonl import BeirOptions, load_beir
from stagebench.cache import make_key
from stagebench.runtime.devices import Placement
from stagebench.execute import canonical, scoring_key, stage_key
from stagebench.params import EMBEDDINGS, INDEX, RUN, SCORES, Range, affecting
from stagebench.stages import STAGE_TYPES, StageContext
from stagebench.stages.bm25 import BM25Params, index_key_parts
from stagebench.stages.dense import DenseParams, embeddings_parts
from tests.conftest import REPO

# identity fields are keyed through Stage.identity() (the resolved model's name and weight hash; a
# run file's sha256, tests/stages/test_run_file.py); changing them here would need a second model
IDENTITY_FIELDS = {"model", "source", "target", "path"}
# an LLM stage's backend, server and prompt file are keyed through identity() too (the server's
# model listing, the template's digest: tests/llm/test_server.py, test_the_prompt_text_is_in_the_key)
STAGE_IDENTITY_FIELDS = {"LLMRerankParams": {"backend", "base_url", "gguf_file", "prompt"}}
INPUTS = {"bm25": [], "dense": [], "run_file": [], "rrf": ["a", "b"], "score_fusion": ["a", "b"],
          "oracle_pool": ["a"], "cross_encoder": ["a"], "plugin": ["a"], "llm_rerank": ["a"], "pyterrier": ["a"], "rerankers": ["a"]}  # fmt: skip
TARGETS = {"plugin": "examples.title_boost:TitleBoostReranker", "pyterrier": "tests.pt_builders:word_overlap"}
RUN_FILE = Path(__file__).parent / "data" / "tiny_run.trec"
DOCS = {"d1": "red running shoes", "d2": "blue running shoes", "d3": "garden hose", "d4": "hose nozzle",
        "d5": "water bottle", "d6": "running socks", "d7": "shoe rack", "d8": "bottle brush"}  # fmt: skip


def alternative(tp, value):
    """Another valid value of a declared type."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(tp)
        alt = alternative(base, value)
        rng = next((e for e in extras if isinstance(e, Range)), None)
        if rng is not None and rng.le is not None and alt > rng.le:
            alt = (value + (rng.ge or 0)) / 2
        return alt
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            first = args[0]
            base = typing.get_args(first)[0] if typing.get_origin(first) is typing.Annotated else first
            if base is int:
                return 3
            if base is float:
                return 0.5
            if base is str:
                return "english"
            if typing.get_origin(base) is list:
                return [1.0, 2.0]
            if typing.get_origin(base) is dict:
                return {"title_weight": 5.0}
            raise AssertionError(f"no alternative for None of {tp}")
        if typing.get_origin(args[0]) is typing.Literal and typing.get_args(args[0]) == (value,):
            return alternative(args[1], 1)  # the one word of Literal["auto"] | PositiveInt: a number instead
        return alternative(args[0], value)
    if origin is typing.Literal:
        return next(c for c in typing.get_args(tp) if c != value)
    if tp is bool:
        return not value
    if tp is int:
        return value + 1
    if tp is float:
        return value * 0.5 + 0.05
    if tp is str:
        return value + "x: "
    if origin is list:
        return [v * 2 + 1 for v in value]
    if origin is dict:
        return {**value, "title_weight": 5.0}
    raise AssertionError(f"no alternative for {tp}")


# values valid for every stage that has the key (a precision other than int8 is refused for ONNX models)
OTHER_VALUE = {"device": "cpu", "precision": "int8"}


def variations(params):
    hints = typing.get_type_hints(type(params), include_extras=True)
    for f in dataclasses.fields(params):
        if f.name in IDENTITY_FIELDS | STAGE_IDENTITY_FIELDS.get(type(params).__name__, set()):
            continue
        other = OTHER_VALUE.get(f.name) or alternative(hints[f.name], getattr(params, f.name))
        yield f.name, dataclasses.replace(params, **{f.name: other})


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("beir")
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in DOCS.items()))
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "running shoes"}\n{"_id": "q2", "text": "hose"}\n')
    (root / "qrels" / "test.tsv").write_text("q1\td1\t2\nq2\td3\t1\n")
    return load_beir(BeirOptions(path=str(root)))


def default_params(stype: str):
    cls = STAGE_TYPES[stype]
    if stype == "plugin":
        return cls.build_params({"prior_weight": 0.5}, "params", TARGETS[stype])
    if stype == "pyterrier":
        return cls.build_params({"boost": 2.0}, "params", TARGETS[stype])
    if stype == "run_file":
        return cls.Params(path=str(RUN_FILE))
    return cls.Params()


@pytest.mark.parametrize("stype", sorted(STAGE_TYPES))
def test_every_param_that_can_change_the_output_changes_the_run_key(stype, dataset, monkeypatch):
    monkeypatch.chdir(REPO)
    cls = STAGE_TYPES[stype]
    target = TARGETS.get(stype)
    base = default_params(stype)
    digests = ["0" * 64] * len(INPUTS[stype])

    def key(params):
        sc = StageConfig(name="s", type=stype, inputs=INPUTS[stype], params=params, target=target)
        return stage_key(sc, cls("s", params), dataset, digests)[0]

    k0 = key(base)
    assert key(base) == k0
    seen = 0
    for name, changed in variations(base):
        if name in cls.unkeyed_params:
            assert key(changed) == k0, f"{stype}.{name} is declared not to change the output but changes the key"
        else:
            assert key(changed) != k0, f"{stype}.{name} can change the output but is not in the cache key"
        seen += 1
    assert seen >= 1  # every stage type declares at least one param it is keyed on
    # the stage name is not part of the key; the inputs' digests are
    sc = StageConfig(name="other", type=stype, inputs=INPUTS[stype], params=base, target=target)
    assert stage_key(sc, cls("other", base), dataset, digests)[0] == k0
    if digests:
        assert stage_key(sc, cls("other", base), dataset, ["1" * 64] * len(digests))[0] != k0


def test_plugin_constructor_kwargs_are_in_the_key(dataset, monkeypatch):
    monkeypatch.chdir(REPO)
    cls = STAGE_TYPES["plugin"]
    target = "examples.title_boost:TitleBoostReranker"
    keys = set()
    for kwargs in ({}, {"title_weight": 3.0}, {"title_weight": 3.5}, {"stemmer": None}):
        p = cls.build_params(kwargs, "params", target)
        sc = StageConfig(name="p", type="plugin", inputs=["a"], params=p, target=target)
        keys.add(stage_key(sc, cls("p", p), dataset, ["0" * 64])[0])
    assert len(keys) == 4


def test_the_bm25_index_key_holds_exactly_the_params_declared_to_affect_it():
    """The cached index is the analysed corpus: the params declared ``affects`` the index (the analyser's)
    change its key and no other does; k1, b and epsilon weigh it when the stage runs (the warm-cache test
    below shows the run follows them)."""
    index = set(affecting(BM25Params, INDEX))
    assert {"lowercase", "stemmer"} <= index and not {"k1", "b", "epsilon", "top_k"} & index
    base = BM25Params()
    k0 = index_key_parts("fp", base)
    for name, changed in variations(base):
        assert (index_key_parts("fp", changed) != k0) == (name in index), name


def run_stage_once(stype: str, params, ds, cache: Cache | None, inputs=()):
    cls = STAGE_TYPES[stype]
    return canonical(cls("s", params)(StageContext(ds, cache), list(inputs)))


@pytest.mark.parametrize("stype", ["bm25", pytest.param("dense", marks=pytest.mark.slow)])
def test_a_warm_cache_gives_what_a_fresh_computation_gives(stype, dataset, tmp_path):
    """Fill the cache under the default params, then change one param at a time: the run
    through the warm cache (index or embeddings reused only where the key says so) must equal
    the run computed with no cache."""
    base = default_params(stype)
    if stype == "bm25":
        base = dataclasses.replace(base, top_k=5)
    cache = Cache(tmp_path / "cache")
    run_stage_once(stype, base, dataset, cache)
    for name, changed in variations(base):
        if stype == "dense" and name.startswith("hnsw") and changed.index != "hnsw":
            changed = dataclasses.replace(changed, index="hnsw")
        fresh = run_stage_once(stype, changed, dataset, None)
        warm = run_stage_once(stype, changed, dataset, cache)
        assert warm == fresh, f"{stype}.{name}: a cached artefact was reused although {name} changed"


def test_stage_key_reads_every_declared_field(dataset):
    """The run key hashes the params as a whole (minus unkeyed ones), so a field can only be
    left out on purpose: every unkeyed name must be a real field of that stage's Params."""
    for stype, cls in STAGE_TYPES.items():
        names = {f.name for f in dataclasses.fields(cls.Params)}
        assert set(cls.unkeyed_params) <= names, stype
    assert Path(REPO / "examples" / "title_boost.py").is_file()


def test_make_key_is_canonical():
    assert make_key({"a": 1, "b": {"x": 1, "y": 2}}) == make_key({"b": {"y": 2, "x": 1}, "a": 1})
    assert make_key({"a": 1}) != make_key({"a": 1.5}) and len(make_key({"a": 1})) == 32
    assert make_key({"p": Path("x")}) == make_key({"p": "x"})  # non-JSON values by their str()


def imported_by(module: str) -> set[str]:
    """``module`` and every stagebench module its source imports, followed to the end."""
    names = {p.relative_to(REPO / "src").with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
             for p in (REPO / "src" / "stagebench").rglob("*.py")}  # fmt: skip
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        path = REPO / "src" / (m.replace(".", "/") + ".py")
        path = path if path.is_file() else path.with_suffix("") / "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stagebench"):
                todo += [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("stagebench")]
    return seen


def test_a_model_the_llm_stage_loads_through_is_in_its_key(dataset):
    """The defect a hand-kept list had: rerank/chat.py loads GGUF checkpoints through models.variants,
    which the LLM stage's list left out, so a change there served stale runs."""
    cls = STAGE_TYPES["llm_rerank"]
    params = default_params("llm_rerank")
    sc = StageConfig(name="s", type="llm_rerank", inputs=["a"], params=params)
    _, parts = stage_key(sc, cls("s", params), dataset, ["0" * 64])
    assert {"stagebench.models.variants", "stagebench.models.resolve", "stagebench.llm.chat"} <= set(parts["code"])


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def test_the_run_key_holds_the_dataset_parts_a_stage_reads(dataset, monkeypatch):
    """Corpus: only for stages that read texts; qrels: only for plug-ins and the oracle pool; queries: always;
    packages: exactly the ones the stage declares."""
    monkeypatch.chdir(REPO)
    for stype, cls in STAGE_TYPES.items():
        target = "examples.title_boost:TitleBoostReranker" if stype == "plugin" else None
        params = default_params(stype)
        sc = StageConfig(name="s", type=stype, inputs=INPUTS[stype], params=params, target=target)
        _, parts = stage_key(sc, cls("s", params), dataset, ["0" * 64] * len(INPUTS[stype]))
        assert (parts["corpus"] == dataset.fingerprint) == cls.reads_corpus, stype
        assert parts["corpus"] is None or cls.reads_corpus
        assert (parts["qrels"] == dataset.qrels_fingerprint) == cls.reads_qrels, stype
        assert parts["queries"] == dataset.queries_fingerprint
        assert parts["packages"] == {p: _installed(p) for p in cls.packages}, stype  # every one it declares
        assert parts["type"] == stype and parts["target"] == target
        # the code: the stage's module and every stagebench module it imports, directly or not (read from the
        # source here again, independently of stagebench.cache.import_closure)
        assert set(parts["code"]) == imported_by(cls.__module__), stype
    assert STAGE_TYPES["bm25"].reads_corpus and not STAGE_TYPES["rrf"].reads_corpus and STAGE_TYPES["plugin"].reads_qrels


def test_the_prompt_text_is_in_the_llm_key(dataset, tmp_path):
    """The prompt file is keyed by its text: the same path with other words is another run."""
    cls = STAGE_TYPES["llm_rerank"]
    prompt = tmp_path / "prompt.txt"

    def key(text):
        prompt.write_text(text)
        params = cls.Params(prompt=str(prompt))
        sc = StageConfig(name="s", type="llm_rerank", inputs=["a"], params=params)
        return stage_key(sc, cls("s", params), dataset, ["0" * 64])[0]

    assert key("{query}\n{passages}") != key("Query: {query}\n{passages}")
    assert key("{query}\n{passages}") == key("{query}\n{passages}")


# ---------------------------------------------------------------- the other keys the project computes


def test_the_embeddings_key_holds_exactly_the_params_declared_to_affect_them():
    """Corpus embeddings are keyed by the params declared ``affects`` them (and the model's identity and
    the placement); every other param acts on queries and search. The slow warm-cache test above checks
    the second half: a query-side change served the cached embeddings and still gave the fresh run."""
    embedding = set(affecting(DenseParams, EMBEDDINGS))
    assert {"passage_prefix", "max_length"} <= embedding and not {"top_k", "query_prefix", "model"} & embedding
    placement = Placement("cpu", "fp32", "test")
    base = DenseParams()
    k0 = make_key(embeddings_parts("m", "fp", base, placement))
    for name, changed in variations(base):
        if name in ("device", "precision"):
            continue  # through the placement, below
        assert (make_key(embeddings_parts("m", "fp", changed, placement)) != k0) == (name in embedding), name
    assert make_key(embeddings_parts("m2", "fp", base, placement)) != k0
    assert make_key(embeddings_parts("m", "fp2", base, placement)) != k0
    assert make_key(embeddings_parts("m", "fp", base, Placement("cpu", "bf16", "test"))) != k0
    assert make_key(embeddings_parts("m", "fp", base, Placement("cpu:1", "fp32", "other"))) == k0  # the index of a device is not


@pytest.mark.parametrize("stype", ["cross_encoder", "plugin"])
def test_pair_scores_are_shared_exactly_between_stages_that_score_alike(stype, dataset, monkeypatch):
    """Two rerankers of a run share pair scores when their scoring keys agree: every param declared to
    affect the pair scores changes that key, the others (``affects=(RUN,)``: which candidates, how merged)
    do not."""
    monkeypatch.chdir(REPO)
    cls = STAGE_TYPES[stype]
    target = TARGETS.get(stype)
    base = default_params(stype)

    def key(params):
        sc = StageConfig(name="s", type=stype, inputs=["a"], params=params, target=target)
        return scoring_key(stage_key(sc, cls("s", params), dataset, ["0" * 64])[1], cls.Params)

    scoring = set(affecting(cls.Params, SCORES))
    ranking_only = {f.name for f in dataclasses.fields(cls.Params) if f.metadata.get("affects") == (RUN,)}
    k0, seen = key(base), set()
    for name, changed in variations(base):
        assert (key(changed) == k0) == (name not in scoring), name
        seen.add(name)
    assert seen >= ranking_only - {"depths"} | {"top_n"} and "top_n" in ranking_only


def test_params_declared_ranking_only_do_not_change_a_shared_score(dataset, monkeypatch):
    """The declaration itself: a reranker that reads pair scores another stage scored (same scoring
    key, other params declared ``affects=(RUN,)``) gives the run it gives alone."""
    monkeypatch.chdir(REPO)
    cls = STAGE_TYPES["plugin"]
    inp = {q: {d: float(8 - i) for i, d in enumerate(DOCS)} for q in dataset.queries}
    target = "tests.shuffle_plugin:PairHash"  # batched (score_pairs): the stage shares its pair scores
    first = cls.build_params({"top_n": 3}, "params", target)
    others = {"top_n": {"top_n": 7}, "depths": {"top_n": 6, "depths": [2, 5]}, "tail": {"tail": "scaled_input"},
              "tail_scale": {"tail": "scaled_input", "tail_scale": 0.5}, "activation": {"activation": "sigmoid"}}  # fmt: skip
    assert set(others) == {f.name for f in dataclasses.fields(cls.Params) if f.metadata.get("affects") == (RUN,)}
    for name, changed in others.items():
        params = cls.build_params(changed, "params", target)
        alone = cls("b", params).apply(StageContext(dataset), [inp])
        shared: dict = {}
        cls("a", first).apply(StageContext(dataset, shared_scores=shared), [inp])
        assert len(shared) == 3 * len(inp)
        together = cls("b", params).apply(StageContext(dataset, shared_scores=shared), [inp])
        assert canonical(together.run) == canonical(alone.run), name
        assert together.depth_runs == alone.depth_runs, name


def test_bm25_and_dense_params_declared_unkeyed_do_not_change_the_run(dataset):
    for stype, others in (("bm25", {"query_batch": 1, "threads": 2}),):
        base = default_params(stype)
        assert set(others) == set(STAGE_TYPES[stype].unkeyed_params)
        want = run_stage_once(stype, base, dataset, None)
        for name, value in others.items():
            assert run_stage_once(stype, dataclasses.replace(base, **{name: value}), dataset, None) == want, name


#: each stage type's params declared as not changing its output, and where that is checked by running
#: the stage both ways: a declaration added without such a check fails here
UNKEYED_CHECKED = {
    "bm25": {"query_batch", "threads"},  # test_bm25_and_dense_params_declared_unkeyed_do_not_change_the_run
    "dense": {"cache", "streams"},  # test_a_warm_cache_gives_what_a_fresh_computation_gives[dense] (slow: the model)
    # streams (dense, cross_encoder): tests/models/test_batch_invariance.py::test_the_streams_never_change_a_bit
    "cross_encoder": {"streams"},
    "llm_rerank": {"concurrency", "timeout", "retries", "backoff", "price_per_1k_tokens", "api_key_env", "failed_calls"},
    # ^ tests/llm/test_keys.py::test_params_declared_unkeyed_do_not_change_the_run, every method
    "rerankers": {"api_key_env"},  # tests/stages/test_rerankers_stage.py: another variable, the same key: the run reused
    "pyterrier": {"queries_per_call"},  # tests/stages/test_pyterrier.py: 1 and 4 queries a call, the same run
}


def test_every_unkeyed_declaration_is_checked_to_leave_the_output_unchanged():
    for stype, cls in STAGE_TYPES.items():
        assert set(cls.unkeyed_params) == UNKEYED_CHECKED.get(stype, set()), stype


def test_a_param_declared_to_affect_the_run_only_reuses_the_index_and_recomputes_the_run(dataset, tmp_path):
    """The one declaration at work: BM25's k1 is ``affects=(RUN,)``, so a new k1 analyses the corpus
    no more (one index entry in the cache) and still gives a new run; the stemmer affects the index
    too, so a new stemmer builds a second index."""
    cache = Cache(tmp_path / "cache")
    base = dataclasses.replace(default_params("bm25"), top_k=5)
    first = run_stage_once("bm25", base, dataset, cache)

    def indexes() -> int:
        return sum(1 for e in cache.list() if e["kind"] == "bm25-index")

    assert indexes() == 1
    other_k1 = run_stage_once("bm25", dataclasses.replace(base, k1=0.2), dataset, cache)
    assert indexes() == 1 and other_k1 != first
    assert run_stage_once("bm25", dataclasses.replace(base, stemmer="english"), dataset, cache) != first
    assert indexes() == 2


def test_a_rerankers_own_params_affect_its_pair_scores():
    """Which candidates are scored and how their scores are merged (the fields every reranker shares,
    ``RerankCommon``) may be declared to affect the run alone; the model's own params (its class's
    fields and the placement) never are: they change a pair's score, and two stages differing in one
    must not share scores."""
    from stagebench.rerank.pointwise import RerankCommon

    common = {f.name for f in dataclasses.fields(RerankCommon)}
    for stype in ("cross_encoder", "plugin"):
        cls = STAGE_TYPES[stype].Params
        own = {f.name for f in dataclasses.fields(cls)} - common - set(STAGE_TYPES[stype].unkeyed_params)
        assert own and own <= set(affecting(cls, SCORES)), (stype, own - set(affecting(cls, SCORES)))


@pytest.mark.slow
def test_the_embedding_batch_size_moves_embeddings_so_it_is_in_their_key(dataset):
    """At torch's dynamic INT8 (one activation scale a batch) a text's embedding moves with its batch, so the
    batch size must key the corpus embeddings, whatever precision ``auto`` picks on this machine. (bf16 moved
    too until it ran in fixed batch shapes: tests/models/test_batch_invariance.py.)"""
    from stagebench import api

    assert "batch_size" in affecting(DenseParams, EMBEDDINGS)
    enc = api.bi_encoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu", precision="int8", max_length=256)
    texts = list(DOCS.values()) * 4 + ["a much longer product text " * 12]
    assert float(abs(enc.encode(texts, 32) - enc.encode(texts, 3)).max()) > 0
