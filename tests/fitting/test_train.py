"""`stagebench train-reranker`: data separation, a real (tiny) fine-tuning run, reproducibility, bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from stagebench.config import load_config
from stagebench.errors import ConfigError
from tests.conftest import REPO, child_path, stagebench_cli

pytestmark = pytest.mark.slow  # fine-tunes a real cross-encoder

ENV = {"PYTHONPATH": child_path(), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}


def write_config(tmp_path: Path, dataset: Path, training: str, name: str = "t", extra_stage: str = "", mq: str = "") -> Path:
    """``mq``: the run's query filter (``, max_queries: N``; training reads the whole train split whatever it is)."""
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"""
name: {name}
output: {tmp_path / ('out-' + name)}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {dataset}, split: test{mq}, text_template: "{{title}} {{brand}} {{color}}"}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 50}}}}
{extra_stage}
training:
{training}
evaluation: {{metrics: [nDCG@10, RR@10], permutations: 200, bootstrap: 100, latency_queries: 0}}
""")
    return p


TINY = """  base_model: sentence-transformers/all-MiniLM-L6-v2   # a bi-encoder: gets a fresh one-logit head
  output: {out}
  dev_queries: 5
  negatives: {{from_stage: bm25, per_query: 3, depth: 20}}
  epochs: 1
  batch_size: 16
  max_length: 16
  learning_rate: 5.0e-5
  seed: {seed}"""


def test_no_test_query_or_judgment_reaches_training(tmp_path, small_synthetic):
    from stagebench.data.esci import EsciOptions, load_esci
    from stagebench.fitting.train import build_training_data

    config = load_config(write_config(tmp_path, small_synthetic, TINY.format(out=tmp_path / "m", seed=1)))
    data, ds = build_training_data(config, config.training)
    test = load_esci(EsciOptions(path=str(small_synthetic), split="test"))
    train_split = load_esci(EsciOptions(path=str(small_synthetic), split="train"))
    used = set(data.train_qids) | set(data.dev)
    assert used == set(train_split.queries) and not used & set(test.queries)
    assert not set(data.train_qids) & set(data.dev)  # dev queries are held out of training
    assert set(ds.qrels) <= set(train_split.queries)  # the training dataset never held a test judgment
    test_texts = set(test.queries.values())
    assert not {q for _, q, _, _ in data.train} & test_texts and not set(data.dev_queries.values()) & test_texts
    assert data.stats["train_pairs"] == len(data.train) and data.stats["mined"] > 0 and data.stats["judged"] > 0
    # a judged document is trained once, with its label's target - never again as a mined negative
    # (counted by text: a judged document mined too would appear twice for its query)
    from collections import Counter

    pairs = Counter((q, text) for q, _, text, _ in data.train)
    for q in {q for q, _, _, _ in data.train}:
        judged_texts = Counter(ds.doc_text[d] for d in ds.qrels[q] if d in ds.doc_text)
        for text, n in judged_texts.items():
            assert pairs[q, text] == n, (q, text)
    unjudged = [(q, y) for q, _, text, y in data.train
                if text not in {ds.doc_text[d] for d in ds.qrels[q] if d in ds.doc_text}]  # fmt: skip
    assert len(unjudged) == data.stats["mined"] and {y for _, y in unjudged} == {0.0}


def train_cli(cfg: Path, cwd: Path):
    return stagebench_cli("train-reranker", str(cfg), cwd=cwd, env=ENV)  # fmt: skip


