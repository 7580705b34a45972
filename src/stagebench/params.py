"""Parameter declarations and their validation: the one mechanism every config section uses.

A section (a stage's ``Params``, a loader's options, ``evaluation``, ``training``) is a
dataclass. Its type hints say what a value may be, and :func:`build` checks a mapping
against them: unknown keys, missing keys, wrong types, and

* ``Literal[...]`` - one of the listed choices;
* ``Annotated[int | float, Range(...)]`` - a declared range (``PositiveInt``, ``Fraction``...);
* ``Annotated[list | dict, Length(ge=1)]`` - a list or mapping that must not be empty;
* every ``float`` must be finite: NaN and infinity are never a sensible parameter.

Errors are :class:`ConfigError` naming the key path (``stages[0] (bm25).params.k1: ...``).
A section may still have a ``validate()`` method for rules that tie several keys together.

:func:`read_yaml` parses a YAML file strictly: a key given twice in one mapping is an
error, not last-one-wins.

Every field carries a one-line description (:func:`param`); :func:`describe` turns a section
into rows of (name, type, default, description), from which docs/config.md's parameter
tables are generated (``python -m stagebench.docgen``; a test checks the docs are current).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml

from stagebench.errors import ConfigError
from stagebench.textfile import read_text


@dataclass(frozen=True)
class Range:
    """A declared numeric range, used as ``Annotated[int, Range(ge=1)]``."""

    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    lt: float | None = None

    def check(self, value: float) -> str | None:
        if self.ge is not None and value < self.ge:
            return f"must be >= {_num(self.ge)}"
        if self.gt is not None and value <= self.gt:
            return f"must be > {_num(self.gt)}"
        if self.le is not None and value > self.le:
            return f"must be <= {_num(self.le)}"
        if self.lt is not None and value >= self.lt:
            return f"must be < {_num(self.lt)}"
        return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Pattern:
    """A declared form for a string, used as ``Annotated[str, Pattern(regex, "cpu | cuda:N")]``."""

    regex: str
    text: str  # how the docs and errors say it

    def check(self, value: str) -> str | None:
        return None if re.fullmatch(self.regex, value) else f"must be {self.text}"


@dataclass(frozen=True)
class Length:
    """A declared least size for a list or mapping, used as ``Annotated[list[str], Length(ge=1)]``: an empty
    one that could only fail later (an empty ``comparisons`` ran every stage, then crashed) is refused at load."""

    ge: int = 1

    def check(self, value: Any) -> str | None:
        if len(value) >= self.ge:
            return None
        return "must not be empty" if self.ge == 1 else f"needs at least {self.ge} entries"


PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
Fraction = Annotated[float, Range(ge=0, le=1)]
Probability = Annotated[float, Range(gt=0, lt=1)]
#: a non-negative seed (numpy's generators reject negative ones)
Seed = Annotated[int, Range(ge=0, le=2**32 - 1)]
#: where a model runs: ``auto`` (CUDA, else Apple MPS, else the CPU), ``cpu``, ``cuda``, ``cuda:N``, ``mps``
DeviceSpec = Annotated[str, Pattern(r"auto|cpu|mps|cuda(:[0-9]+)?", "auto | cpu | cuda | cuda:N | mps")]


#: the cache entries a param can affect: the stage's run, and what a stage keeps beside it - BM25's
#: index (the analysed corpus), dense's corpus embeddings, a reranker's pair scores (shared by the
#: stages of a run that score pairs alike)
RUN, INDEX, EMBEDDINGS, SCORES = "run", "index", "embeddings", "scores"
ENTRIES = (RUN, INDEX, EMBEDDINGS, SCORES)


def param(default: Any = dataclasses.MISSING, doc: str = "", *, factory: Any = dataclasses.MISSING,
          affects: tuple[str, ...] | None = None) -> Any:  # fmt: skip
    """A documented field: ``k1: NonNegativeFloat = param(1.5, "term-frequency saturation", affects=(RUN,))``.
    ``affects`` names the cache entries the param changes, the one form every cache key is built from:
    None (the default, and what a plain dataclass field gets) every entry of its stage; ``(RUN,)`` the
    run alone (BM25's k1: the cached index is reused); ``(RUN, SCORES)`` the run and a reranker's pair
    scores but no other entry; ``()`` nothing (threads, a timeout, whether to cache: left out of every key,
    :func:`unkeyed`)."""
    if affects is not None and not set(affects) <= set(ENTRIES):
        raise ValueError(f"affects: {sorted(set(affects) - set(ENTRIES))} are not cache entries ({', '.join(ENTRIES)})")
    meta = {"doc": doc, "affects": None if affects is None else tuple(affects)}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def affecting(cls: type, entry: str) -> tuple[str, ...]:
    """The fields of params dataclass ``cls`` that change cache entry ``entry`` (:func:`param`'s
    ``affects``; a field that declares nothing changes every entry), in declaration order."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.metadata.get("affects") is None or entry in f.metadata["affects"])  # fmt: skip


def unkeyed(cls: type) -> tuple[str, ...]:
    """The fields of params dataclass ``cls`` that change no cache entry (``affects=()``), in declaration order."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("affects") == ())


def type_text(tp: Any) -> str:
    """A declared type as a reader would say it: ``int >= 1``, ``flat | hnsw``, ``float in [0, 1]``."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        pattern = next((e for e in extras if isinstance(e, Pattern)), None)
        if pattern is not None:
            return pattern.text
        rng = next((e for e in extras if isinstance(e, Range)), None)
        text = type_text(base)
        size = next((e for e in extras if isinstance(e, Length)), None)
        if size is not None:
            text = ("non-empty " if size.ge == 1 else f"at least {size.ge}-entry ") + text
        if rng is not None:
            lo = f"{'>=' if rng.ge is not None else '>'} {_num(rng.ge if rng.ge is not None else rng.gt)}" \
                if rng.ge is not None or rng.gt is not None else ""  # fmt: skip
            hi = f"{'<=' if rng.le is not None else '<'} {_num(rng.le if rng.le is not None else rng.lt)}" \
                if rng.le is not None or rng.lt is not None else ""  # fmt: skip
            text += " " + ", ".join(x for x in (lo, hi) if x)
        return text
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        parts = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return " | ".join(str(c) for c in typing.get_args(tp))
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return f"list of {type_text(item)}"
    if origin is dict:
        k, v = typing.get_args(tp) or (Any, Any)
        return f"mapping {type_text(k)} -> {type_text(v)}"
    if dataclasses.is_dataclass(tp):
        return "mapping (below)"
    return {int: "int", float: "float", str: "str", bool: "bool"}.get(tp, _type_name(tp))


def describe(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, description) of every field of a section, in declaration order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = "null" if f.default is None else (f.default or '""') if isinstance(f.default, str) else str(f.default)
            default = default.replace("True", "true").replace("False", "false")
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
            default = "(below)" if dataclasses.is_dataclass(value) else _flow(value)
        else:
            default = "required"
        rows.append((f.name, type_text(hints[f.name]), default, f.metadata.get("doc", "")))
    return rows


def _flow(value: Any) -> str:
    """A default as YAML flow style: ``[nDCG@10, RR@10]``, ``{E: 1.0, S: 0.1}``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return str(value)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Annotated:
        return _type_name(typing.get_args(tp)[0])
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check/convert ``value`` against a type hint; raise ConfigError naming ``where``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        value = coerce(value, base, where)
        for extra in extras:
            if isinstance(extra, (Range, Pattern, Length)) and value is not None:
                msg = extra.check(value)
                if msg:
                    raise ConfigError(f"{where}: {msg}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, where)
            except ConfigError as exc:
                errors.append(str(exc))
        if len(errors) == 1:
            raise ConfigError(errors[0])
        near = [e for e in errors if ": expected " not in e and ": must be one of" not in e]  # the type fit, the value not
        raise ConfigError(near[0] if len(near) == 1 else f"{where}: expected {type_text(tp)}, got {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            choices = ", ".join("null" if c is None else str(c) for c in typing.get_args(tp))
            raise ConfigError(f"{where}: must be one of {choices}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        (item_t,) = typing.get_args(tp) or (Any,)
        return [coerce(v, item_t, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {value!r}")
        kt, vt = typing.get_args(tp) or (Any, Any)
        return {coerce(k, kt, f"{where}"): coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    raise ConfigError(f"{where}: unsupported type {_type_name(tp)}")  # pragma: no cover


def declared(value: Any, section: type, name: str, where: str) -> Any:
    """A value checked by the declaration of ``section``'s key ``name`` (one schema for the config, the command
    line's flags and the Python API: ``compare --alpha`` and ``stagebench.compare(alpha=...)`` are both
    ``evaluation.alpha``): its type, range and finiteness; None stays None."""
    return None if value is None else coerce(value, typing.get_type_hints(section, include_extras=True)[name], where)


def build(cls: type, mapping: Any, where: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping: unknown keys, missing keys, wrong types
    and values outside their declared range or choices are errors naming ``where.key``;
    then ``cls.validate()`` (if any) is applied."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(mapping).__name__} {mapping!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in mapping:
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        if name in mapping:
            kwargs[name] = coerce(mapping[name], hints[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}.{name}: required key is missing")
    obj = cls(**kwargs)
    if hasattr(obj, "validate"):
        for key, msg in obj.validate():
            raise ConfigError(f"{where}.{key}: {msg}")
    return obj


def _strict_loader() -> type:
    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping, and a key YAML reads as a boolean
        (``on:``, ``no:``: no stagebench file has one, so it is a name left unquoted). Merge keys (``<<: *anchor``) work
        as in PyYAML's safe loader: the mapping's own keys override the merged ones, and only its own
        keys are checked for duplicates."""

    def construct_mapping(loader, node, deep=False):  # noqa: ANN001
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merged below by SafeLoader.construct_mapping (flatten_mapping)
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, bool):  # `on: x` is a YAML 1.1 boolean: a name the user meant, read as True
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key_node.value!r} is read by YAML as the boolean {key} (so are on, off, yes, "
                    f"no, true and false); quote it, '{key_node.value}', to use it as a name", key_node.start_mark)  # fmt: skip
            try:
                hash(key)
            except TypeError:
                continue  # yaml's own constructor reports unhashable keys
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictLoader


#: the largest YAML file read (a config or expected values file is a few KB; anything this big is a mistake)
MAX_YAML_BYTES = 1 << 20


def read_yaml(path: str | Path, what: str = "config file") -> Any:
    """Parse a YAML file; a missing file, a syntax error or a duplicate key is a ConfigError
    naming file and line."""

    text = read_text(path, what, ConfigError, MAX_YAML_BYTES)
    try:
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{at} invalid YAML ({getattr(exc, 'problem', exc)})") from None
