"""What a measure answers besides its per-query values with the holes counted irrelevant: the one
declaration every caller reads (ir_measures' ``Provider.supports``), so that no code outside
:mod:`stagebench.metrics` asks which kind of measure it holds or which family it is.

Both kinds of measure carry one: a native :class:`~stagebench.metrics.names.Measure` derives it from
its family's declaration (:mod:`stagebench.metrics.families`), a
:class:`~stagebench.metrics.delegate.Delegated` one (ir_measures computes it) supports nothing past the
main view.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Supports:
    """One measure's capabilities (each a question a caller would otherwise answer by the measure's kind
    or family name)."""

    #: who computes the per-query values: ``stagebench`` or the ir_measures provider
    provider: str = "stagebench"
    #: the judged-only and top-grade views, and the bounds between them (ir_measures counts a hole as
    #: irrelevant only)
    views: bool = True
    #: its value moves with the holes (False for a measure of the judgments alone: Judged, NumRel...)
    holes_matter: bool = True
    #: two stages' difference bounded hole by hole, exactly (nDCG, P); else by the stages' own bounds
    paired_bounds: bool = False
    #: the ideal reordering of a pool is its highest value on that pool: recall ceilings, oracle
    #: headroom and the depth sweep can be read in it
    ceiling: bool = True
    #: the judging round's estimated view (linear in the holes' gains once its ideal is known: nDCG@k)
    estimable: bool = False
    #: it reads the evaluation's gain map (a gain under which no held grade is positive makes it 0)
    reads_gain: bool = False

    @property
    def native(self) -> bool:
        """stagebench computes it (its kernel is declared in :mod:`stagebench.metrics.families`)."""
        return self.provider == "stagebench"


#: what a measure ir_measures computes supports: the per-query values in the main view, nothing else
DELEGATED = Supports(views=False, ceiling=False)
