"""Measure names, the ir_measures way: ``nDCG@10``, ``RR@10``, ``R@100``, ``P(rel=2)@10``.

Grammar: ``FAMILY[(param=value[,param=value])][@CUTOFF]``

Families (case-insensitive everywhere: configs, ``eval -m``, expected-values files;
aliases in brackets):
  nDCG         graded; params ``gain=linear|exponential|esci`` cutoff optional
  nDCG_Burges  graded; nDCG with exponential gain (2^g - 1)    cutoff optional
  RR           binary; reciprocal rank of the first relevant   cutoff optional [MRR]
  R            binary; recall                                  cutoff required [Recall]
  P            binary; precision                               cutoff required [Precision]
  F1           binary; harmonic mean of P@k and R@k            cutoff required
  AP           binary; average precision (trec_eval map_cut)   cutoff optional [MAP]
  Hit          binary; 1 if any relevant in the top k          cutoff required [Success, Hit_Rate]
  Hits         binary; the number of relevant in the top k     cutoff required
  Rprec        binary; precision at rank R (R = #relevant)     no cutoff       [R-Prec, RPrec]
  Judged       share of the top k that has any judgment        cutoff required

Binary families take ``rel=N`` (a document is relevant when its grade >= N); when
absent, the evaluation's relevance threshold applies (default 1, as trec_eval).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stagebench.errors import StagebenchError

FAMILIES = ("nDCG", "nDCG_Burges", "RR", "R", "P", "F1", "AP", "Hit", "Hits", "Rprec", "Judged")
#: the one alias table: lower-case name -> family (the families themselves included)
ALIASES = {
    **{f.lower(): f for f in FAMILIES},
    "mrr": "RR",
    "recall": "R",
    "precision": "P",
    "map": "AP",
    "success": "Hit",
    "hit_rate": "Hit",
    "r-prec": "Rprec",
    "ndcg-burges": "nDCG_Burges",
}
BINARY = {"RR", "R", "P", "F1", "AP", "Hit", "Hits", "Rprec"}
CUTOFF_REQUIRED = {"R", "P", "F1", "Hit", "Hits", "Judged"}
NO_CUTOFF = {"Rprec"}
#: the gains a measure name may ask for (``nDCG(gain=esci)@10``); a table is set for the evaluation
GAINS = ("linear", "exponential", "exp", "esci")

_NAME_RE = re.compile(r"^(?P<family>[A-Za-z][A-Za-z0-9_-]*)(?:\((?P<params>[^)]*)\))?(?:@(?P<cutoff>\d+))?$")


@dataclass(frozen=True)
class Measure:
    family: str
    cutoff: int | None = None
    rel: int | None = None
    gain: str | None = None

    def __str__(self) -> str:
        params = []
        if self.rel is not None:
            params.append(f"rel={self.rel}")
        if self.gain is not None:
            params.append(f"gain={self.gain}")
        name = self.family + (f"({','.join(params)})" if params else "")
        return name + (f"@{self.cutoff}" if self.cutoff is not None else "")

    @property
    def name(self) -> str:
        return str(self)


def claims(text: str) -> bool:
    """Whether ``text`` is stagebench's to parse (and to refuse): one of its families, with only
    parameters that family takes. Anything else (``ERR@10``, ``nDCG(judged_only=True)@10``) may
    be another library's measure (:mod:`stagebench.metrics.delegate`)."""
    m = _NAME_RE.fullmatch(text.strip())
    family = ALIASES.get(m["family"].lower()) if m else None
    if family is None:
        return False
    keys = {part.partition("=")[0].strip().lower() for part in (m["params"] or "").split(",") if part.strip()}
    allowed = ({"rel"} if family in BINARY else set()) | ({"gain"} if family == "nDCG" else set())
    return keys <= allowed


def parse_measure(text: str) -> Measure:
    """Parse a measure name; raises :class:`StagebenchError` with the reason."""
    m = _NAME_RE.fullmatch(text.strip())
    if not m:
        raise StagebenchError(f"measure {text!r}: not of the form FAMILY[(rel=N)][@K], e.g. nDCG@10, RR@10, R@100")
    family = ALIASES.get(m["family"].lower())
    if family is None:
        raise StagebenchError(f"measure {text!r}: unknown family {m['family']!r} (known: {', '.join(FAMILIES)})")
    cutoff = int(m["cutoff"]) if m["cutoff"] is not None else None
    if cutoff is not None and cutoff < 1:
        raise StagebenchError(f"measure {text!r}: cutoff must be >= 1")
    if family in CUTOFF_REQUIRED and cutoff is None:
        raise StagebenchError(f"measure {text!r}: {family} needs a cutoff, e.g. {family}@10")
    if family in NO_CUTOFF and cutoff is not None:
        raise StagebenchError(f"measure {text!r}: {family} takes no cutoff")
    rel = gain = None
    if m["params"]:
        for part in m["params"].split(","):
            key, _, value = part.partition("=")
            key, value = key.strip().lower(), value.strip().lower()
            if key == "rel" and family in BINARY:
                try:
                    rel = int(value)
                except ValueError:
                    raise StagebenchError(f"measure {text!r}: rel must be an integer grade") from None
                if rel < 1:
                    raise StagebenchError(f"measure {text!r}: rel must be >= 1 (grade 0 means not relevant)")
            elif key == "gain" and family == "nDCG":
                if value not in GAINS:
                    raise StagebenchError(f"measure {text!r}: gain must be one of {', '.join(GAINS)}")
                gain = value
            else:
                raise StagebenchError(f"measure {text!r}: parameter {key!r} does not apply to {family}")
    return Measure(family, cutoff, rel, gain)
