"""Measure names, the ir_measures way: ``nDCG@10``, ``RR@10``, ``R@100``, ``P(rel=2)@10``, ``ERR@10``.

Grammar: ``FAMILY[(param=value[,param=value])][@CUTOFF]``. The families, their aliases, cut-off
rules and parameters are declared once in :mod:`stagebench.metrics.families` (docs/metrics.md
lists them); a parameter's value is checked against its declaration like a config key's.

Binary families take ``rel=N`` (a document is relevant when its grade >= N); when
absent, the evaluation's relevance threshold applies (default 1, as trec_eval).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any

import yaml

from stagebench.errors import ConfigError, StagebenchError
from stagebench.metrics.delegate import Delegated, UnknownForm, ir_measures_version, parse_delegated
from stagebench.metrics.families import ALIASES, FAMILIES as REGISTRY, FAMILY, Family
from stagebench.metrics.supports import Supports
from stagebench.metrics.trec_names import TREC_EVAL, native_name as trec_eval_name, unnamed
from stagebench.params import build

#: the family names, in the registry's order
FAMILIES = tuple(f.name for f in REGISTRY)

_NAME_RE = re.compile(r"^(?P<family>[A-Za-z][A-Za-z0-9_-]*)(?:\((?P<params>[^)]*)\))?(?:@(?P<cutoff>\d+))?$")


@dataclass(frozen=True)
class Measure:
    """A parsed measure name: its family, cut-off and parameters (an instance of the family's
    declared ``params`` dataclass)."""

    family: str
    cutoff: int | None = None
    params: Any = None

    def __post_init__(self) -> None:
        if self.params is None:
            object.__setattr__(self, "params", FAMILY[self.family].params())

    @property
    def rel(self) -> int | None:
        """The relevance threshold the name gives (binary families), else None."""
        return getattr(self.params, "rel", None)

    @property
    def gain(self) -> str | None:
        """The gain the name gives (nDCG), else None."""
        return getattr(self.params, "gain", None)

    def __str__(self) -> str:
        given = [f"{f.name}={getattr(self.params, f.name)}" for f in dataclasses.fields(self.params)
                 if getattr(self.params, f.name) != f.default]  # fmt: skip
        name = self.family + (f"({','.join(given)})" if given else "")
        return name + (f"@{self.cutoff}" if self.cutoff is not None else "")

    @property
    def name(self) -> str:
        return str(self)

    @property
    def declared(self) -> Family:
        """The family's declaration."""
        return FAMILY[self.family]

    @property
    def supports(self) -> Supports:
        """What it answers besides its main view, from its family's declaration."""
        return FAMILY[self.family].supports(self.cutoff, self.gain)


def _keys(params: str | None) -> list[tuple[str, str]]:
    return [(k.strip().lower(), v.strip()) for k, _, v in (p.partition("=") for p in (params or "").split(",") if p.strip())]


def claims(text: str) -> bool:
    """Whether ``text`` is stagebench's to parse (and to refuse): one of its families, with only
    parameters that family declares. Anything else (``RBP(p=0.8)``, ``nDCG(judged_only=True)@10``)
    may be another library's measure (:mod:`stagebench.metrics.delegate`)."""
    if trec_eval_name(text) is not None:
        return True
    m = _NAME_RE.fullmatch(text.strip())
    family = ALIASES.get(m["family"].lower()) if m else None
    if family is None:
        return False
    declared = {f.name for f in dataclasses.fields(FAMILY[family].params)}
    return {k for k, _ in _keys(m["params"])} <= declared


def _value(text: str, family: Family, key: str, raw: str) -> Any:
    """A parameter's value from a name: read as YAML reads a scalar, then checked by its declaration."""
    try:
        value = yaml.safe_load(raw) if raw else raw
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):
        value = value.lower()
    try:
        return getattr(build(family.params, {key: value}, "p"), key)
    except ConfigError as exc:
        raise StagebenchError(f"measure {text!r}: {key} {str(exc).removeprefix(f'p.{key}: ')}") from None


def parse_measure(text: str) -> Measure | Delegated:
    """Parse a measure name: stagebench's (or trec_eval's name of one of its measures) as a
    :class:`Measure`; a name no family claims, which ir_measures knows, as a :class:`Delegated`
    (:mod:`stagebench.metrics.delegate`); anything else raises :class:`StagebenchError` with the reason."""
    if not claims(text):
        try:
            delegated = parse_delegated(text)
        except UnknownForm:
            if re.split(r"[(@]", text.strip(), maxsplit=1)[0].lower() not in ALIASES:
                raise
            delegated = None  # one of stagebench's families: its own reason says more
        if delegated is not None:
            return delegated
    try:
        return parse_native(text)
    except StagebenchError as exc:
        why = unnamed(text)
        if why is not None:
            raise StagebenchError(f"measure {text!r}: trec_eval's {text.strip()} has no name in stagebench or "
                                  f"ir_measures ({why})") from None  # fmt: skip
        hint = "" if ir_measures_version() is not None else (
            "; ir_measures, which names many more, is not installed: pip install 'stagebench[interop]'")
        raise StagebenchError(f"{exc}{hint}") from None


def _nearest(family: str) -> str:
    """", did you mean X?" for a family name close to one stagebench or trec_eval spells, else ""."""
    spellings = {**{a: ALIASES[a] for a in ALIASES}, **{n: f for n, (f, _, _) in TREC_EVAL.items()}}
    close = difflib.get_close_matches(family.lower(), list(spellings), n=1, cutoff=0.75)
    return f"; did you mean {spellings[close[0]]}?" if close else ""


def parse_native(text: str) -> Measure:
    """Parse the name of one of stagebench's own measures (or trec_eval's name of one); raises
    :class:`StagebenchError` with the reason."""
    translated = trec_eval_name(text)
    if translated is not None and translated != text.strip():
        return parse_native(translated)
    m = _NAME_RE.fullmatch(text.strip())
    if not m:
        raise StagebenchError(f"measure {text!r}: not of the form FAMILY[(rel=N)][@K], e.g. nDCG@10, RR@10, R@100")
    name = ALIASES.get(m["family"].lower())
    if name is None:
        raise StagebenchError(f"measure {text!r}: unknown family {m['family']!r} (known: {', '.join(FAMILIES)}; "
                              f"trec_eval's names of them too, e.g. ndcg_cut_10, P_5, recip_rank){_nearest(m['family'])}")
    family = FAMILY[name]
    cutoff = int(m["cutoff"]) if m["cutoff"] is not None else None
    if cutoff is not None and cutoff < 1:
        raise StagebenchError(f"measure {text!r}: cutoff must be >= 1")
    if family.cutoff == "required" and cutoff is None:
        raise StagebenchError(f"measure {text!r}: {name} needs a cutoff, e.g. {name}@10")
    if family.cutoff == "absent" and cutoff is not None:
        raise StagebenchError(f"measure {text!r}: {name} takes no cutoff")
    declared = {f.name for f in dataclasses.fields(family.params)}
    values = {}
    for key, raw in _keys(m["params"]):
        if key not in declared:
            raise StagebenchError(f"measure {text!r}: parameter {key!r} does not apply to {name}")
        values[key] = _value(text, family, key, raw)
    params = family.params(**values)
    conflict = params.conflict() if hasattr(params, "conflict") else None
    if conflict:
        raise StagebenchError(f"measure {text!r}: {conflict}")
    return Measure(name, cutoff, params)
