"""The one way stagebench imports a heavy or optional library: when it is needed, not at import.

``import stagebench`` and the commands that only read files (``eval``, ``table``, ``compare``,
``check``) load no model library. A stage that needs one asks for it here; if the library
is not installed the error is one line saying which extra installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from stagebench.errors import StagebenchError

#: the extra that installs each optional top-level package (pyproject.toml)
EXTRAS = {
    "torch": "neural", "sentence_transformers": "neural", "transformers": "neural", "tokenizers": "neural",
    "faiss": "neural", "onnxruntime": "neural", "onnx": "neural", "accelerate": "train", "datasets": "hf", "gguf": "llm", "ray": "ray",
    "ir_datasets": "irds", "requests": "irds", "ranx": "interop", "ir_measures": "interop", "pyterrier": "pyterrier",
    "sklearn": "learn", "rerankers": "rerankers",
}  # fmt: skip


def need(module: str, purpose: str) -> ModuleType:
    """Import ``module`` (e.g. ``"sentence_transformers.cross_encoder"``) for ``purpose``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = EXTRAS.get(top)
        how = f"pip install 'stagebench[{extra}]'" if extra else f"pip install {top}"
        raise StagebenchError(f"{purpose} needs {top}, which cannot be imported ({exc}); install it: {how}") from exc
