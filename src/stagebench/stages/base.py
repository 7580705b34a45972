"""The stage protocol: small transformers over runs (PyTerrier-style).

A stage receives the dataset (corpus texts and queries) and the runs of its inputs,
and returns a new run ``{qid: {docid: score}}``. Retrievers have no inputs; rerankers
and fusers have one or more. Each stage type declares a ``Params`` dataclass, which
the config loader validates (unknown keys, wrong types) before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from stagebench.params import unkeyed
from stagebench.runtime.engine import Engine, EngineParams, LocalEngine

if TYPE_CHECKING:
    from stagebench.cache import Cache
    from stagebench.data.dataset import Dataset
    from stagebench.record import Stats
    from stagebench.runs import Run


@dataclass
class StageContext:
    """What a stage may use besides its inputs: the dataset, the artefact cache (``None``:
    nothing is cached, e.g. in unit tests), the engine its units run on (:mod:`stagebench.runtime.engine`)
    and the pair scores it shares with like stages of the run."""

    dataset: Dataset
    cache: Cache | None = None
    engine: Engine = field(default_factory=LocalEngine)
    #: pair scores this stage shares with the other stages of the run that score pairs exactly as it does
    #: (same model, settings, data and code; only their candidates differ, e.g. a matrix's copies of one
    #: reranker): ``(qid, docid) -> score``, read before scoring and filled after; None: nothing shared
    shared_scores: dict[tuple[str, str], float] | None = None


#: one query served with everything loaded once (model, index): ``(qid, that query's input runs) ->
#: its run``; what the per-query latency times (:meth:`Stage.server`)
Server = Callable[[str, "list[Run]"], "Run"]


@dataclass
class StageOutput:
    """What one application of a stage produced: its run, and what it did besides - its runs at
    other depths (a reranker's ``depths:``), its typed stats, and why the run must not be cached
    (requests that failed; ``None``: it may be). The cache and the manifest keep all of it."""

    run: Run
    depth_runs: dict[int, Run] = field(default_factory=dict)
    stats: Stats | None = None
    incomplete: str | None = None


class Stage:
    """Base class. Subclasses set ``type_name``, ``Params``, input arity, and ``__call__`` (the run)
    or ``apply`` (the run and what the stage did besides, :class:`StageOutput`)."""

    type_name: ClassVar[str] = ""
    Params: ClassVar[type] = object
    min_inputs: ClassVar[int] = 0
    max_inputs: ClassVar[int | None] = 0
    #: whether the stage reorders the candidates of a single input (a reranker)
    reorders_input: ClassVar[bool] = False
    #: whether its work runs on the configured engine (model stages); the others run here
    uses_engine: ClassVar[bool] = False
    #: whether the stage names user code with a ``target:`` key beside ``type`` (plug-ins, PyTerrier)
    takes_target: ClassVar[bool] = False

    # What a cached run of this stage depends on besides its params, inputs and the dataset (see
    # stagebench.execute.stage_key) and the source of its module and every module it imports (traced,
    # never listed): the versions of these distributions ...
    packages: ClassVar[tuple[str, ...]] = ()
    # ... whether it reads the corpus texts (retrievers, rerankers) and the qrels (never,
    # for built-in stages; plug-ins could, so their key includes them).
    reads_corpus: ClassVar[bool] = True
    reads_qrels: ClassVar[bool] = False
    # params that do not change the output (cache switches, threads, timeouts) are left out of the
    # key: derived from the fields declared ``param(..., affects=())`` on ``Params`` (never listed here)
    unkeyed_params: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.unkeyed_params = unkeyed(cls.Params)

    @classmethod
    def tune_space(cls, params: Any, inputs: list[str]) -> dict[str, list[Any]]:
        """The params ``stagebench tune`` searches when a config's ``tune.space`` names none for the
        stage: param -> the values tried (docs/baselines.md). Empty: nothing to tune by default; a
        reranker (``reorders_input`` with a ``top_n``): its candidate depth."""
        if cls.reorders_input and hasattr(params, "top_n"):
            return {"top_n": [10, 20, 50, 100]}
        return {}

    def __init__(self, name: str, params: Any, engine: EngineParams | None = None) -> None:
        self.name = name
        self.params = params
        #: where its units run (config ``engine:``); it decides the placement of GPU workers
        self.engine = engine or EngineParams()

    @classmethod
    def check_params(cls, params: Any, inputs: list[str]) -> list[tuple[str, str]]:
        """Rules that tie the params to the stage's inputs (``(key, message)`` pairs), checked
        when the config is loaded, e.g. one fusion weight per input."""
        return []

    def preflight(self) -> None:
        """Checks that need the outside world (a server answers, a key is accepted), made
        before the dataset loads or any stage runs; raise a StagebenchError to refuse."""
        return None

    def finish_stats(self, stats: Stats | None) -> Stats | None:
        """The recorded ``stats`` of a run, computed now or read from the cache, completed with
        what depends on params that do not change the run (e.g. a price per token)."""
        return stats

    def probe_refusal(self) -> str | None:
        """Why a timed probe of this stage (``run --dry-run``'s forecast, :mod:`stagebench.forecast`) must
        not run it, e.g. it asks a server a user may pay for; None: it may be probed."""
        return None

    def what_runs(self) -> dict[str, str] | None:
        """For the log and the manifest: what runs the stage's model (None: it runs none)."""
        return None

    def identity(self) -> dict[str, Any]:
        """Extra cache-key parts, e.g. the resolved model's identity (name + weight hash)."""
        return {}

    def apply(self, ctx: StageContext, inputs: list[Run]) -> StageOutput:
        """The stage's run and what it did besides; a stage with nothing besides its run only
        implements ``__call__``."""
        return StageOutput(self(ctx, inputs))

    def server(self, ctx: StageContext) -> Server | None:
        """How this stage serves one query at a time, warm: everything it needs (a model, an index,
        corpus embeddings) loaded here, once, and a function that answers one query - what a search
        service would run per request. Timed for the per-query latency in the cost table
        (:func:`stagebench.execute.measure_latency`). ``None`` (the default): not measured."""
        return None

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        """The run (a stage that implements ``apply`` gets this for free)."""
        if type(self).apply is Stage.apply:
            raise NotImplementedError(f"{type(self).__name__} implements neither __call__ nor apply")
        return self.apply(ctx, inputs).run
