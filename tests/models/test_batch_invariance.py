"""A pair's score (and a text's embedding) is a function of its input: every path offered as
batch-invariant gives the same output for an input scored alone, with its query's other
candidates, and in mixed cross-query batches of other sizes and paddings, within TOLERANCE; the
batch-dependent path (the carrier's own per-batch dynamic INT8) is shown to be what its name says.
Real bundled models, real onnxruntime/torch."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import stagebench

pytestmark = pytest.mark.slow

#: the most an output may move with its batch mates and padding (logits; embedding components)
TOLERANCE = 1e-3
CE = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BI = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> str:
    """One cache for the module's model variants: each recipe is built once (and two recipes of one
    carrier must live side by side in it)."""
    return str(tmp_path_factory.mktemp("variants"))


@pytest.fixture(scope="module")
def pairs(small_synthetic):
    ds = stagebench.load_dataset({"loader": "esci", "path": str(small_synthetic), "split": "test"})
    qids = ds.query_ids[:5]  # 30 pairs: each scored alone, with its query's others, and in mixed batches of 7 and 32
    run = stagebench.stage("bm25", top_k=6).apply(ds.subset(qids), cache=False).run
    out = [[(ds.queries[q], ds.doc_text[d]) for d in run[q]] for q in qids]
    long_doc = " ".join(ds.doc_text[d] for d in list(run[qids[0]])[:4])  # a batch mate that forces padding
    return out, (ds.queries[qids[1]], long_doc)


def three_ways(score, groups, long_pair):
    """Each pair's output alone, with its own query's candidates, and in shuffled cross-query batches
    (with a long pair) of 7 and of 32."""
    flat = [p for g in groups for p in g]
    alone = np.array([score([p])[0] for p in flat])
    per_query = np.concatenate([score(g) for g in groups])
    order = list(range(len(flat)))
    random.Random(3).shuffle(order)
    mixed = {}
    for size in (7, 32):
        out = np.zeros(len(flat))
        for i in range(0, len(order), size):
            idx = order[i : i + size]
            out[idx] = score([flat[j] for j in idx] + [long_pair])[: len(idx)]
        mixed[size] = out
    return alone, per_query, mixed


def largest_move(alone, per_query, mixed) -> float:
    return max(float(np.abs(alone - per_query).max()), *(float(np.abs(alone - m).max()) for m in mixed.values()))


#: the paths a CPU offers as batch-invariant; ``auto`` picks one of them (tested below, not scored again)
INVARIANT = ["int8-token", "fp32"]


@pytest.mark.parametrize("precision", INVARIANT)
def test_cross_encoder_paths_offered_as_invariant_are(pairs, precision, variants, monkeypatch):
    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, long_pair = pairs
    model = stagebench.api.cross_encoder(CE, device="cpu", precision=precision, max_length=256)
    alone, per_query, mixed = three_ways(lambda ps: model.predict(ps, 32), groups, long_pair)
    assert largest_move(alone, per_query, mixed) <= TOLERANCE
    assert np.ptp(alone) > 1.0  # real scores, not a constant


def unread_initializers(model_dir: str) -> set[str]:
    """The rewritten graph's constants that no node reads (onnxruntime logs a warning for each)."""
    import onnx

    g = onnx.load(str(Path(model_dir) / "model.onnx"), load_external_data=False).graph
    return {t.name for t in g.initializer} - {i for n in g.node for i in n.input}


def test_the_int8_token_rewrite_keeps_the_model(pairs, variants, monkeypatch):
    """Per-token INT8 stays close to the fp32 weights (a wrong rewrite or fusion, e.g. onnxruntime
    applying one scale to every row, moved logits by over 2) and ranks each query's pairs alike."""
    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, _ = pairs
    fp32 = stagebench.api.cross_encoder(CE, device="cpu", precision="fp32", max_length=256)
    tok = stagebench.api.cross_encoder(CE, device="cpu", precision="int8-token", max_length=256)
    assert tok.placement.precision == "int8-token" and "per-token" in tok.model.origin
    # two recipes of one carrier in one cache: two entries, each built by its own recipe
    built = {json.loads((Path(m.model.path) / "variant.json").read_text())["recipe"]: m.model.path for m in (fp32, tok)}
    assert set(built) == {"dequantized", "per-token"} and len(set(built.values())) == 2
    assert not {n for n in unread_initializers(built["per-token"]) if n.startswith("sb_")}
    for g in groups:
        a, b = fp32.predict(g, 32), tok.predict(g, 32)
        assert np.abs(a - b).max() < 0.75
        assert np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1] > 0.8


