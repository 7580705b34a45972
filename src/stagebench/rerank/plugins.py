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
