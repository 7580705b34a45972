"""Rewrites of dynamically quantized ONNX graphs, and the export of torch encoders to ONNX.

onnxruntime's dynamic INT8 (``DynamicQuantizeLinear`` before every ``MatMulInteger``, what
the bundled carriers and ``onnxruntime.quantization.quantize_dynamic`` produce) takes **one
activation scale for the whole input tensor**: every pair of a batch, padding included. A
pair's score then depends on its batch mates; the bundled cross-encoder's logits moved by up
to 0.7 between a pair scored alone and in a batch (``make perf``). Two rewrites make a graph's
output a function of its input:

* :func:`per_token_int8`: each ``DynamicQuantizeLinear`` becomes a symmetric quantization with
  **one scale per token** (``max |x|`` over the hidden axis / 127, zero point 128 on uint8), so a
  token's integer activations depend on that token alone; the weights and the integer matrix
  products are the graph's own, each product scaled in its epilogue (onnxruntime's fused
  ``MatMulIntegerToFloat``, by the weight scales) and then by its rows' token scales. Padding tokens get their own scales and are masked out by
  attention as before (``QuantizeLinear`` with one scale per row from opset 13; in older graphs,
  such as bge-small's opset-11 carrier, its formula spelled out with Div, Round, Add, Clip and
  Cast). Measured on this project's collections in ``make perf``.
* :func:`dequantized_fp32`: every ``MatMulInteger`` and the scaling around it becomes one fp32
  ``MatMul`` on the dequantized weights (``w = scale * (q - zero_point)``): the graph's weights
  with fp32 activations, the reference the INT8 paths are measured against.

:func:`export_encoder` writes a sentence-transformers model's transformer to ONNX (fp32) and a
per-channel dynamic INT8 copy of it, for the ``int8-token`` precision of torch models.
Each function writes one file; caching them is :mod:`stagebench.models.variants`' job.
"""

from __future__ import annotations

import inspect
import logging
import shutil
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from stagebench.errors import StagebenchError
from stagebench.optional import need

#: files of a tokenizer that a derived model folder carries over from its source
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def _load(path: Path):
    onnx = need("onnx", "rewriting an ONNX graph")
    return onnx, onnx.load(str(path))