def test_the_carriers_own_int8_is_batch_dependent_as_documented(pairs):
    groups, long_pair = pairs
    model = stagebench.api.cross_encoder(CE, device="cpu", precision="int8", max_length=256)
    assert largest_move(*three_ways(lambda ps: model.predict(ps, 32), groups, long_pair)) > 10 * TOLERANCE


@pytest.mark.parametrize("precision", INVARIANT)
def test_bi_encoder_paths_offered_as_invariant_are(pairs, precision, variants, monkeypatch, caplog):
    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, long_pair = pairs
    with caplog.at_level("WARNING"):
        enc = stagebench.api.bi_encoder(BI, device="cpu", precision=precision, max_length=256)
    assert "pre-processing" not in caplog.text  # the quantizer's advice, not followed on purpose, is not shown
    texts = [[d for _, d in g] for g in groups]
    alone = np.concatenate([enc.encode([t], 1) for g in texts for t in g])
    batched = enc.encode([t for g in texts for t in g] + [long_pair[1]], 64)[:-1]
    assert float(np.abs(alone - batched).max()) <= TOLERANCE
    if precision == "int8-token":
        fp32 = stagebench.api.bi_encoder(BI, device="cpu", precision="fp32", max_length=256).encode([t for g in texts for t in g], 64)
        assert float((fp32 * batched).sum(1).min()) > 0.98  # the quantized model is the same model


#: ``STAGEBENCH_CPU_FEATURES`` of each CPU class ``precision: auto`` was decided for, vendor included
#: (docs/models.md#precision-auto-per-cpu-class); ``None``: the machine the test runs on, as detected
CPU_CLASSES = [None, "avx2 fma vendor=GenuineIntel", "avx2 avx512f avx512_vnni vendor=GenuineIntel",
               "avx2 avx512f avx512_bf16 avx512_vnni vendor=GenuineIntel",
               "avx2 avx512f avx512_bf16 amx_bf16 amx_tile vendor=GenuineIntel",
               "avx2 avx512f avx512_bf16 avx512_vnni vendor=AuthenticAMD"]  # fmt: skip


def test_auto_runs_a_path_tested_for_invariance(variants, monkeypatch):
    """On a CPU of every class (and on this machine, whatever it is), ``auto`` is one of
    :data:`INVARIANT` - the same model files at the same precision - so the invariance tests above
    cover it (the cross-encoder's per-token INT8, the bi-encoder's fp32 export). bf16 autocast, the
    default on AMX and AMD AVX512-BF16 before issue 66, is not among them."""
    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    tested = {name: load(name, device="cpu", precision=want, max_length=256).model.path
              for load, name, want in ((stagebench.api.cross_encoder, CE, "int8-token"), (stagebench.api.bi_encoder, BI, "fp32"))}  # fmt: skip
    for features in CPU_CLASSES:
        if features is None:
            monkeypatch.delenv("STAGEBENCH_CPU_FEATURES", raising=False)
        else:
            monkeypatch.setenv("STAGEBENCH_CPU_FEATURES", features)
        for load, name, want in ((stagebench.api.cross_encoder, CE, "int8-token"), (stagebench.api.bi_encoder, BI, "fp32")):
            auto = load(name, device="cpu", max_length=256)
            assert auto.placement.precision == want and auto.model.path == tested[name], (features, name, auto.placement)


def test_the_fp32_export_is_the_torch_model(pairs, variants, monkeypatch):
    """The CPU's default dense path runs the model's ONNX export: its embeddings are torch's own, for
    texts alone and padded in one batch (the tracer's warnings at the export are not shown, and this
    is why)."""
    import warnings

    from sentence_transformers import SentenceTransformer

    from stagebench.models.resolve import resolve_model

    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, long_pair = pairs
    texts = [d for g in groups for _, d in g] + [long_pair[1]]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        enc = stagebench.api.bi_encoder(BI, device="cpu", precision="fp32", max_length=256)
        exported = enc.encode(texts, 64)
    shown = [w for w in seen if not issubclass(w.category, DeprecationWarning)]  # (those are hidden by default)
    assert "export" in enc.model.origin and not shown, [str(w.message)[:80] for w in shown]
    reference = SentenceTransformer(resolve_model(BI).path, device="cpu").encode(texts, batch_size=64, normalize_embeddings=True)
    assert float(np.abs(exported - reference).max()) < 1e-5


