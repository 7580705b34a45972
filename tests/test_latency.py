"""Per-query latency: each stage serves one query at a time, warm (Stage.server), and the cost
table reports its p50/p95/p99; a cascade's latency is each sampled query's milliseconds summed
over its stages. Real stages, real data, no fakes: what a stage serves for one query must be what
its batch run ranked for that query, and the report's figures must follow from the manifest."""

from __future__ import annotations

import json
import logging
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest

from stagebench.cache import Cache
from stagebench.config import load_config
from stagebench.errors import ConfigError
from stagebench.pipeline import read_dataset, run_config
from stagebench.runs import ranked
from stagebench.stages import StageContext, stage_class

PLUGIN = """
class ByLength:
    def score(self, query, docs):
        return self.score_pairs([(query, d) for d in docs])

    def score_pairs(self, pairs):
        return [float(len(d) % 97) + 0.01 * len(q) for q, d in pairs]
"""


def config(tmp_path: Path, dataset: Path, stages: str, evaluation: str = "", name: str = "lat") -> Path:
    (tmp_path / "bylength.py").write_text(PLUGIN)
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\noutput: {tmp_path / name}\ncache_dir: {tmp_path / 'cache'}\n"
                 f"dataset: {{loader: esci, path: {dataset}, split: test}}\nstages:\n{stages}\n"
                 f"evaluation: {{metrics: [nDCG@10, R@100], permutations: 200, bootstrap: 200{evaluation}}}\n")  # fmt: skip
    return p


CASCADE = """  - {name: bm25, type: bm25, params: {top_k: 100}}
  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english}}
  - {name: rrf, type: rrf, inputs: [bm25, stem], params: {top_k: 50}}
  - {name: mix, type: score_fusion, inputs: [bm25, stem], params: {method: combmnz, norm: zscore}}
  - {name: len, type: plugin, target: "bylength:ByLength", inputs: [rrf], params: {top_n: 20}}
  - {name: title, type: plugin, target: "examples.title_boost:TitleBoostReranker", inputs: [rrf], params: {top_n: 10}}"""


def same_within(a: dict[str, float], b: dict[str, float], tol: float) -> bool:
    """Two rankings of one query that differ by float rounding only: every common document's score
    within ``tol``, and a document in one list only, or in another order, tied within ``tol``
    with the one it swapped with."""
    if len(a) != len(b):
        return False
    if any(abs(a[d] - b[d]) > tol for d in a.keys() & b.keys()):
        return False
    ra, rb = ranked(a), ranked(b)
    return all(da == db or abs(sa - sb) <= tol for (da, sa), (db, sb) in zip(ra, rb))


def served_against_batch(cfg: Path, tmp_path: Path, runs: dict, tol: dict[str, float] | None = None) -> dict[str, int]:
    """Serve every query of every stage one at a time through Stage.server and count the queries
    whose served ranking and scores are exactly the batch run's (within ``tol[stage]`` where given)."""
    conf = load_config(cfg)
    ds = read_dataset(conf.dataset)
    same = {}
    for sc in conf.stages:
        stage = stage_class(sc.type, sc.target, sc.name)(sc.name, sc.params, sc.engine)
        serve = stage.server(StageContext(ds, Cache(tmp_path / "cache")))
        assert serve is not None, sc.name
        n = 0
        for q in ds.query_ids:
            got = serve(q, [{q: runs[i][q]} if q in runs[i] else {} for i in sc.inputs])
            if tol and sc.name in tol:
                n += same_within(got.get(q, {}), runs[sc.name].get(q, {}), tol[sc.name])
            else:
                n += ranked(got.get(q, {})) == ranked(runs[sc.name].get(q, {}))
        same[sc.name] = n
    return same


