"""``type: pyterrier``: a PyTerrier transformer built by a user function, as a reranker over its
input's top_n and as a retriever without input; what it answers is checked."""

from __future__ import annotations

import logging

import pytest

import stagebench
from stagebench.errors import ConfigError, DataError, StagebenchError
from stagebench.runs import ranked_ids

pytest.importorskip("pyterrier", reason="PyTerrier is not installed (pip install pyterrier)")


def run(tmp_path, dataset, stages, latency=0):
    return stagebench.run({
        "name": "pt", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
        "dataset": {"loader": "esci", "path": str(dataset), "split": "test", "max_queries": 6},
        "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 30}}, *stages],
        "evaluation": {"metrics": ["nDCG@10"], "latency_queries": latency, "permutations": 100, "bootstrap": 100},
    })  # fmt: skip


def test_a_pyterrier_reranker_reorders_the_head_and_keeps_the_tail_and_serves_as_it_ran(tmp_path, tiny_synthetic, caplog):
    caplog.set_level(logging.INFO, logger="stagebench")
    result = run(tmp_path, tiny_synthetic, [
        {"name": "rev", "type": "pyterrier", "target": "tests.pt_builders:reverse", "inputs": ["bm25"],
         "params": {"top_n": 10}},
        {"name": "overlap", "type": "pyterrier", "target": "tests.pt_builders:word_overlap", "inputs": ["bm25"],
         "params": {"top_n": 20, "boost": 2.0, "queries_per_call": 4}},
        {"name": "overlap1", "type": "pyterrier", "target": "tests.pt_builders:word_overlap", "inputs": ["bm25"],
         "params": {"top_n": 20, "boost": 2.0, "queries_per_call": 1}, "cache": False},
    ], latency=3)  # fmt: skip
    assert result.runs["overlap1"] == result.runs["overlap"]  # queries_per_call is declared not to change the run
    assert "stage overlap1: computing run" in caplog.text  # (cache: false) computed, not read
    for q, docs in result.runs["bm25"].items():
        order, got = ranked_ids(docs), ranked_ids(result.runs["rev"][q])
        assert got == order[:10][::-1] + order[10:]  # the head reversed, the tail below in its order
        # the transformer sees ranks from 0 at the top (docs/plugins.md): its score is that rank
        assert sorted(result.runs["rev"][q][d] for d in order[:10]) == [float(r) for r in range(10)][: len(order[:10])]
    ds = stagebench.load_dataset({"loader": "esci", "path": str(tiny_synthetic), "split": "test"})
    texts, queries = ds.doc_text, ds.queries
    for q, docs in result.runs["overlap"].items():
        head = ranked_ids(result.runs["bm25"][q])[:20]
        words = set(queries[q].lower().split())
        assert {d: docs[d] for d in head} == {d: 2.0 * len(words & set(texts[d].lower().split())) for d in head}
    assert caplog.text.count("3 queries served one at a time, 3 ranked exactly as in the batch run") == 4


def test_a_pyterrier_retriever_without_input_and_answers_that_cannot_be_a_run(tmp_path, tiny_synthetic):
    docs = list(stagebench.load_dataset({"loader": "esci", "path": str(tiny_synthetic), "split": "test"}).corpus)[:3]
    result = run(tmp_path / "a", tiny_synthetic, [
        {"name": "fixed", "type": "pyterrier", "target": "tests.pt_builders:fixed", "params": {"docnos": docs, "top_k": 2}}])
    assert all(ranked_ids(r) == docs[:2] for r in result.runs["fixed"].values())
    with pytest.raises(DataError, match=r"stage added: the transformer's answer: query '\S+' has document 'not-a-candidate', "
                                        r"which is not among the 10 candidates it was given"):  # fmt: skip
        run(tmp_path / "b", tiny_synthetic, [{"name": "added", "type": "pyterrier", "inputs": ["bm25"],
                                              "target": "tests.pt_builders:adds_a_document", "params": {"top_n": 10}}])  # fmt: skip
    with pytest.raises(StagebenchError, match=r"stage nt: tests.pt_builders:not_a_transformer returned a function, not a "
                                              r"pyterrier.Transformer"):  # fmt: skip
        run(tmp_path / "c", tiny_synthetic, [{"name": "nt", "type": "pyterrier", "inputs": ["bm25"],
                                              "target": "tests.pt_builders:not_a_transformer"}])  # fmt: skip
    with pytest.raises(ConfigError, match=r"stages\[1\] \(typo\).params.boots: unknown key for word_overlap \(known: boost\)"):
        run(tmp_path / "d", tiny_synthetic, [{"name": "typo", "type": "pyterrier", "inputs": ["bm25"],
                                              "target": "tests.pt_builders:word_overlap", "params": {"boots": 2}}])  # fmt: skip