def test_a_cross_encoder_saved_by_sentence_transformers_6_runs_exported_and_at_int8_token(pairs, variants, monkeypatch, tmp_path):
    """A cross-encoder folder as sentence-transformers 6 saves it - what ``train-reranker`` writes, its modules.json
    naming ``sentence_transformers.base.modules.transformer.Transformer`` - runs at ``auto`` exported to ONNX at fp32:
    the torch model's scores, batch-invariant; and at ``int8-token`` (it was refused: "this one also has
    ...Transformer"), its per-token INT8 scores following the torch model's."""
    from sentence_transformers import CrossEncoder
    from torch.nn import Identity

    from stagebench.models.resolve import resolve_model
    from stagebench.models.variants import transformers_folder

    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    CrossEncoder(transformers_folder(resolve_model(CE), None, "test").path, device="cpu").save_pretrained(str(tmp_path / "ce"))
    types = [m["type"] for m in json.loads((tmp_path / "ce" / "modules.json").read_text())]
    assert types and "sentence_transformers.models.Transformer" not in types  # the new layout
    groups, long_pair = pairs
    flat = [p for g in groups for p in g][:12]
    torch_fp32 = CrossEncoder(str(tmp_path / "ce"), device="cpu", max_length=256).predict(flat, activation_fn=Identity())
    auto = stagebench.api.cross_encoder(str(tmp_path / "ce"), device="cpu", max_length=256)
    assert "exported to ONNX, fp32" in auto.model.origin and auto.placement.precision == "fp32"
    assert float(np.abs(auto.predict(flat, 32) - torch_fp32).max()) < 1e-4
    assert largest_move(*three_ways(lambda ps: auto.predict(ps, 32), groups, long_pair)) <= TOLERANCE
    int8 = stagebench.api.cross_encoder(str(tmp_path / "ce"), device="cpu", precision="int8-token", max_length=256)
    assert "exported to ONNX, per-channel INT8" in int8.model.origin
    got = int8.predict(flat, 32)
    assert np.corrcoef(torch_fp32, got)[0, 1] > 0.98 and float(np.abs(torch_fp32 - got).max()) < 1.0 and np.ptp(torch_fp32) > 1.0


def test_an_opset_11_int8_carrier_runs_per_token_too(pairs, variants, monkeypatch):
    """bge-small's carrier is an opset-11 graph, whose QuantizeLinear takes one scale only: the
    per-token rewrite spells the quantization out there, and stays invariant and close to fp32."""
    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, long_pair = pairs
    texts = [d for g in groups for _, d in g]
    enc = stagebench.api.bi_encoder("BAAI/bge-small-en-v1.5", device="cpu", max_length=256)
    assert enc.placement.precision == "int8-token"  # auto on a CPU
    assert not {n for n in unread_initializers(enc.model.path) if n.startswith("sb_")}  # its own path's constants only
    alone = np.concatenate([enc.encode([t], 1) for t in texts])
    batched = enc.encode(texts + [long_pair[1]], 64)[:-1]
    assert float(np.abs(alone - batched).max()) <= TOLERANCE
    fp32 = stagebench.api.bi_encoder("BAAI/bge-small-en-v1.5", device="cpu", precision="fp32", max_length=256).encode(texts, 64)
    assert float((fp32 * batched).sum(1).min()) > 0.98


