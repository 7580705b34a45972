"""The model a placement runs: the resolved model itself, or a variant derived from it.

Two precisions run a model other than the one resolved (:mod:`stagebench.models.onnx_graphs` does
the rewriting):

* ``int8-token``: dynamic INT8 with one activation scale per token - a score or an embedding
  is a function of its own input, whatever it is batched with. From a dynamically quantized
  ONNX graph (the bundled carriers) by rewriting it; from an fp32 ONNX graph by quantizing its
  weights per channel first; from a sentence-transformers model by exporting it to ONNX first.
* ``fp32`` of a dynamically quantized ONNX graph: its weights dequantized, fp32 activations; on a
  GPU, a cross-encoder of the bundled carrier's architecture runs them in torch
  (``dequantized-torch``: a transformers folder, :mod:`stagebench.models.onnx_weights`), so the
  device that ``device: auto`` found through torch runs it, with or without onnxruntime's CUDA build.
  Built on any machine (the GPU is not needed) and checked there: the folder must score probe pairs
  as the ONNX graph with the same weights does, or nothing is cached.
* ``fp32`` of a torch encoder (a bi-encoder, a cross-encoder) on a CPU: the model exported to ONNX,
  the same fp32 arithmetic run by onnxruntime, measured faster there than torch with the same nDCG@10
  (docs/models.md). The export is checked when it is built: it must give probe inputs the torch model's
  outputs, or nothing is cached and the model runs in torch, as it does where it does not export.

A variant is built once and kept in the cache (kind ``models``), keyed by the source model's
identity, the recipe, the code that builds it and the versions of the libraries it uses; its
identity (which keys everything computed with it) names the source and that key.

A GGUF LLM (the bundled SmolLM2 carrier, a local ``.gguf`` file, a hub GGUF file) is kept there
too, as the fp32 transformers checkpoint transformers de-quantizes it to on load
(:func:`gguf_checkpoint`): loading a GGUF file parses its metadata and converts its tokenizer
every time (about 20 s for SmolLM2-135M on two cores), the checkpoint loads in about a second,
and it is the same weights and tokenizer bit for bit (checked when it is built).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from stagebench.cache import Cache, Memo, cache_root, code_identity, make_key, memo
from stagebench.runtime.devices import Placement
from stagebench.errors import StagebenchError
from stagebench.models.encoders import OnnxCrossEncoder, STCrossEncoder, load_bi_encoder, load_cross_encoder
from stagebench.models.resolve import ResolvedModel, loading
from stagebench.models.onnx_graphs import (copy_tokenizer, dequantized_fp32, export_encoder, has_dynamic_quantization,
                                    per_token_int8, quantize_dynamic_per_channel)  # fmt: skip
from stagebench.models.onnx_weights import build_reference_folder, is_reference_architecture
from stagebench.optional import need

log = logging.getLogger("stagebench")

#: the code a variant's bits depend on (besides the libraries' versions)
#: the module that builds a variant (its traced imports, the ONNX rewrites among them, are in its key too)
VARIANT_CODE = (__name__,)


def onnx_kind(model: ResolvedModel) -> str:
    """How :func:`stagebench.runtime.devices.place` sees a model: ``onnx-dynamic-int8`` (a graph that
    quantizes activations per batch), ``onnx`` (any other ONNX graph) or ``torch``."""
    if model.backend != "onnx":
        return "torch"
    return "onnx-dynamic-int8" if has_dynamic_quantization(Path(model.path) / "model.onnx") else "onnx"


def _versions(*dists: str) -> dict[str, str]:
    out = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = "absent"
    return out


def recipe_for(model: ResolvedModel, placement: Placement, kind: str, role: str = "cross_encoder") -> str | None:
    """:func:`variant_recipe` for ``model`` (of :func:`onnx_kind` ``kind``): whether its dequantized
    weights can run in torch is read from its graph, and only where a GPU would run them."""
    half = placement.precision in ("bf16", "fp16")
    torch_ok = (kind == "onnx-dynamic-int8" and (placement.kind != "cpu" or half) and role == "cross_encoder"
                and is_reference_architecture(Path(model.path) / "model.onnx"))  # fmt: skip
    if half and kind == "onnx-dynamic-int8" and not torch_ok:
        raise StagebenchError(f"model {model.name!r} ({model.origin}): precision {placement.precision} runs an INT8 ONNX "
                              "graph's weights dequantized in torch, which is built for a BERT cross-encoder's graph and "
                              "this is not one; use int8-token or fp32")  # fmt: skip
    return variant_recipe(kind, placement, role, torch_ok)


def recipe_runtime(kind: str, recipe: str | None) -> str:
    """The runtime that runs a model of ``kind`` made by ``recipe``: torch or onnxruntime."""
    return "torch" if recipe == "dequantized-torch" or (kind == "torch" and recipe is None) else "onnxruntime"


def for_placement(model: ResolvedModel, placement: Placement, kind: str, cache: Cache | None, label: str,
                  role: str = "cross_encoder") -> ResolvedModel:  # fmt: skip
    """``model`` itself, or the variant ``placement`` runs for a model of ``role`` (built now, or
    read from ``cache``; without one, from the default cache root: a variant is a file, not a result)."""
    recipe = recipe_for(model, placement, kind, role)
    if recipe is None:
        return model
    if recipe == "export" and not exportable(model):
        log.info("%s: %s has modules an ONNX export does not compute; it runs in torch at fp32", label, model.name)
        return model
    try:
        return _variant(model, recipe, kind, cache, label)
    except ExportFailed as e:
        if recipe != "export":
            raise  # int8-token asked for: nothing else is that path
        log.warning("%s: %s; it runs in torch at fp32", label, e)
        return model


class ExportFailed(StagebenchError):
    """A torch model's ONNX export could not be built, or does not compute what the torch model does."""


