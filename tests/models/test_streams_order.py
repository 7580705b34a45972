"""The streams hand each batch's output back to the rows it was computed for (issue 92): many more batches
than twice the streams in flight, every batch the same size (so a batch handed back in another order
lands on other rows without a shape error), compared row by row with one stream - the same batches, so
the same bits. Real bundled models (the session's variants), real onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import stagebench

CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BI = "sentence-transformers/all-MiniLM-L6-v2"
#: 24 texts of distinct lengths: 12 batches of 2, six times the 2 streams' 2 x 2 in flight
TEXTS = [" ".join(["insulated steel bottle", "kids rain boots", "usb c cable"][i % 3] for _ in range(1 + i)) for i in range(24)]


@pytest.mark.parametrize("role", ["cross_encoder", "bi_encoder"])
def test_every_batch_comes_back_to_its_own_rows_with_many_batches_in_flight(role, model_variants, monkeypatch):
    monkeypatch.setenv("STAGEBENCH_CACHE", str(model_variants))
    monkeypatch.setenv("STAGEBENCH_THREADS", "2")
    out = []
    for streams in (1, 2):
        if role == "cross_encoder":
            model = stagebench.api.cross_encoder(CE, device="cpu", max_length=128, streams=streams)
            out.append(model.predict([("steel bottle", t) for t in TEXTS], 2))
        else:
            model = stagebench.api.bi_encoder(BI, device="cpu", max_length=128, streams=streams)
            out.append(model.encode(TEXTS, 2))
        assert model.sess.streams == streams
    assert out[0].shape[0] == len(TEXTS) and np.array_equal(out[0], out[1])
    assert len({float(x) for x in np.ravel(out[0][:, :1] if out[0].ndim == 2 else out[0])}) == len(TEXTS)  # all distinct