@pytest.mark.parametrize("role", ["cross_encoder", "bi_encoder"])
def test_the_streams_never_change_a_bit(pairs, role, variants, monkeypatch):
    """A model batch gives the same bits whichever stream runs it and on how many threads: one stream
    on one thread, three streams calling one session (a thread each), two streams with a session and
    two threads each; and the dense stage's engine units (several batches a unit) are the batches of a
    direct call (the streams are in no cache key)."""
    from stagebench.models.encoders import EncodeTask, encode_with, length_batches, token_lengths
    from stagebench.runtime.engine import LocalEngine

    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, long_pair = pairs
    flat = [p for g in groups for p in g] + [long_pair]
    outputs, shapes = [], []
    for threads, streams in (("1", 1), ("3", "auto"), ("4", 2)):
        monkeypatch.setenv("STAGEBENCH_THREADS", threads)
        if role == "cross_encoder":
            model = stagebench.api.cross_encoder(CE, device="cpu", max_length=256, streams=streams)
            outputs.append(model.predict(flat, 4))  # 8 batches
        else:
            model = stagebench.api.bi_encoder(BI, device="cpu", max_length=256, streams=streams)
            texts = [d for _, d in flat]
            task = EncodeTask(model.model, "auto", model.placement, 256, streams)
            units = encode_with(LocalEngine(), task, texts, 3, "units")  # 11 batches in 2 units
            batches = length_batches(texts, 3, token_lengths(model.model, texts, 256))
            direct = task.encoder.encode_batches([[texts[i] for i in idx] for idx in batches])
            assert np.array_equal(units[[i for idx in batches for i in idx]], direct)
            outputs.append(np.concatenate([model.encode(texts, 4), units]))
        shapes.append((model.sess.streams, model.sess.threads, model.sess._free.qsize()))
    assert shapes == [(1, 1, 1), (3, 1, 3), (2, 2, 2)]
    assert all(np.array_equal(outputs[0], o) for o in outputs[1:])
    assert np.ptp(outputs[0]) > 0.1  # real outputs, not a constant


def test_a_bf16_bi_encoder_runs_in_fixed_shapes_and_its_batch_cannot_move_an_embedding(pairs):
    """``precision: bf16`` (torch) pads every batch to one fixed shape - 32 rows by a token bucket of each
    text's own length (stagebench.models.shapes) - so a text's embedding is the same bits alone, batched
    with a long text and in shuffled batches of 7 (padded to the batch's longest, as before, it moved by
    up to 8.9e-4 here), and within bf16's rounding of the fp32 export. Where the CPU has no native bf16 it
    is emulated: still invariant."""
    groups, long_pair = pairs
    enc = stagebench.api.bi_encoder(BI, device="cpu", precision="bf16", max_length=256)
    assert "fixed batch shapes" in enc.runs_on
    texts = [d for g in groups for _, d in g]
    alone = np.concatenate([enc.encode([t], 1) for t in texts])
    batched = enc.encode(texts + [long_pair[1]], 64)[:-1]
    order = list(range(len(texts)))
    random.Random(3).shuffle(order)
    shuffled = np.zeros_like(alone)
    for i in range(0, len(order), 7):
        idx = order[i : i + 7]
        shuffled[idx] = enc.encode([texts[j] for j in idx] + [long_pair[1]], 7)[: len(idx)]
    assert np.array_equal(alone, batched) and np.array_equal(alone, shuffled)
    fp32 = stagebench.api.bi_encoder(BI, device="cpu", precision="fp32", max_length=256).encode(texts, 64)
    assert float(np.abs(fp32 - alone).max()) < 0.01 and float((fp32 * alone).sum(1).min()) > 0.9995
    assert float(np.abs(fp32 - alone).max()) > 1e-4  # bf16 really ran: its rounding shows, fp32's would not
    assert float(np.abs((alone * alone).sum(1) - 1).max()) < 1e-5  # unit length restored in fp32


def test_a_bf16_cross_encoder_runs_in_fixed_shapes_and_its_batch_cannot_move_a_score(pairs, variants, monkeypatch):
    """The bundled INT8 cross-encoder at ``precision: bf16``: its weights dequantized into torch
    (``dequantized-torch``), every batch in one fixed shape, so a pair's logit is the same bits alone, with
    its query's candidates and in shuffled batches with a long pair; within bf16's rounding of fp32."""
    monkeypatch.setenv("STAGEBENCH_CACHE", variants)
    groups, long_pair = pairs
    groups = groups[:2]  # 12 pairs: every batch is 32 rows, alone too
    model = stagebench.api.cross_encoder(CE, device="cpu", precision="bf16", max_length=256)
    assert "fixed batch shapes" in model.runs_on
    alone, per_query, mixed = three_ways(lambda ps: model.predict(ps, 32), groups, long_pair)
    assert largest_move(alone, per_query, mixed) == 0.0
    fp32 = stagebench.api.cross_encoder(CE, device="cpu", precision="fp32", max_length=256)
    ref = fp32.predict([p for g in groups for p in g], 32)
    assert np.abs(ref - alone).max() < 0.2 and np.ptp(alone) > 1.0
    assert np.abs(ref - alone).max() > 1e-3  # bf16 really ran: its rounding shows, fp32's would not
    assert np.corrcoef(ref, alone)[0, 1] > 0.99

