"""The reranker plug-in protocol, and finding and building a plug-in (``type: plugin``).

A reranker is any object with::

    def score(self, query: str, docs: list[str]) -> list[float]

returning one finite score per document (higher is better). Optionally it may also have
the batched form, which the rerank stage prefers because it batches across queries::

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]

and may set ``wants_fields = True`` to receive, instead of texts, one dict per document
holding the document's corpus fields plus ``"id"`` and ``"text"`` (the indexed text) -
for field-aware rerankers. In a config::

    - name: mine
      type: plugin
      target: "my_package.my_module:MyReranker"   # imported; the working dir is on the path
      inputs: [bm25]
      params: {top_n: 100, my_option: 3}           # stage keys + the class's __init__ kwargs

The stage keys (``top_n``, ``activation``, ``pairs_per_call``, ``per_query``) are taken by
the stage; every other key is passed to the class constructor and checked against its
signature when the config is loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pathlib import Path
from typing import Any

from stagebench.errors import ConfigError, StagebenchError


@runtime_checkable
class Reranker(Protocol):
    def score(self, query: str, docs: Sequence[str]) -> Sequence[float]: ...


def import_target(target: str, where: str, needs_score: bool = True) -> type:
    """Import ``"package.module:Attr"``; the working directory is importable too. ``needs_score``:
    a class must have the reranker's ``score`` method (a plug-in; not a PyTerrier builder)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{where}: target {target!r} must look like 'package.module:ClassName'")
    added = False
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
        added = True
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(f"{where}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from exc
    finally:
        if added:
            sys.path.remove("")
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{where}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{where}: {target!r} is not a class or factory")
    if needs_score and inspect.isclass(obj) and not hasattr(obj, "score"):
        raise ConfigError(f"{where}: {target!r} has no score(query, docs) method (see stagebench.rerank.plugins.Reranker)")
    return obj


def check_kwargs(factory: type, kwargs: dict, where: str, supplied: tuple[str, ...] = ()) -> None:
    """Fail on keys the factory does not accept, and on required keys that are missing (``supplied``:
    arguments the stage hands it itself, never read from the config)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        return
    params = sig.parameters
    for key in supplied:
        if key in kwargs:
            raise ConfigError(f"{where}.{key}: handed to {factory.__name__} by the stage itself; remove it from params")
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        for key in kwargs:
            if key not in params:
                known = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
                raise ConfigError(f"{where}.{key}: unknown key for {factory.__name__} (known: {', '.join(known) or 'none'})")
    for name, p in params.items():
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in kwargs \
                and name not in supplied:
            raise ConfigError(f"{where}.{name}: required by {factory.__name__} but missing")


def path_identity(value: Any) -> str | None:
    """A file's or folder's identity, when ``value`` is the path of one (an index a builder opens by
    path, a model folder a plug-in loads): every file's relative name, size and modification time,
    hashed; None for anything else. A rebuilt index changes it, so its cached runs are not reused."""
    if not isinstance(value, str) or not value or not Path(value).exists():
        return None
    root = Path(value)
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file())
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(root) if f != root else f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def target_identity(factory: Any, kwargs: dict) -> dict:
    """What a target's cache key holds beyond its module's source: its optional
    ``cache_identity(**kwargs)`` (e.g. a hash of the model files it loads), and the identity of every
    keyword argument that names an existing file or folder (:func:`path_identity`)."""
    out: dict = {}
    extra = getattr(factory, "cache_identity", None)
    if callable(extra):
        out["plugin_identity"] = extra(**kwargs)
    paths = {k: ident for k, v in sorted(kwargs.items()) if (ident := path_identity(v)) is not None}
    if paths:
        out["paths"] = paths
    return out


def build_plugin(target: str, kwargs: dict, stage: str, cwd: str) -> Any:
    """A plug-in reranker, constructed where it runs (this process or a Ray worker, whose
    working directory ``cwd`` - the run's - is importable as it is here)."""
    if cwd not in sys.path and Path(cwd).is_dir():
        sys.path.append(cwd)
    factory = import_target(target, f"stage {stage}.target")
    try:
        reranker = factory(**kwargs)
    except Exception as exc:
        raise StagebenchError(f"stage {stage}: plug-in {target} raised when constructed: "
                              f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    if not callable(getattr(reranker, "score", None)):
        raise StagebenchError(f"stage {stage}: {target} instance has no score(query, docs) method")
    return reranker
