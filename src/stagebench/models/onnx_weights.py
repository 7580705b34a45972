"""fp32 torch weights from the bundled INT8 ONNX cross-encoder.

Three uses: the reference the ONNX path is checked against (tests/models/test_onnx_weights.py,
make perf), the starting point for fine-tuning the bundled MS MARCO cross-encoder
offline (stagebench.fitting.train), since an INT8 ONNX graph cannot be trained, and the model a
GPU runs for it (``fp32`` on a GPU, :mod:`stagebench.models.variants`: torch, whatever
onnxruntime build is installed).

The fp32 original (cross-encoder/ms-marco-MiniLM-L-12-v2 on the hub) cannot be fetched
offline. The closest real reference is built here: the INT8 weights of the ONNX graph are
dequantized (w = scale * (q - zero_point)) into a transformers BertForSequenceClassification
(fp32 weights, fp32 activations) and scored by sentence-transformers' CrossEncoder with its
own tokenization and truncation. Comparing it with stagebench's ONNX path measures our
pipeline (tokenizer, pair encoding, truncation, padding, batching) plus the error of
dynamic activation quantization; it cannot measure the weights' quantization error,
which both share.
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np

from stagebench.optional import need

# MiniLM-L12-H384 (the architecture of cross-encoder/ms-marco-MiniLM-L-12-v2)
BERT_CONFIG = {
    "architectures": ["BertForSequenceClassification"], "model_type": "bert", "hidden_size": 384,
    "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
    "max_position_embeddings": 512, "type_vocab_size": 2, "vocab_size": 30522, "layer_norm_eps": 1e-12,
    "num_labels": 1, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "pad_token_id": 0,
}  # fmt: skip


def _shapes_expected() -> dict[str, tuple[int, ...]]:
    c = BERT_CONFIG
    h, i = c["hidden_size"], c["intermediate_size"]
    out = {"bert.embeddings.word_embeddings.weight": (c["vocab_size"], h),
           "bert.embeddings.position_embeddings.weight": (c["max_position_embeddings"], h),
           "bert.embeddings.token_type_embeddings.weight": (c["type_vocab_size"], h), "classifier.weight": (1, h)}  # fmt: skip
    for n in range(c["num_hidden_layers"]):
        out[f"bert.encoder.layer.{n}.intermediate.dense.bias"] = (i,)
        out[f"bert.encoder.layer.{n}.attention.self.query.bias"] = (h,)
    return out


def is_reference_architecture(onnx_path: str | Path) -> bool:
    """Whether an ONNX graph holds the weights of :data:`BERT_CONFIG`'s architecture under the
    names :func:`build_reference_folder` reads (the bundled MiniLM-L12 cross-encoder's), judged from
    its initializers' names and shapes alone; read once per file."""
    p = Path(onnx_path).resolve()
    stat = p.stat()
    return _is_reference_architecture(str(p), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=16)
def _is_reference_architecture(path: str, size: int, mtime_ns: int) -> bool:
    onnx = need("onnx", "reading an ONNX graph's weights")
    g = onnx.load(path, load_external_data=False).graph
    dims = {i.name: tuple(i.dims) for i in g.initializer}
    for name, shape in _shapes_expected().items():
        got = dims.get(name, dims.get(name + "_quantized"))
        if got is None or (got != shape and got != shape[::-1]):
            return False
    return f"bert.encoder.layer.{BERT_CONFIG['num_hidden_layers']}.attention.self.query.bias" not in dims


def dequantized_state_dict(onnx_path: str) -> dict[str, np.ndarray]:
    onnx = need("onnx", "reading INT8 ONNX weights")
    numpy_helper = need("onnx.numpy_helper", "reading INT8 ONNX weights")
    model = onnx.load(onnx_path)
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    consts = {}
    for n in g.node:  # some scales/zero points are Constant nodes
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    values = {**consts, **inits}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    state = {k: v for k, v in inits.items() if k.endswith((".bias", ".weight")) and v.dtype == np.float32}

    def dequant(q_name: str) -> np.ndarray:
        base = q_name[: -len("_quantized")]
        q = values[q_name].astype(np.float32)
        return (q - values[base + "_zero_point"].astype(np.float32)) * values[base + "_scale"].astype(np.float32)

    for name in inits:  # quantized embedding tables (Gather runs on them, then DequantizeLinear)
        if name.startswith("bert.embeddings.") and name.endswith(".weight_quantized"):
            state[name[: -len("_quantized")]] = dequant(name)
    for n in g.node:
        if n.op_type in ("MatMulInteger", "MatMul") and n.input[1] in values:
            w = dequant(n.input[1]) if n.op_type == "MatMulInteger" else values[n.input[1]]
            bias = _downstream_bias(n, consumers, state)
            state[bias[: -len(".bias")] + ".weight"] = w.T.copy()
    return state


def _downstream_bias(node, consumers, state) -> str:
    frontier = [node]
    for _ in range(6):
        nxt = []
        for n in frontier:
            for c in consumers.get(n.output[0], []):
                for i in c.input:
                    if i.endswith(".bias") and i in state:
                        return i
                nxt.append(c)
        frontier = nxt
    raise RuntimeError(f"no bias found after {node.name}")


def build_reference_folder(onnx_folder: str, out: str | Path) -> Path:
    """Write a transformers folder (config, safetensors, tokenizer) from the ONNX files."""
    torch = need("torch", "dequantizing an ONNX model to train it")
    save_file = need("safetensors.torch", "dequantizing an ONNX model to train it").save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = dequantized_state_dict(str(Path(onnx_folder) / "model.onnx"))
    save_file({k: torch.from_numpy(np.array(v, dtype=np.float32, copy=True)) for k, v in state.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(BERT_CONFIG))
    for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(onnx_folder) / f).exists():
            shutil.copy(Path(onnx_folder) / f, out / f)
    tok = json.loads((out / "tokenizer.json").read_text())
    tok["padding"] = None  # the carrier's tokenizer.json pads every input to 512
    tok["truncation"] = None
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out
