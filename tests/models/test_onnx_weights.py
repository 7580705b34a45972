"""The bundled INT8 ONNX cross-encoder against a sentence-transformers reference.

The fp32 original cannot be fetched offline; the reference is the same weights
dequantized to fp32 and run by sentence-transformers' CrossEncoder (see
src/stagebench/models/onnx_weights.py for what that does and does not measure).
"""

from __future__ import annotations

import random

import numpy as np
import pytest


@pytest.mark.slow  # loads and runs real models
def test_int8_onnx_ranks_200_pairs_like_the_sentence_transformers_reference(tmp_path, monkeypatch, small_synthetic):
    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import CrossEncoder
    from transformers import BertForSequenceClassification

    from stagebench.data.esci import EsciOptions, load_esci
    from stagebench.runtime.devices import place
    from stagebench.models.encoders import load_cross_encoder
    from stagebench.models.resolve import resolve_model
    from stagebench.models.onnx_weights import build_reference_folder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = resolve_model("cross-encoder/ms-marco-MiniLM-L-12-v2")
    ref_dir = build_reference_folder(model.path, tmp_path / "ref")
    _, info = BertForSequenceClassification.from_pretrained(str(ref_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]  # every weight came from the ONNX file

    ds = load_esci(EsciOptions(path=str(small_synthetic), split=None))
    rng = random.Random(0)
    pairs = [(ds.queries[q], ds.doc_text[d]) for q in rng.sample(ds.query_ids, 25)
             for d in rng.sample(sorted(ds.qrels[q]), 10) if d in ds.doc_text]  # fmt: skip
    pairs = pairs[:200]
    assert len(pairs) == 200
    ref = CrossEncoder(str(ref_dir), device="cpu", max_length=256, activation_fn=torch.nn.Identity()).predict(
        pairs, batch_size=32, activation_fn=torch.nn.Identity()
    )
    ours = load_cross_encoder(model, place("cpu", "auto", "onnx", "test"), 256).predict(pairs, 32)
    rho = spearmanr(ref, ours).statistic
    assert rho >= 0.99, rho
    assert np.corrcoef(ref, ours)[0, 1] >= 0.99


@pytest.mark.slow  # builds two variants and runs both
def test_on_a_gpu_the_bundled_cross_encoder_runs_its_dequantized_weights_in_torch(tmp_path, monkeypatch):
    """Issue 83: ``fp32`` of the bundled INT8 ONNX cross-encoder off the CPU is a transformers folder of its
    dequantized weights (torch runs it on the GPU whether or not onnxruntime has a CUDA build). The
    variant is built and checked on any machine: here it scores real pairs as the ONNX graph's
    dequantized fp32 form does on the CPU (its check's refusal of a wrong build: the fast test below)."""
    from stagebench.cache import Cache
    from stagebench.models.encoders import load_cross_encoder
    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import for_placement, onnx_kind, recipe_for, recipe_runtime
    from stagebench.runtime.devices import Placement

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = resolve_model("cross-encoder/ms-marco-MiniLM-L-12-v2")
    kind, gpu, cpu = onnx_kind(model), Placement("cuda:0", "fp32", "t"), Placement("cpu", "fp32", "t")
    assert (recipe_for(model, gpu, kind), recipe_runtime(kind, "dequantized-torch")) == ("dequantized-torch", "torch")
    assert recipe_for(model, cpu, kind) == "dequantized"  # the CPU keeps onnxruntime (streams, measured faster)
    bge = resolve_model("BAAI/bge-small-en-v1.5")  # another architecture: its dequantized graph stays in onnxruntime
    assert recipe_for(bge, gpu, onnx_kind(bge), "bi_encoder") == "dequantized"

    cache = Cache(tmp_path / "cache")
    ran = for_placement(model, gpu, kind, cache, "test")
    assert ran.backend == "sentence_transformers" and ran.identity.startswith(model.identity + "+dequantized-torch#")
    pairs = [("stainless steel water bottle", "Insulated stainless steel water bottle, 750 ml, keeps drinks cold 24 h"),
             ("stainless steel water bottle", "Glass food storage containers with lids, set of 5"),
             ("kids rain boots", "Waterproof rubber rain boots for toddlers and kids, easy-on handles " * 6)]  # fmt: skip
    torch_scores = load_cross_encoder(ran, cpu, 256).predict(pairs, 2)
    onnx_scores = load_cross_encoder(for_placement(model, cpu, kind, cache, "test"), cpu, 256).predict(pairs, 2)
    assert np.max(np.abs(torch_scores - onnx_scores)) < 1e-4, (torch_scores, onnx_scores)
    assert torch_scores[0] > torch_scores[1] + 1  # a real ranking, not two equal constants


def test_the_dequantized_torch_check_refuses_weights_that_score_otherwise(tmp_path, monkeypatch):
    """The check a dequantized-torch variant passes before it is cached compares the transformers folder with
    the ONNX graph's dequantized form: built with a wrong architecture (6 attention heads, not 12), its probe
    pairs score otherwise, it is refused and nothing is cached (a check comparing either side with itself
    would pass it). Fast: the folder is built and refused on the CPU, no GPU needed."""
    from stagebench.cache import Cache
    from stagebench.errors import StagebenchError
    from stagebench.models import onnx_weights
    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import for_placement, onnx_kind
    from stagebench.runtime.devices import Placement

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = resolve_model("cross-encoder/ms-marco-MiniLM-L-12-v2")
    monkeypatch.setitem(onnx_weights.BERT_CONFIG, "num_attention_heads", 6)
    with pytest.raises(StagebenchError, match=r"score probe pairs up to (\S+) away .* nothing was cached") as err:
        for_placement(model, Placement("cuda:0", "fp32", "t"), onnx_kind(model), Cache(tmp_path / "cache"), "test")
    assert float(err.value.args[0].split("up to ")[1].split()[0]) > 0.01
    assert not any((tmp_path / "cache" / "models").glob("*/model.safetensors"))