def test_each_stage_serves_one_query_exactly_as_its_batch_run_ranked_it(tmp_path, small_synthetic, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config(tmp_path, small_synthetic, CASCADE)
    result = run_config(load_config(cfg))
    n_q = len(result.dataset.queries)
    assert served_against_batch(cfg, tmp_path, result.runs) == dict.fromkeys(
        ["bm25", "stem", "rrf", "mix", "len", "title"], n_q)  # fmt: skip


def test_latency_is_measured_on_one_seeded_sample_cached_and_summed_per_query_in_the_report(
        tmp_path, small_synthetic, monkeypatch, caplog):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="stagebench")
    cfg = config(tmp_path, small_synthetic, CASCADE, ", latency_queries: 15, seed: 3")
    result = run_config(load_config(cfg))
    manifest = json.loads((result.output / "manifest.json").read_text())
    stages = {s["name"]: s for s in manifest["stages"]}
    qids = sorted(result.dataset.queries)
    want = sorted(random.Random(3).sample(qids, 15))  # the sample, from its definition
    for name, s in stages.items():
        assert sorted(s["latency_ms"]) == want, name
        assert all(v > 0 for v in s["latency_ms"].values()), name
    assert sum("15 queries served one at a time, 15 ranked exactly as in the batch run" in r.getMessage()
               for r in caplog.records) == len(stages)  # fmt: skip

    # the cost table: each stage's own percentiles, numpy's linear interpolation
    html = (result.output / "report.html").read_text()
    cost = html[html.index('<table id="cost">'):]
    cost = cost[: cost.index("</table>")]
    assert "one query at a time p50 / p95 / p99 (ms) (15 queries)" in cost
    for name, s in stages.items():
        v = np.array(list(s["latency_ms"].values()))
        cells = " / ".join(f"{np.percentile(v, p):.1f}" for p in (50, 95, 99))
        assert re.search(rf"<td>{name}</td>.*<td>{re.escape(cells)}</td>", cost), name

    # the quality-cost table: the percentiles of each query's sum over the cascade up to the stage
    up = {"bm25": ["bm25"], "stem": ["stem"], "rrf": ["bm25", "stem", "rrf"], "mix": ["bm25", "stem", "mix"],
          "len": ["bm25", "stem", "rrf", "len"], "title": ["bm25", "stem", "rrf", "title"]}  # fmt: skip
    qc = html[html.index('<table id="quality-cost">'):]
    qc = qc[: qc.index("</table>")]
    for name, names in up.items():
        sums = np.array([math.fsum(stages[x]["latency_ms"][q] for x in names) for q in want])
        cells = " / ".join(f"{np.percentile(sums, p):.1f}" for p in (50, 95, 99))
        assert re.search(rf"<td>{name}</td>(<td>[^<]*</td>){{3}}<td>{re.escape(cells)}</td>", qc), name

    # a second run reads every latency back from the cache: the same figures, nothing served
    caplog.clear()
    again = run_config(load_config(cfg))
    assert [s["latency_ms"] for s in json.loads((again.output / "manifest.json").read_text())["stages"]] == \
        [s["latency_ms"] for s in manifest["stages"]]  # fmt: skip
    assert not any("ranked exactly as in the batch run" in r.getMessage() for r in caplog.records)
    assert sum(r.getMessage().startswith(f"stage {n}: cached per-query latency") for r in caplog.records
               for n in stages) == len(stages)  # fmt: skip


def test_latency_queries_zero_measures_nothing_and_a_negative_count_is_refused_at_load(tmp_path, small_synthetic,
                                                                                     monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    stages = "  - {name: bm25, type: bm25, params: {top_k: 100}}"
    result = run_config(load_config(config(tmp_path, small_synthetic, stages, ", latency_queries: 0")))
    manifest = json.loads((result.output / "manifest.json").read_text())
    assert "latency_ms" not in manifest["stages"][0]
    assert sorted(r["kind"] for r in Cache(tmp_path / "cache").list()) == ["bm25-index", "runs"]
    html = (result.output / "report.html").read_text()
    assert re.search(r"<td>bm25</td>(<td>[^<]*</td>){4}<td>-</td>", html[html.index('<table id="cost">'):])
    bad = config(tmp_path, small_synthetic, stages, ", latency_queries: -1", name="bad")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*evaluation\.latency_queries"):
        load_config(bad)


@pytest.mark.slow
def test_model_stages_serve_one_query_exactly_as_their_batch_run_ranked_it(tmp_path, tiny_synthetic, monkeypatch, caplog,
                                                                          capfd):  # fmt: skip
    """Dense, at its default and at bf16 (whose embedding of a text moves with its batch mates), and
    the cross-encoder (int8-token: a pair scores the same whatever its batch mates), exactly: the
    dense run encodes each query alone, as serving does. A run with --recompute encodes the corpus
    once: the latency check serves from the index the run built. A served query draws no progress bar
    (the cross-encoder's batch run draws one; each of the 5 served queries had drawn its own)."""
    monkeypatch.chdir(tmp_path)
    stages = """  - {name: bm25, type: bm25, params: {top_k: 100}}
  - {name: dense, type: dense, params: {top_k: 100}}
  - {name: dense_bf16, type: dense, params: {top_k: 100, precision: bf16}}
  - {name: rrf, type: rrf, inputs: [bm25, dense], params: {top_k: 30}}
  - {name: ce, type: cross_encoder, inputs: [rrf], params: {top_n: 10}}"""
    data = f"{tiny_synthetic}, max_queries: 12, corpus_scope: judged"  # the 12 queries' judged products: 3 encodes of ~300
    cfg = config(tmp_path, data, stages, ", latency_queries: 5")
    result = run_config(load_config(cfg))
    assert capfd.readouterr().err.count("ce: rerank:") == 1
    n_q = len(result.dataset.queries)
    served = served_against_batch(cfg, tmp_path, result.runs)
    assert served == dict.fromkeys(["bm25", "dense", "dense_bf16", "rrf", "ce"], n_q)
    manifest = json.loads((result.output / "manifest.json").read_text())
    assert all(len(s["latency_ms"]) == 5 for s in manifest["stages"])
    alone = config(tmp_path, data, "  - {name: dense, type: dense, params: {top_k: 100}}",
                   ", latency_queries: 5", name="dense_alone")  # fmt: skip
    caplog.set_level(logging.INFO, logger="stagebench")
    caplog.clear()
    again = run_config(load_config(alone), recompute=True)
    assert caplog.text.count("computed corpus embeddings") == 1
    assert "5 queries served one at a time, 5 ranked exactly as in the batch run" in caplog.text
    assert again.runs["dense"] == result.runs["dense"]
