"""``type: rerankers`` (issue 95): a reranker of the rerankers library in one config entry.

* The bundled cross-encoder loaded through the library's cross-encoder backend scores every pair as the
  project's own ``precision: fp32`` path of the same weights does (the dequantized INT8 carrier), within
  float rounding, and ranks alike - through ``stagebench.api.run``, real models, real library.
* A hosted reranker's key comes from the environment only: missing, the run is refused before any stage
  with one line naming the variable; given, it goes to the endpoint the config names and nowhere else (a
  real Cohere-shaped server on 127.0.0.1), and a server that fails is one line naming the stage and query.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import stagebench
from stagebench import cli

pytest.importorskip("rerankers")

CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"


def _config(tmp_path, data, reranker: dict, extra: list | None = None) -> dict:
    return {"name": "rr", "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
            "dataset": {"loader": "esci", "path": str(data), "split": "test"},
            "stages": [{"name": "bm25", "type": "bm25", "params": {"top_k": 20}}, *(extra or []),
                       {"name": "lib", "type": "rerankers", "inputs": ["bm25"], "params": reranker}],
            "evaluation": {"metrics": ["nDCG@10"], "permutations": 200, "bootstrap": 200}}  # fmt: skip


def test_the_bundled_cross_encoder_through_the_library_scores_as_the_projects_fp32_path(tmp_path, tiny_synthetic, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    own = {"name": "ce_fp32", "type": "cross_encoder", "inputs": ["bm25"],
           "params": {"model": CE, "precision": "fp32", "max_length": 128, "top_n": 5}}  # fmt: skip
    conf = _config(tmp_path, tiny_synthetic, {"model": CE, "model_type": "cross-encoder", "max_length": 128, "top_n": 5},
                   [own])  # fmt: skip
    result = stagebench.api.run(conf)
    ours, lib = result.runs["ce_fp32"], result.runs["lib"]
    assert set(ours) == set(lib) and len(ours) == 24
    worst = 0.0
    for q in ours:
        head = sorted(ours[q], key=ours[q].get, reverse=True)[:5]
        assert sorted(lib[q], key=lib[q].get, reverse=True)[:5] == head or \
            max(abs(ours[q][d] - lib[q][d]) for d in head) < 1e-4  # fmt: skip
        worst = max(worst, *(abs(ours[q][d] - lib[q][d]) for d in head))
    assert worst < 1e-4, worst  # the same weights, fp32 both: float rounding only
    table = result.stage_table
    assert table.row("lib").metrics["nDCG@10"] == pytest.approx(table.row("ce_fp32").metrics["nDCG@10"], abs=1e-9)


class _Cohere(BaseHTTPRequestHandler):
    """A Cohere-shaped /v1/rerank: a document's score is the query words it holds (or a 500 when asked to fail)."""

    seen: list = []
    fail = False

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body["model"]))
        if type(self).fail:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"message": "internal error"}')
            return
        words = set(body["query"].lower().split())
        results = [{"index": i, "relevance_score": float(len(words & set(d.lower().split())))}
                   for i, d in enumerate(body["documents"])]  # fmt: skip
        out = json.dumps({"results": sorted(results, key=lambda r: -r["relevance_score"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        return None


def test_a_hosted_reranker_takes_its_key_from_the_environment_and_sends_it_only_where_the_config_points(
        tmp_path, tiny_synthetic, monkeypatch, capsys):  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Cohere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/rerank"
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(_config(tmp_path, tiny_synthetic, {"model": "rerank-english-v3.0", "model_type": "cohere",
                                                                  "url": url, "top_n": 5})))  # fmt: skip
    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    try:
        assert cli.main(["run", str(cfg)]) == 2  # no key: refused before any stage, nothing written
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stagebench: error:")]
        assert len(err) == 1 and "COHERE_API_KEY is not set" in err[0], err
        assert not (tmp_path / "out").exists() and _Cohere.seen == []
        monkeypatch.setenv("COHERE_API_KEY", "k-123")
        assert cli.main(["run", str(cfg)]) == 0
        assert {s[:2] for s in _Cohere.seen} == {("/v1/rerank", "Bearer k-123")} and len(_Cohere.seen) == 24
        run = stagebench.api.open(tmp_path / "out").runs["lib"]
        q = next(iter(run))
        assert "k-123" not in (tmp_path / "out" / "manifest.json").read_text()
        assert max(run[q].values()) == run[q][max(run[q], key=run[q].get)]
        # the variable the key is read from does not change the run: another one, the same key, the run reused
        monkeypatch.setenv("OTHER_KEY", "k-123")
        cfg.write_text(cfg.read_text().replace('"url":', '"api_key_env": "OTHER_KEY", "url":'))
        assert cli.main(["run", str(cfg)]) == 0 and len(_Cohere.seen) == 24
        assert stagebench.api.open(tmp_path / "out").runs["lib"] == run
        _Cohere.fail = True
        cfg.write_text(cfg.read_text().replace('"top_n": 5', '"top_n": 4'))
        capsys.readouterr()
        assert cli.main(["run", str(cfg)]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stagebench: error:")]
        assert len(err) == 1 and "stage lib: rerankers rerank-english-v3.0 raised in score() on query" in err[0], err
        assert stagebench.api.open(tmp_path / "out").runs["lib"] == run  # the folder of the last good run kept
    finally:
        server.shutdown()