def _variant(model: ResolvedModel, recipe: str, kind: str, cache: Cache | None, label: str) -> ResolvedModel:
    """The variant of ``model`` that ``recipe`` makes, built now or read from ``cache``."""
    parts = {"source": model.identity, "recipe": recipe, "code": code_identity(VARIANT_CODE),
             "packages": _versions("onnx", "onnxruntime", *(("torch", "transformers") if kind == "torch" else ()),
                                   *(("torch", "transformers", "sentence-transformers") if recipe == "dequantized-torch" else ()))}  # fmt: skip
    store = cache if cache is not None else Cache(cache_root())
    m = memo(store, "models", parts, lambda: _build(model, recipe), save=_save, load=lambda entry: entry.path,
             label=label, what=f"{recipe} variant of {model.name}", meta=lambda _: {"model": model.identity, "recipe": recipe})
    folder = _entry_folder(store, m)
    if recipe == "dequantized-torch":
        return ResolvedModel(model.name, "sentence_transformers", str(folder), f"{model.origin}, {_DESCRIBE[recipe]} "
                             f"(derived: {folder})", f"{model.identity}+{recipe}#{m.key[:16]}")  # fmt: skip
    return ResolvedModel(model.name, "onnx", str(folder), f"{model.origin}, {_DESCRIBE[recipe]} (derived: {folder})",
                         f"{model.identity}+{recipe}#{m.key[:16]}", pooling=_pooling(model, folder))  # fmt: skip


def transformers_folder(model: ResolvedModel, cache: Cache | None, label: str) -> ResolvedModel:
    """``model`` as a folder transformers loads (``AutoModelForSequenceClassification``), for a library that
    loads a cross-encoder itself (``type: rerankers``): a dynamic INT8 ONNX carrier's weights dequantized into
    a transformers model at fp32 (the ``dequantized-torch`` variant, checked against the graph's own
    dequantized scores), a torch folder as it is; None of the others convert."""
    kind = onnx_kind(model)
    if kind == "torch":
        return model
    if kind != "onnx-dynamic-int8":
        raise StagebenchError(f"{label}: model {model.name!r} ({model.origin}) is an ONNX graph that cannot be loaded "
                              "as a transformers model; name a hub id or a local transformers folder")  # fmt: skip
    if not is_reference_architecture(Path(model.path) / "model.onnx"):
        raise StagebenchError(f"{label}: model {model.name!r} ({model.origin}): its INT8 graph does not convert to a "
                              "transformers model; name a hub id or a local transformers folder")  # fmt: skip
    return _variant(model, "dequantized-torch", kind, cache, label)