def test_tiny_fine_tuning_is_reproducible_and_usable_as_a_stage(tmp_path, small_synthetic):
    reports = []
    for run in ("a", "b"):
        out = tmp_path / f"model-{run}"
        stage = f"  - {{name: ce, type: cross_encoder, inputs: [bm25], params: {{model: {out}, top_n: 10, max_length: 64}}}}"
        # 5 train queries (about 150 pairs, 10 steps): reproducibility needs steps, not many of them
        cfg = write_config(tmp_path, small_synthetic, TINY.format(out=out, seed=3) + "\n  max_queries: 5", name=f"t{run}",
                           extra_stage=stage, mq=", max_queries: 10")  # fmt: skip
        r = train_cli(cfg, tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "dev (5 queries held out of the train split)" in r.stdout
        rep = json.loads((out / "stagebench_training.json").read_text())
        assert (out / "README.md").read_text().startswith("# Cross-encoder reranker fine-tuned by stagebench")
        reports.append(rep)
    a, b = reports
    assert a["dev_after"] == b["dev_after"] and a["dev_after"] != a["dev_before"]  # same seed, same dev metrics
    wa = hashlib.sha256((tmp_path / "model-a" / "model.safetensors").read_bytes()).hexdigest()
    wb = hashlib.sha256((tmp_path / "model-b" / "model.safetensors").read_bytes()).hexdigest()
    assert wa == wb  # bit-identical weights on this machine
    r = stagebench_cli("run", str(tmp_path / "ta.yaml"), cwd=tmp_path, env=ENV)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((tmp_path / "out-ta" / "manifest.json").read_text())
    identity = manifest["resolved"]["stages"][1]["key_parts"]["identity"]["model"]
    # the cache keys on the weights: sha256 over the weight file's name and bytes
    weights = hashlib.sha256(b"model.safetensors" + (tmp_path / "model-a" / "model.safetensors").read_bytes())
    assert identity.startswith("local:") and identity.endswith("#" + weights.hexdigest()[:16])


def test_stage_naming_an_untrained_output_fails_before_any_stage(tmp_path, small_synthetic):
    out = tmp_path / "not-yet"
    stage = f"  - {{name: ce, type: cross_encoder, inputs: [bm25], params: {{model: {out}, top_n: 10}}}}"
    cfg = write_config(tmp_path, small_synthetic, TINY.format(out=out, seed=1), extra_stage=stage)
    r = stagebench_cli("run", str(cfg), cwd=tmp_path, env=ENV)  # fmt: skip
    assert r.returncode == 2 and "is this config's training output and does not exist yet" in r.stderr
    assert "stage bm25" not in r.stderr


@pytest.fixture(scope="module")
def no_train_split(tmp_path_factory) -> Path:
    from stagebench.data.synthetic import SyntheticSpec, generate

    out = tmp_path_factory.mktemp("no-train")
    generate(out, SyntheticSpec(seed=5, n_products=400, n_test_queries=5, n_train_queries=0))
    return out


def test_split_without_queries_is_an_error_before_training(tmp_path, no_train_split):
    cfg = write_config(tmp_path, no_train_split, TINY.format(out=tmp_path / "m", seed=1))
    r = train_cli(cfg, tmp_path)
    assert r.returncode == 2
    assert f"stagebench: error: {cfg}: training.split: split 'train' has no queries" in r.stderr
    assert "dev metrics" not in r.stderr and not (tmp_path / "m").exists()


def test_unloadable_base_model_is_a_config_error(tmp_path, small_synthetic, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    training = TINY.format(out=tmp_path / "m", seed=1).replace("sentence-transformers/all-MiniLM-L6-v2", "nobody/nothing")
    with pytest.raises(ConfigError, match=r"training.base_model: model 'nobody/nothing' not found; tried"):
        load_config(write_config(tmp_path, small_synthetic, training))


def test_labels_outside_the_mapping_are_an_error_before_training(tmp_path, small_synthetic):
    training = TINY.format(out=tmp_path / "m", seed=1) + "\n  labels: {E: 1.0, S: 0.1, I: 0.0}"
    r = train_cli(write_config(tmp_path, small_synthetic, training), tmp_path)
    assert r.returncode == 2
    assert "training.labels: no target for C (grade 1):" in r.stderr and "mapping has ['E', 'I', 'S']" in r.stderr
    assert "dev metrics" not in r.stderr and not (tmp_path / "m").exists()


@pytest.mark.parametrize("training,msg", [
    ("  loss: hinge", r"training.loss: must be one of bce, mse, lambda"),
    ("  negatives: {from_stage: bm52}", r"training.negatives.from_stage: unknown stage 'bm52'"),
    ("  epoch: 2", r"training.epoch: unknown key"),
])  # fmt: skip
def test_bad_training_keys(tmp_path, small_synthetic, training, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(write_config(tmp_path, small_synthetic, training))
