"""The ONNX path tokenizes once and keeps ids packed end to end (5 bytes a token, not the tokenizer's
objects of ~13 KB an input): what a model batch reads from the packing is what the tokenizer wrote,
for texts and pairs, across the chunks it is built from."""

from __future__ import annotations

import numpy as np
import pytest

import stagebench
from stagebench.models import encoders

pytestmark = pytest.mark.slow  # loads a real tokenizer and model


def test_packed_tokens_are_the_tokenizers_own_across_chunks(monkeypatch):
    sess = stagebench.api.cross_encoder("cross-encoder/ms-marco-MiniLM-L-12-v2", device="cpu", precision="int8", max_length=48).sess
    monkeypatch.setattr(encoders, "TOKENIZE_CHUNK", 300)
    pairs = [(f"query {i} cotton", " ".join(["soft washable"] * (i % 40))) for i in range(700)]
    texts = [d or q for q, d in pairs]
    for inputs in (pairs, texts, pairs[:5]):  # 3 chunks; a model batch's worth, tokenized one by one
        tokens = sess.tokenize(inputs)
        assert len(tokens) == len(inputs) and tokens.ids.dtype == np.int32 and tokens.types.dtype == np.uint8
        for i in sorted({0, 1, 299, 300, 301, 599, 600, len(inputs) - 1} & set(range(len(inputs)))):
            want = sess.tokenizer.encode(*inputs[i]) if isinstance(inputs[i], tuple) else sess.tokenizer.encode(inputs[i])
            got = slice(tokens.starts[i], tokens.starts[i + 1])
            assert tokens.ids[got].tolist() == want.ids and tokens.types[got].tolist() == want.type_ids
        assert tokens.lengths.max() == 48 or len(inputs) == 5  # truncated to the model's max_length
    # a batch of rows read from the packing, padded to its longest: each row's logit as when scored alone
    tokens = sess.tokenize(pairs)
    rows = np.array([3, 650, 12])
    batch, mask = sess.run(tokens, rows)
    assert mask.shape[1] == tokens.lengths[rows].max() and (mask.sum(1) == tokens.lengths[rows]).all()
    alone = [sess.run(sess.tokenize([pairs[i]]), [0])[0] for i in rows]
    assert batch.shape[0] == 3 and all(np.allclose(batch[r], a[0], atol=0.05) for r, a in enumerate(alone))


def test_token_lengths_are_counted_a_chunk_at_a_time_alike(monkeypatch):
    from stagebench.models.resolve import resolve_model

    model = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    texts = [" ".join(["washable cotton shirt"] * (i % 30)) for i in range(700)]
    whole = encoders.token_lengths(model, texts, 48)
    monkeypatch.setattr(encoders, "TOKENIZE_CHUNK", 300)
    assert encoders.token_lengths(model, texts, 48) == whole and max(whole) == 48 and min(whole) == 2
