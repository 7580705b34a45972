"""Every measure family stagebench computes itself, each declared once (ir_measures' way: a measure is
one declaration). A :class:`Family` says everything that parses, computes and treats a measure of it:

* its name and aliases (case-insensitive everywhere: configs, ``eval -m``, expected-values files);
* its kernel (:mod:`stagebench.metrics.compute`), called with the ranking, the query's judgments, the
  cut-off, the relevance threshold and the gain;
* graded (it reads grades through a gain) or binary (a document is relevant at ``rel`` and above);
* its cut-off: required, optional or absent;
* the parameters a name may give it (``nDCG(gain=esci)@10``, ``P(rel=2)@10``), declared with the
  same :func:`stagebench.params.param` as a stage's (their type and choices checked by
  :func:`stagebench.params.build`);
* how the holes treat it (:mod:`stagebench.metrics.holes`): ``monotone`` (a hole's grade can only
  raise it, so every grading of the holes lies inside its bounds), ``extremes`` (its normaliser
  moves too: the bounds are the two extreme scenarios) or ``unaffected`` (it describes the
  judgments, the same under every treatment);
* what qrels it cannot score (``params.problem(top_grade)``, ERR's ``max_grade`` below a grade held), and
  parameters that contradict each other (``params.conflict()``, refused when the name is read);
* its paired bounds: whether :mod:`stagebench.judgments.views` bounds a difference of two stages on
  it exactly, hole by hole (``paired``), or by the two stages' own bounds;
* whether the judging round's estimated view can be taken in it (``estimable``: linear in the holes'
  gains once its ideal is known).

What a measure supports (:class:`stagebench.metrics.supports.Supports`) is derived from these fields
alone (:meth:`Family.supports`).

Parsing (:mod:`.names`), the per-query value (:mod:`.value`), the holes (:mod:`.holes`), the views
and docs/metrics.md's table of families read this registry; ``tests/metrics/test_families.py``
walks it (a kernel, a parity row and a docs row for each family). A measure no family here
claims is handed to ir_measures where it is installed (:mod:`.delegate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stagebench.metrics import compute
from stagebench.metrics.supports import Supports
from stagebench.params import NonNegativeInt, PositiveInt, Probability, param

#: a family's per-query value: (ranking, the query's judgments, cut-off, relevance threshold, gain, the
#: measure's parameters) -> value
Kernel = Callable[[Sequence[str], Mapping[str, int], "int | None", int, Any, Any], float]


@dataclass(frozen=True)
class NoParams:
    """A family whose name takes no parameter."""


@dataclass(frozen=True)
class BinaryParams:
    """The parameter of a binary family."""

    rel: PositiveInt | None = param(None, "the grade from which a document counts as relevant (default: the "
                                          "evaluation's relevance_threshold, 1 as trec_eval)")  # fmt: skip


@dataclass(frozen=True)
class GainParams:
    """The parameter of nDCG."""

    gain: Literal["linear", "exponential", "exp", "esci"] | None = param(
        None, "the gain map (default: the evaluation's gain; docs/metrics.md#gain)")


@dataclass(frozen=True)
class ErrParams:
    """The parameter of ERR."""

    max_grade: NonNegativeInt = param(4, "the grade g_max of the stop probability (2^g - 1) / 2^g_max: 4 as gdeval.pl "
                                         "(and so ir_measures) fixes it, whatever the qrels hold")  # fmt: skip

    def problem(self, top_grade: int) -> str | None:
        """Why qrels whose highest grade is ``top_grade`` cannot be scored, or None."""
        if top_grade > self.max_grade:
            return (f"the qrels hold grade {top_grade}, above max_grade {self.max_grade} (a stop probability over 1): "
                    f"give ERR(max_grade={top_grade})")  # fmt: skip
        return None


@dataclass(frozen=True)
class RbpParams:
    """The parameters of RBP."""

    p: Probability = param(0.8, "the persistence: the chance the user reads on past each rank, in (0, 1) (0.8 as "
                                "ir_measures; trec_eval's rbp uses 0.9)")  # fmt: skip
    rel: PositiveInt | None = param(None, "binary RBP: the grade from which a document counts as relevant (default: "
                                          "the evaluation's relevance_threshold)")  # fmt: skip
    graded: bool = param(False, "graded RBP as trec_eval 10's rbp: a document is worth its grade over the query's "
                                "highest judged grade (when above 1), not 0 or 1")  # fmt: skip

    def conflict(self) -> str | None:
        """Why these parameters cannot mean one measure (refused when the name is read), or None."""
        if self.graded and self.rel is not None:
            return "graded RBP has no relevance threshold: give rel= (binary) or graded=true, not both"
        return None


@dataclass(frozen=True)
class Family:
    """One measure family (module docstring)."""

    name: str
    describe: str
    kernel: Kernel
    graded: bool
    cutoff: Literal["required", "optional", "absent"]
    params: type = NoParams
    holes: Literal["monotone", "extremes", "unaffected"] = "extremes"
    paired: bool = False
    aliases: tuple[str, ...] = ()
    #: a gain the family always uses, whatever the evaluation's (nDCG_Burges: exponential)
    fixed_gain: str | None = None
    #: trec_eval's names of the family, read as its own (``ndcg_cut_10`` is ``nDCG@10``, ``recip_rank``
    #: is ``RR``): the one that takes ``_k`` (cut at k), and the one without a cut-off
    trec_eval: tuple[str, str] = ("", "")
    #: the parameters that make the family trec_eval's measure (``rbp`` is ``RBP(graded=true,p=0.9)``)
    trec_eval_params: str = ""
    #: the judging round's estimated view can be taken in it (with a cut-off: nDCG@k)
    estimable: bool = False

    @property
    def reads_gain(self) -> bool:
        """It reads a gain map: its own (``fixed_gain``), the name's or the evaluation's."""
        return self.fixed_gain is not None or any(f.name == "gain" for f in dataclasses.fields(self.params))

    def supports(self, cutoff: int | None, gain: str | None) -> Supports:
        """What a measure of this family (with this cut-off and named gain) supports."""
        moves = self.holes != "unaffected"
        return Supports(views=True, holes_matter=moves, paired_bounds=self.paired, ceiling=moves,
                        estimable=self.estimable and cutoff is not None,
                        reads_gain=self.fixed_gain is None and gain is None and self.reads_gain)  # fmt: skip


def _ndcg(ranking, judgments, k, rel, gain, params):
    return compute.ndcg(ranking, judgments, k, gain)


def _err(ranking, judgments, k, rel, gain, params):
    return compute.err(ranking, judgments, k, params.max_grade)


def _rbp(ranking, judgments, k, rel, gain, params):
    return compute.rbp(ranking, judgments, k, rel, params.p, params.graded)


#: the registry, in the order docs/metrics.md lists the families
FAMILIES: tuple[Family, ...] = (
    Family("nDCG", "normalised discounted cumulative gain; the ideal sorts the judged documents by the same gain",
           _ndcg, graded=True, cutoff="optional", params=GainParams, paired=True, trec_eval=("ndcg_cut", "ndcg"),
           estimable=True),
    Family("nDCG_Burges", "nDCG with exponential gain (2^g - 1)", _ndcg, graded=True, cutoff="optional", paired=True,
           aliases=("ndcg-burges",), fixed_gain="exponential"),
    Family("RR", "reciprocal rank of the first relevant document", lambda r, j, k, rel, g, p: compute.reciprocal_rank(r, j, k, rel),
           graded=False, cutoff="optional", params=BinaryParams, holes="monotone", aliases=("mrr",),
           trec_eval=("", "recip_rank")),
    Family("R", "recall", lambda r, j, k, rel, g, p: compute.recall(r, j, k, rel), graded=False, cutoff="required",
           params=BinaryParams, holes="monotone", aliases=("recall",), trec_eval=("recall", "")),
    Family("P", "precision", lambda r, j, k, rel, g, p: compute.precision(r, j, k, rel), graded=False, cutoff="required",
           params=BinaryParams, holes="monotone", paired=True, aliases=("precision",), trec_eval=("P", "")),
    Family("F1", "harmonic mean of P@k and R@k", lambda r, j, k, rel, g, p: compute.f1(r, j, k, rel), graded=False,
           cutoff="required", params=BinaryParams, holes="monotone"),
    Family("AP", "average precision (trec_eval map_cut)", lambda r, j, k, rel, g, p: compute.average_precision(r, j, k, rel),
           graded=False, cutoff="optional", params=BinaryParams, aliases=("map",), trec_eval=("map_cut", "map")),
    Family("Hit", "1 if any relevant document is in the top k", lambda r, j, k, rel, g, p: compute.hit(r, j, k, rel),
           graded=False, cutoff="required", params=BinaryParams, holes="monotone", aliases=("success", "hit_rate"),
           trec_eval=("success", "")),
    Family("Hits", "the number of relevant documents in the top k (without a cut-off: in the whole ranking, trec_eval's "
           "num_rel_ret)", lambda r, j, k, rel, g, p: compute.hits(r, j, k, rel),
           graded=False, cutoff="optional", params=BinaryParams, holes="monotone", aliases=("numrelret",),
           trec_eval=("", "num_rel_ret")),
    Family("Rprec", "precision at rank R (R = the number of relevant documents)",
           lambda r, j, k, rel, g, p: compute.r_precision(r, j, rel), graded=False, cutoff="absent", params=BinaryParams,
           aliases=("r-prec",), trec_eval=("", "Rprec")),
    Family("ERR", "expected reciprocal rank (Chapelle et al. 2009): a cascade user who stops at a document with "
           "probability (2^g - 1) / 2^max_grade", _err, graded=True, cutoff="optional", params=ErrParams),
    Family("Judged", "the share of the top k that has any judgment", lambda r, j, k, rel, g, p: compute.judged(r, j, k),
           graded=False, cutoff="required", holes="unaffected"),
    Family("RBP", "rank-biased precision (Moffat and Zobel 2008): binary (a document relevant at rel and above) or, "
           "with graded=true, trec_eval 10's graded rbp (grade over the query's highest judged grade)", _rbp,
           graded=False, cutoff="optional", params=RbpParams, trec_eval=("", "rbp"),
           trec_eval_params="graded=true,p=0.9"),
    Family("NumQ", "1 for every scored query (trec_eval's num_q; its 'all' line is the count, stagebench's the mean)",
           lambda r, j, k, rel, g, p: 1.0, graded=False, cutoff="absent", holes="unaffected", trec_eval=("", "num_q")),
    Family("NumRel", "the number of judged documents at grade rel and above, whatever the ranking (trec_eval's "
           "num_rel)", lambda r, j, k, rel, g, p: compute.num_rel(j, rel), graded=False, cutoff="absent",
           params=BinaryParams, holes="unaffected", trec_eval=("", "num_rel")),
    Family("NumRet", "the number of documents the run holds for the query (trec_eval's num_ret)",
           lambda r, j, k, rel, g, p: compute.num_ret(r, k), graded=False, cutoff="absent", holes="unaffected",
           trec_eval=("", "num_ret")),
)  # fmt: skip
#: family name -> its declaration
FAMILY: dict[str, Family] = {f.name: f for f in FAMILIES}
#: the one alias table: lower-case name or alias -> family name
ALIASES: dict[str, str] = {a: f.name for f in FAMILIES for a in (f.name.lower(), *f.aliases)}


__all__ = ["ALIASES", "BinaryParams", "ErrParams", "FAMILIES", "FAMILY", "Family", "GainParams", "Kernel", "NoParams"]