def has_dynamic_quantization(path: str | Path) -> bool:
    """Whether the graph quantizes activations at run time (``DynamicQuantizeLinear``); read once
    per file (a stage asks for its placement several times before it runs)."""
    p = Path(path).resolve()
    stat = p.stat()
    return _has_dynamic_quantization(str(p), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def _has_dynamic_quantization(path: str, size: int, mtime_ns: int) -> bool:
    _, model = _load(Path(path))
    return any(n.op_type == "DynamicQuantizeLinear" for n in model.graph.node)


def per_token_int8(src: str | Path, dst: str | Path) -> int:
    """Write ``src`` with every ``DynamicQuantizeLinear`` replaced by per-token symmetric
    quantization (see the module docstring); returns how many were replaced."""
    onnx, model = _load(Path(src))
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    g = model.graph
    consts = {"sb_127": np.array(127.0, np.float32), "sb_eps": np.array(1e-12, np.float32),
              "sb_zp": np.array(128, np.uint8), "sb_m1": np.array([-1], np.int64), "sb_one": np.array([1], np.int64),
              "sb_zero": np.array([0], np.int64), "sb_end": np.array([np.iinfo(np.int64).max], np.int64),
              "sb_unit": np.array(1.0, np.float32), "sb_128f": np.array(128.0, np.float32),
              "sb_0f": np.array(0.0, np.float32), "sb_255f": np.array(255.0, np.float32)}  # fmt: skip
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if any(i.name in consts for i in g.initializer):
        raise StagebenchError(f"{src}: already rewritten per token")
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    row_scale: dict[str, str] = {}  # quantized tensor -> its per-token scales, shaped [..., 1]
    act_scale: dict[str, str] = {}  # quantized tensor -> the graph's own activation scale (now 1)
    nodes, replaced = [], 0
    for n in g.node:
        if n.op_type != "DynamicQuantizeLinear":
            nodes.append(n)
            continue
        replaced += 1
        x, (q, scale, zero) = n.input[0], n.output
        p = f"{n.name or n.output[0]}/per_token"

        def node(op: str, inputs: list[str], out: str, **attrs):
            nodes.append(helper.make_node(op, inputs, [out], name=f"{p}/{op}/{len(nodes)}", **attrs))
            return out

        shape = node("Shape", [x], f"{p}/shape")
        hidden = node("Slice", [shape, "sb_m1", "sb_end"], f"{p}/hidden")
        rows = node("Slice", [shape, "sb_zero", "sb_m1"], f"{p}/rows")
        flat = node("Reshape", [x, node("Concat", ["sb_m1", hidden], f"{p}/2d", axis=0)], f"{p}/flat")
        # max |x| per token as max(max x, -min x): the same value, without writing |x| out
        high = node("ReduceMax", [flat], f"{p}/high", axes=[1], keepdims=0)
        low = node("Neg", [node("ReduceMin", [flat], f"{p}/low", axes=[1], keepdims=0)], f"{p}/neg_low")
        peak = node("Max", [high, low], f"{p}/peak")
        s = node("Div", [node("Max", [peak, "sb_eps"], f"{p}/peak_eps"), "sb_127"], f"{p}/scale")
        if opset >= 13:  # QuantizeLinear with one scale per row (its axis attribute)
            zps = node("Expand", ["sb_zp", node("Shape", [s], f"{p}/n")], f"{p}/zps")
            quantized = node("QuantizeLinear", [flat, s, zps], f"{p}/q", axis=0)
        else:  # before opset 13 QuantizeLinear takes one scale: its formula, saturate(round(x / s) + 128), spelled out
            col = node("Reshape", [s, node("Concat", ["sb_m1", "sb_one"], f"{p}/col_shape", axis=0)], f"{p}/col")
            shifted = node("Add", [node("Round", [node("Div", [flat, col], f"{p}/div")], f"{p}/round"), "sb_128f"], f"{p}/shift")
            quantized = node("Cast", [node("Clip", [shifted, "sb_0f", "sb_255f"], f"{p}/sat")], f"{p}/q",
                             to=onnx.TensorProto.UINT8)  # fmt: skip
        node("Reshape", [quantized, shape], q)
        act_scale[q] = scale
        row_scale[q] = node("Reshape", [s, node("Concat", [rows, "sb_one"], f"{p}/scale_shape", axis=0)], f"{p}/rows_scale")
        # whatever else reads the graph's own activation scale or zero point sees 1 and 128
        node("Identity", ["sb_unit"], scale)
        node("Identity", ["sb_zp"], zero)
    producer = {o: n for n in g.node for o in n.output}
    weights = {i.name for i in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    dropped: set[int] = set()
    for n in list(nodes):
        if n.op_type != "MatMulInteger" or n.input[0] not in row_scale:
            continue
        end = _scaled_output(n, consumers, src)
        # MatMulInteger -> Cast -> Mul(activation scale x weight scale) becomes one fused
        # MatMulIntegerToFloat (onnxruntime's contrib op: the scaling in the product's epilogue) with
        # an activation scale of 1; the per-token scales are applied after it
        w_scale = _weight_scale(end, consumers[n.output[0]][0], producer, weights, act_scale[n.input[0]], src)
        unscaled = f"{end.output[0]}/before_per_token_scale"
        a, b, a_zero, b_zero = (list(n.input) + ["", ""])[:4]
        nodes.append(helper.make_node("MatMulIntegerToFloat", [a, b, "sb_unit", w_scale, a_zero, b_zero], [unscaled],
                                      name=f"{n.name}/to_float", domain="com.microsoft"))  # fmt: skip
        nodes.append(helper.make_node("Mul", [unscaled, row_scale[n.input[0]]], [end.output[0]], name=f"{end.name}/per_token"))
        dropped |= {id(n), id(consumers[n.output[0]][0]), id(end)}
    # what scaled the products before (the scales' Mul, the activation scale) is left unused
    nodes = _reachable([n for n in nodes if id(n) not in dropped], {o.name for o in g.output})
    if dropped and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    if not replaced:
        raise StagebenchError(f"{src}: no DynamicQuantizeLinear to rewrite (the graph is not dynamically quantized)")
    used = {i for n in nodes for i in n.input}  # this rewrite's constants that its opset's path does not read
    kept = [t for t in g.initializer if t.name not in consts or t.name in used]  # (onnxruntime warns of each)
    del g.initializer[:]
    g.initializer.extend(kept)
    del g.node[:]
    g.node.extend(_topological(nodes, {i.name for i in g.input} | {i.name for i in g.initializer}))
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return replaced


def _weight_scale(end, cast, producer: dict, weights: set[str], act_scale: str, src) -> str:
    """The weight scale of a ``MatMulInteger -> Cast -> Mul(scale)`` chain, where ``scale`` is
    ``Mul(activation scale, weight scale)`` (what onnxruntime's quantizer writes)."""
    other = next(i for i in end.input if i != cast.output[0])
    scaling = producer.get(other)
    if scaling is not None and scaling.op_type == "Mul" and act_scale in scaling.input:
        w = next((i for i in scaling.input if i != act_scale), None)
        if w in weights:
            return w
    raise StagebenchError(f"{src}: {end.name}: not the dynamic INT8 pattern this rewrite knows "
                          "(the product scaled by Mul(activation scale, constant weight scale))")


def _scaled_output(matmul, consumers: dict[str, list], src) -> object:
    """The ``Mul`` that scales a ``MatMulInteger``'s result to float (after its ``Cast``)."""
    after = consumers.get(matmul.output[0], [])
    if len(after) == 1 and after[0].op_type == "Cast":
        muls = consumers.get(after[0].output[0], [])
        if len(muls) == 1 and muls[0].op_type == "Mul":
            return muls[0]
    raise StagebenchError(f"{src}: {matmul.name}: not the dynamic INT8 pattern this rewrite knows "
                          "(MatMulInteger -> Cast -> Mul)")


def dequantized_fp32(src: str | Path, dst: str | Path) -> int:
    """Write ``src`` with each ``MatMulInteger -> Cast -> Mul(scale)`` chain replaced by an fp32
    ``MatMul`` on dequantized weights; returns how many were replaced."""
    onnx, model = _load(Path(src))
    numpy_helper = onnx.numpy_helper
    g = model.graph
    values = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    values.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})  # fmt: skip
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    drop, add, replaced = set(), {}, 0
    for n in g.node:
        if n.op_type != "MatMulInteger":
            continue
        quant = producer.get(n.input[0])
        if quant is None or quant.op_type != "DynamicQuantizeLinear" or n.input[1] not in values:
            raise StagebenchError(f"{src}: {n.name}: not the dynamic INT8 pattern this rewrite knows "
                                  "(DynamicQuantizeLinear -> MatMulInteger on constant weights)")
        mul = _scaled_output(n, consumers, src)
        cast = producer[next(i for i in mul.input if producer.get(i) is not None and producer[i].op_type == "Cast")]
        scale_mul = producer[mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]]
        w_scale = values[next(i for i in scale_mul.input if i in values)]
        w_zero = values[n.input[3]] if len(n.input) > 3 and n.input[3] else np.zeros((), np.int8)
        w = (values[n.input[1]].astype(np.float32) - w_zero.astype(np.float32)) * w_scale.astype(np.float32)
        name = f"{n.input[1]}/fp32"
        add[name] = w
        g.node.append(onnx.helper.make_node("MatMul", [quant.input[0], name], [mul.output[0]], name=f"{n.name}/fp32"))
        drop |= {id(n), id(cast), id(mul)}
        replaced += 1
    if not replaced:
        raise StagebenchError(f"{src}: no MatMulInteger to dequantize")
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in add.items())
    kept = [n for n in g.node if id(n) not in drop]
    kept = _reachable(kept, {o.name for o in g.output})
    del g.node[:]
    g.node.extend(_topological(kept, {i.name for i in g.input} | {i.name for i in g.initializer}))
    used = {i for n in g.node for i in n.input}
    for init in [i for i in g.initializer if i.name not in used]:
        g.initializer.remove(init)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return replaced


