"""The bundled INT8 ONNX cross-encoder against a sentence-transformers reference.

The fp32 original cannot be fetched offline; the reference is the same weights
dequantized to fp32 and run by sentence-transformers' CrossEncoder (see
src/stagebench/models/onnx_weights.py for what that does and does not measure).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # loads and runs real models


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