def test_a_retriever_builder_is_handed_the_corpus_and_keys_on_its_package(tmp_path, tiny_synthetic):
    """Issue 70: a builder with a ``corpus`` argument indexes the corpus it is handed; the stage's key
    holds the builder's source and the version of the package that holds it (none here: a module of
    the working tree)."""
    result = run(tmp_path, tiny_synthetic, [
        {"name": "idx", "type": "pyterrier", "target": "tests.pt_builders:overlap_index", "params": {"top_k": 5}}])
    ds = stagebench.load_dataset({"loader": "esci", "path": str(tiny_synthetic), "split": "test"})
    for q, docs in result.runs["idx"].items():
        words = set(ds.queries[q].lower().split())
        want = {d: float(len(words & set(ds.doc_text[d].lower().split()))) for d in ds.doc_ids}
        assert set(docs.values()) <= set(want.values())
        assert max(docs.values()) == max(want.values())  # the best match of the whole corpus is found
    from stagebench.stages.pyterrier import _package_version

    assert _package_version("tests.pt_builders") == "" and _package_version("pyterrier.apply").startswith("pyterrier==")


def test_a_builder_that_cannot_download_says_so_in_one_line(tmp_path, tiny_synthetic):
    with pytest.raises(StagebenchError, match=r"stage dl: tests.pt_builders:needs_a_download: PyTerrier could not "
                                              r"download what it needs .* run it once with internet"):  # fmt: skip
        run(tmp_path, tiny_synthetic, [{"name": "dl", "type": "pyterrier", "target": "tests.pt_builders:needs_a_download"}])


def test_an_index_opened_by_path_is_in_the_key_so_a_rebuilt_one_is_not_served_from_the_cache(tmp_path, tiny_synthetic,
                                                                                           caplog):  # fmt: skip
    """Issue 70: a builder's argument that names a file or folder (an index it opens) keys the stage by
    that index's files; the same index is read back from the cache, a rebuilt one is run again."""
    import json

    ds = stagebench.load_dataset({"loader": "esci", "path": str(tiny_synthetic), "split": "test"})
    index = tmp_path / "index.json"
    index.write_text(json.dumps({d: float(i) for i, d in enumerate(ds.doc_ids[:5])}))
    stages = [{"name": "idx", "type": "pyterrier", "target": "tests.pt_builders:stored_index",
               "params": {"top_k": 5, "index": str(index)}}]  # fmt: skip
    caplog.set_level(logging.INFO, logger="stagebench")
    first = run(tmp_path, tiny_synthetic, stages).runs["idx"]
    caplog.clear()
    assert run(tmp_path, tiny_synthetic, stages).runs["idx"] == first and "stage idx: cached run" in caplog.text
    index.write_text(json.dumps({d: float(-i) for i, d in enumerate(ds.doc_ids[:5])}))  # the index rebuilt
    caplog.clear()
    again = run(tmp_path, tiny_synthetic, stages).runs["idx"]
    assert "stage idx: computed run" in caplog.text and again != first
    assert all(ranked_ids(again[q]) == ranked_ids(first[q])[::-1] for q in first)