_DESCRIBE = {
    "export": "exported to ONNX, fp32 (onnxruntime)",
    "per-token": "INT8 with per-token activation scales",
    "per-channel+per-token": "per-channel INT8 weights, per-token activation scales",
    "export+per-channel+per-token": "exported to ONNX, per-channel INT8 weights, per-token activation scales",
    "dequantized": "INT8 weights dequantized, fp32 activations",
    "dequantized-torch": "INT8 weights dequantized into a transformers model (torch; fp32 weights)",
}


def variant_recipe(kind: str, placement: Placement, role: str = "cross_encoder", torch_ok: bool = False) -> str | None:
    """The recipe of the variant ``placement`` runs for a model of ``kind`` (:func:`onnx_kind`) that
    plays ``role`` (:data:`stagebench.runtime.devices.ROLES`), or None: the model itself. A torch
    encoder (bi- or cross-) at fp32 on a CPU runs exported to ONNX: the same fp32 arithmetic through
    onnxruntime, faster than torch there (docs/models.md#precision). A dynamic INT8 ONNX cross-encoder at fp32 off
    the CPU runs its dequantized weights in torch where ``torch_ok`` (its graph converts:
    :func:`recipe_for`), else in onnxruntime; at bf16 or fp16 (any device) in torch, in fixed batch shapes."""
    precision = placement.precision
    if precision == "fp32" and kind == "torch" and role in ("bi_encoder", "cross_encoder") and placement.kind == "cpu":
        return "export"
    if precision == "int8-token":
        return {"onnx-dynamic-int8": "per-token", "onnx": "per-channel+per-token", "torch": "export+per-channel+per-token"}[kind]
    if precision == "fp32" and kind == "onnx-dynamic-int8":
        return "dequantized-torch" if torch_ok and placement.kind != "cpu" and role == "cross_encoder" else "dequantized"
    if precision in ("bf16", "fp16") and kind == "onnx-dynamic-int8" and torch_ok and role == "cross_encoder":
        return "dequantized-torch"  # its weights at bf16/fp16 in torch, in fixed batch shapes
    return None