def _reachable(nodes: list, outputs: set[str]) -> list:
    """The nodes that the graph's outputs depend on."""
    producer = {o: n for n in nodes for o in n.output}
    keep, todo = set(), list(outputs)
    while todo:
        n = producer.get(todo.pop())
        if n is not None and id(n) not in keep:
            keep.add(id(n))
            todo.extend(n.input)
    return [n for n in nodes if id(n) in keep]


def _topological(nodes: list, available: set[str]) -> list:
    done, out, pending = set(available) | {""}, [], list(nodes)
    while pending:
        ready = [n for n in pending if all(i in done for i in n.input)]
        if not ready:
            raise StagebenchError("the rewritten ONNX graph has a cycle or a missing input")
        for n in ready:
            out.append(n)
            done.update(n.output)
        pending = [n for n in pending if all(id(n) != id(r) for r in ready)]
    return out


def copy_tokenizer(src: str | Path, dst: str | Path) -> None:
    for f in TOKENIZER_FILES:
        if (Path(src) / f).is_file():
            shutil.copy(Path(src) / f, Path(dst) / f)


def export_encoder(model_folder: str | Path, dst: str | Path, kind: str) -> None:
    """Export a transformers model folder to ``dst/model.onnx`` (fp32): ``kind`` ``bi`` gives the
    last hidden state (pooled by :class:`stagebench.models.encoders.OnnxBiEncoder`), ``cross`` the logits.
    Its inputs are the ids, the attention mask and, where the model takes them (BERT does, DistilBERT
    does not), the token types."""
    torch = need("torch", "exporting a model to ONNX")
    transformers = need("transformers", "exporting a model to ONNX")
    folder = Path(model_folder)
    auto = transformers.AutoModel if kind == "bi" else transformers.AutoModelForSequenceClassification
    base = auto.from_pretrained(str(folder), attn_implementation="eager").eval()
    typed = "token_type_ids" in inspect.signature(base.forward).parameters

    class Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask, *types):
            out = self.m(input_ids=ids, attention_mask=mask, **({"token_type_ids": types[0]} if types else {}))
            return out.last_hidden_state if kind == "bi" else out.logits

    ids = torch.tensor([[101, 2000, 102, 2001, 102], [101, 2000, 102, 0, 0]])
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if typed else [])]
    output = "last_hidden_state" if kind == "bi" else "logits"
    axes = {k: {0: "batch", 1: "tokens"} for k in names} | {output: {0: "batch", 1: "tokens"} if kind == "bi" else {0: "batch"}}
    args = (ids, (ids > 0).long(), *([torch.zeros_like(ids)] if typed else []))
    with warnings.catch_warnings():
        # what the tracer warns of - advanced indexing (wrong with negative indices), and a padding test
        # in transformers' mask code traced as a constant (its two lengths are the same axis) - does not
        # change the export's outputs: its embeddings equal torch's at other lengths and paddings
        # (tests/models/test_batch_invariance.py), so the warnings are not shown
        warnings.filterwarnings("ignore", message="Exporting aten::index operator")
        warnings.filterwarnings("ignore", message="Converting a tensor to a Python boolean", module="transformers")
        torch.onnx.export(Wrapped(base), args, str(Path(dst) / "model.onnx"), input_names=names, output_names=[output],
                          opset_version=17, dynamo=False, dynamic_axes=axes)  # fmt: skip


def quantize_dynamic_per_channel(src: str | Path, dst: str | Path) -> None:
    """onnxruntime's dynamic INT8 with per-channel int8 weights (its activations still per batch)."""
    q = need("onnxruntime.quantization", "quantizing an ONNX model")
    # the quantizer advises its pre-processing (shape inference and graph optimisation) on the root logger;
    # the export is quantized as it is on purpose (the per-token rewrite reads that graph), so the advice is
    # dropped, and only it
    root = logging.getLogger()

    def drop(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing before quantization")

    root.addFilter(drop)
    try:
        q.quantize_dynamic(str(src), str(dst), per_channel=True, weight_type=q.QuantType.QInt8)
    finally:
        root.removeFilter(drop)