def _build(model: ResolvedModel, recipe: str) -> Path:
    """The folder of ``model``'s variant by ``recipe``, built in a temporary folder (removed if the build fails)."""
    tmp = Path(tempfile.mkdtemp(prefix="stagebench-variant-"))
    try:
        _build_into(model, recipe, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _build_into(model: ResolvedModel, recipe: str, tmp: Path) -> None:
    if recipe == "dequantized-torch":
        _dequantized_torch(model, tmp)
        return
    exported = recipe.startswith("export")
    src = _local_folder(model) if exported else Path(model.path)
    copy_tokenizer(src, tmp)  # first: an export's check runs it
    if not (tmp / "tokenizer.json").is_file():
        raise (ExportFailed if exported else StagebenchError)(
            f"model {model.name!r}: no tokenizer.json in {src} (a fast tokenizer's file); an ONNX variant needs one")
    if recipe == "dequantized":
        dequantized_fp32(src / "model.onnx", tmp / "model.onnx")
    elif recipe == "per-token":
        per_token_int8(src / "model.onnx", tmp / "model.onnx")
    else:
        if exported:
            _export(model, src, tmp)
            fp32 = tmp / "model.onnx"
        else:
            fp32 = src / "model.onnx"
        if recipe != "export":
            quantize_dynamic_per_channel(fp32, tmp / "per-channel.onnx")
            per_token_int8(tmp / "per-channel.onnx", tmp / "model.onnx")  # replaces the fp32 export
            (tmp / "per-channel.onnx").unlink()
    pooling = _pooling(model, src)
    (tmp / "variant.json").write_text(json.dumps({"source": model.identity, "recipe": recipe, "pooling": pooling}) + "\n")


def _export(model: ResolvedModel, src: Path, folder: Path) -> None:
    """``model`` (its local folder ``src``) exported to ONNX at fp32 into ``folder`` (which holds its tokenizer), and
    checked on the CPU: the export must give :data:`_PROBE_PAIRS` (a cross-encoder) or their texts (a
    bi-encoder) the torch model's scores or embeddings, within :data:`PROBE_TOLERANCE`; else :class:`ExportFailed`."""
    _check_exportable(src, model)
    bi = (src / "modules.json").is_file() and _is_bi(src)
    try:
        export_encoder(src, folder, "bi" if bi else "cross")
    except Exception as e:  # the tracer's and the exporter's errors have no common type
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise ExportFailed(f"model {model.name!r} did not export to ONNX ({type(e).__name__}: {first})") from e
    cpu = Placement("cpu", "fp32", "the check of an ONNX export")
    local = ResolvedModel(model.name, "sentence_transformers", str(src), "check", "check", pooling=_pooling(model, src))
    exported = ResolvedModel(model.name, "onnx", str(folder), "check", "check", pooling=local.pooling)
    if bi:
        texts = [d for _, d in _PROBE_PAIRS]
        torch, onnx = (load_bi_encoder(m, cpu, PROBE_LENGTH, 1) for m in (local, exported))
        want = torch.st.tokenizer(texts, truncation=True, max_length=PROBE_LENGTH)["input_ids"]
        got, outputs = onnx.sess.tokenize(texts), [m.encode(texts, 8) for m in (torch, onnx)]
    else:
        torch, onnx = (load_cross_encoder(m, cpu, PROBE_LENGTH, 1) for m in (local, exported))
        want = torch.ce.tokenizer([q for q, _ in _PROBE_PAIRS], [d for _, d in _PROBE_PAIRS], truncation="longest_first",
                                  max_length=PROBE_LENGTH)["input_ids"]  # fmt: skip
        got, outputs = onnx.sess.tokenize(_PROBE_PAIRS), [m.predict(_PROBE_PAIRS, 8) for m in (torch, onnx)]
    if [list(x) for x in want] != [got.ids[got.starts[i] : got.starts[i + 1]].tolist() for i in range(len(got))]:
        raise ExportFailed(f"model {model.name!r}: its tokenizer.json tokenizes probe inputs unlike the tokenizer the torch "
                           "model loads (its tokenizer_config.json may change it)")  # fmt: skip
    moved = float(np.max(np.abs(outputs[0] - outputs[1])))
    if not moved <= PROBE_TOLERANCE:
        raise ExportFailed(f"model {model.name!r}: its ONNX export moved probe {'embeddings' if bi else 'scores'} by "
                           f"{moved:.3g} from the torch model's (more than {PROBE_TOLERANCE}); nothing was cached")  # fmt: skip
    log.info("model %s: exported to ONNX; probe %s within %.2g of the torch model's", model.name,
             "embeddings" if bi else "scores", moved)  # fmt: skip


#: pairs a ``dequantized-torch`` folder must score as the ONNX graph's dequantized weights do
_PROBE_PAIRS = (
    ("wireless earbuds", "Bluetooth 5.3 wireless earbuds with charging case, 30 h playtime, IPX5"),
    ("mens running shoes size 10", "Lightweight breathable running shoe for men, mesh upper, rubber sole"),
    ("organic green tea bags", "Stainless steel electric kettle 1.7 L with auto shut-off"),
    ("usb c cable 2m", "USB-C to USB-C cable, 2 m, 100 W fast charging, braided nylon; for laptops, phones "
                       "and tablets. " * 4),
    ("café crème 500ml", "Nespresso-Kapseln, 10 Stück - Ø 3 cm"),
)  # fmt: skip
#: the most a probe pair's logit may move between torch and onnxruntime on the same fp32 weights
#: (float rounding of two runtimes' kernels: 2.9e-6 measured on the bundled cross-encoder)
PROBE_TOLERANCE = 1e-3
#: the tokens an export's probe inputs are truncated to: the long probe (124 tokens as a pair) is cut, as a stage
#: cuts its inputs at ``max_length``, and every model has that many positions
PROBE_LENGTH = 64


def _dequantized_torch(model: ResolvedModel, folder: Path) -> None:
    """Write ``model``'s INT8 ONNX weights dequantized into a transformers folder, and check on the
    CPU that it scores :data:`_PROBE_PAIRS` as the ONNX graph's dequantized fp32 form does."""
    build_reference_folder(model.path, folder)
    check = Path(tempfile.mkdtemp(prefix="stagebench-variant-check-"))
    try:
        dequantized_fp32(Path(model.path) / "model.onnx", check / "model.onnx")
        copy_tokenizer(Path(model.path), check)
        cpu = Placement("cpu", "fp32", "the check of a dequantized-torch variant")
        onnx = OnnxCrossEncoder(ResolvedModel(model.name, "onnx", str(check), "check", "check"), 512, cpu, 1)
        torch = STCrossEncoder(ResolvedModel(model.name, "sentence_transformers", str(folder), "check", "check"), 512, cpu, 1)
        moved = float(np.max(np.abs(onnx.predict(_PROBE_PAIRS, 8) - torch.predict(_PROBE_PAIRS, 8))))
    finally:
        shutil.rmtree(check, ignore_errors=True)
    if not moved <= PROBE_TOLERANCE:
        raise StagebenchError(f"model {model.name!r}: its INT8 weights dequantized into torch score probe pairs up to "
                              f"{moved:.3g} away from the ONNX graph's (more than {PROBE_TOLERANCE}); nothing was cached. "
                              "Run it with device: cpu, or install onnxruntime-gpu and give it an fp32 ONNX model")  # fmt: skip
    log.info("model %s: dequantized into torch; probe pairs within %.2g of the ONNX graph's fp32 scores", model.name, moved)
    (folder / "variant.json").write_text(json.dumps({"source": model.identity, "recipe": "dequantized-torch",
                                                     "probe_max_abs_diff": moved}) + "\n")  # fmt: skip


def gguf_checkpoint(model: ResolvedModel, cache: Cache, label: str) -> Path:
    """The folder of ``model`` (a GGUF file: ``model.gguf_file`` in ``model.path``) de-quantized
    to an fp32 transformers checkpoint with its tokenizer: read from ``cache``, or built now and
    kept there. Loading it gives the weights and token ids that loading the GGUF file gives."""
    m = memo(cache, "models", _gguf_parts(model), lambda: _dequantize_gguf(model, label), save=_save,
             load=lambda entry: entry.path, label=label, what=f"de-quantized fp32 checkpoint of {model.name}",
             meta=lambda _: {"model": model.identity, "recipe": "gguf-dequantized"})  # fmt: skip
    return _entry_folder(cache, m)


def cached_gguf_checkpoint(model: ResolvedModel, cache: Cache) -> Path | None:
    """:func:`gguf_checkpoint`'s folder where ``cache`` holds it (checksums verified), else None; it
    builds nothing (what a Ray worker reads: the driver built it, and workers write no model entries)."""
    entry = cache.get("models", make_key(_gguf_parts(model)))
    return entry.path if entry is not None else None


def _gguf_parts(model: ResolvedModel) -> dict:
    return {"source": model.identity, "gguf_file": model.gguf_file, "recipe": "gguf-dequantized",
            "code": code_identity(VARIANT_CODE), "packages": _versions("gguf", "safetensors", "torch", "transformers")}  # fmt: skip


def _entry_folder(cache: Cache, m: Memo) -> Path:
    """The cache entry holding a model variant (one just built was moved there from its build folder)."""
    return Path(m.value) if m.status == "cached" else cache.root / "models" / m.key


#: a text whose token ids the checkpoint's tokenizer must give as the GGUF file's does (with the
#: same chat template, special tokens and vocabulary)
_PROBE = ("<|im_start|>system\nRank products.<|im_end|>\n<|im_start|>user\nQuery: café crème 2x 500ml\n"
          "[1] Nespresso-Kapseln, 10 Stück \u2013 Ø 3 cm\n[2] 咖啡杯 \U0001f375  tabs\tand spaces<|im_end|>")  # fmt: skip


def _dequantize_gguf(model: ResolvedModel, label: str) -> Path:
    tf = need("transformers", f"{label}: de-quantizing the GGUF model {model.name}")
    torch = need("torch", f"{label}: de-quantizing the GGUF model {model.name}")
    need("gguf", f"{label}: loading the GGUF model {model.name}")
    kw = {"gguf_file": model.gguf_file}
    with loading(model, label):
        tok = tf.AutoTokenizer.from_pretrained(model.path, **kw)
        lm = tf.AutoModelForCausalLM.from_pretrained(model.path, dtype=torch.float32, **kw).eval()
    # the loaded model is plain fp32 tensors; what marks it as a GGUF load only refuses to save it
    lm.hf_quantizer = None
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix="stagebench-variant-"))
    try:
        lm.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        differ = _differs(lm, tok, tf.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32),
                          tf.AutoTokenizer.from_pretrained(tmp), torch)  # fmt: skip
        if differ:
            raise StagebenchError(f"{label}: the fp32 checkpoint saved from the GGUF model {model.name} does not load "
                                  f"back as the GGUF file does ({differ} differ) with transformers "
                                  f"{_versions('transformers')['transformers']}; nothing was cached")  # fmt: skip
        (tmp / "variant.json").write_text(json.dumps({"source": model.identity, "recipe": "gguf-dequantized"}) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _differs(lm, tok, back, back_tok, torch) -> str:
    """What of a model and tokenizer loaded back from a saved checkpoint differs from the originals ("": nothing)."""
    want, got = lm.state_dict(), back.state_dict()
    odd = sorted(set(want) ^ set(got)) or [k for k in want if not torch.equal(want[k], got[k])]
    if odd:
        return f"tensors {', '.join(odd[:3])}"
    ids = [t(_PROBE)["input_ids"] for t in (tok, back_tok)]
    special = [(t.pad_token_id, t.eos_token_id, t.bos_token_id) for t in (tok, back_tok)]
    if ids[0] != ids[1] or tok.get_vocab() != back_tok.get_vocab() or tok.chat_template != back_tok.chat_template \
            or special[0] != special[1]:  # fmt: skip
        return "the tokenizers"
    return ""


def _save(folder_built: Path, folder: Path) -> None:
    for p in sorted(Path(folder_built).iterdir()):
        p.replace(folder / p.name)
    Path(folder_built).rmdir()


def _local_folder(model: ResolvedModel) -> Path:
    if model.backend == "hub":
        hub = need("huggingface_hub", f"exporting model {model.name!r}")
        return Path(hub.snapshot_download(model.path))
    return Path(model.path)


def _is_bi(folder: Path) -> bool:
    modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    return any(m.get("type", "").endswith("Pooling") for m in modules)


def exportable(model: ResolvedModel) -> bool:
    """Whether :func:`_check_exportable` passes for a local model folder (a hub id is exported
    when its download is, and refused then if it cannot be)."""
    if model.backend == "hub":
        return True
    try:
        _check_exportable(Path(model.path), model)
    except StagebenchError:
        return False
    return True


#: the sentence-transformers modules an export computes, by class name: their package path moved in
#: sentence-transformers 6 (``sentence_transformers.models.Transformer`` is now
#: ``sentence_transformers.base.modules.transformer.Transformer``, as a model it saves names it)
EXPORTED_MODULES = ("Transformer", "Pooling", "Normalize")


def _check_exportable(folder: Path, model: ResolvedModel) -> None:
    """A sentence-transformers bi-encoder exports when it is a transformer, a mean or CLS pooling and
    an optional normalisation (what :class:`stagebench.models.encoders.OnnxBiEncoder` computes); a
    cross-encoder (a transformers folder, or a sentence-transformers one of a transformer alone) with its
    classification head."""
    if not (folder / "modules.json").is_file():
        return  # a transformers cross-encoder folder: exported with its classification head
    modules = [m.get("type", "") for m in json.loads((folder / "modules.json").read_text(encoding="utf-8"))]
    odd = [m for m in modules if not m.startswith("sentence_transformers.") or m.rpartition(".")[2] not in EXPORTED_MODULES]
    if odd:
        raise StagebenchError(f"model {model.name!r}: an ONNX export computes Transformer + Pooling (+ Normalize) "
                              f"modules; this model also has {', '.join(odd)}")  # fmt: skip
    if _is_bi(folder) and _pooling(model, folder) not in ("mean", "cls"):
        raise StagebenchError(f"model {model.name!r}: an ONNX export supports mean or CLS pooling")


def _pooling(model: ResolvedModel, folder: Path) -> str:
    """The pooling of a variant: recorded in it, or read from a sentence-transformers folder."""
    for f in (folder / "variant.json", *sorted(folder.glob("*Pooling/config.json"))):
        if f.is_file():
            cfg = json.loads(f.read_text(encoding="utf-8"))
            if "pooling" in cfg:
                return cfg["pooling"]
            if cfg.get("pooling_mode_cls_token"):
                return "cls"
            if cfg.get("pooling_mode_mean_tokens"):
                return "mean"
            return "other"
    return model.pooling
