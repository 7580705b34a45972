"""The stages that run a resolved model (dense, cross-encoder): their placement and identity.

Apart from :mod:`stagebench.stages.base` so that the stage protocol - and every stage's key, which
holds the code its module imports (:func:`stagebench.cache.import_closure`) - does not pull in the
model machinery a BM25 or fusion stage never runs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from stagebench.cache import code_identity
from stagebench.models.encoders import FIXED_SHAPE
from stagebench.models.resolve import ResolvedModel, resolve_model
from stagebench.models.variants import VARIANT_CODE, for_placement, onnx_kind, recipe_for, recipe_runtime
from stagebench.errors import StagebenchError
from stagebench.runtime.devices import Placement, cpu_class, gpu_worker_placement, place, stream_shape
from stagebench.stages.base import Stage, StageContext


class ModelStage(Stage):
    """A stage that runs a resolved model (params ``model``, ``source``, ``device``, ``precision``,
    ``streams``): its placement is resolved in :meth:`preflight`, before anything runs, and keyed as
    resolved (the streams are not: they never change an output)."""

    uses_engine = True
    #: what the model does (:data:`stagebench.runtime.devices.ROLES`): what ``precision: auto`` picks
    role: ClassVar[str] = "cross_encoder"
    #: set when the model ran: the model itself ran (no variant), whatever its placement's recipe
    _itself: bool = False

    def placement(self) -> Placement:
        p = self.params
        backend = onnx_kind(resolve_model(p.model, p.source))
        if self.engine.gpus and p.device in ("auto", "cuda"):  # the driver may have no GPU; its workers do
            return gpu_worker_placement(p.precision, backend, f"stage {self.name}")
        return place(p.device, p.precision, backend, f"stage {self.name}", self.role)

    def preflight(self) -> None:
        ran = self.what_runs()
        if ran["runtime"] == "torch" and self.params.streams not in ("auto", 1):
            raise StagebenchError(f"stage {self.name}: params.streams: {self.params.streams}: {ran['model']} runs on torch "
                                  f"at {ran['precision']}, one batch at a time (streams: auto or 1; ONNX models run "
                                  "several)")  # fmt: skip

    def identity(self) -> dict[str, Any]:
        """The resolved model and placement; a derived variant (``int8-token``, ``fp32`` of an INT8
        graph) adds the code that derives it."""
        resolved = resolve_model(self.params.model, self.params.source)
        placement = self.placement()
        out = {"model": resolved.identity, **placement.key()}
        kind = onnx_kind(resolved)
        recipe = recipe_for(resolved, placement, kind, self.role)
        if recipe is not None:
            out["variant_code"] = code_identity(VARIANT_CODE)
        if recipe_runtime(kind, recipe) == "torch" and placement.precision in FIXED_SHAPE:
            out["batching"] = code_identity(("stagebench.models.shapes",))  # its fixed shapes move every output
        return out

    def what_runs(self) -> dict[str, str]:
        """The model's path as resolved for this machine: device, precision and why, the CPU class
        ``precision: auto`` decided for (on a CPU), the variant of the model that runs (``export``,
        ``per-token``, ``dequantized``, ``dequantized-torch``, or the model itself: also where its export failed when
        it ran), the runtime that runs it, and its streams (batches at once x threads each)."""
        resolved = resolve_model(self.params.model, self.params.source)
        placement, kind = self.placement(), onnx_kind(resolved)
        recipe = None if self._itself else recipe_for(resolved, placement, kind, self.role)
        out = {"model": resolved.origin, "device": placement.device, "precision": placement.precision, "why": placement.why,
               "variant": recipe or "the model itself", "runtime": recipe_runtime(kind, recipe)}  # fmt: skip
        if placement.kind == "cpu":
            out["cpu_class"] = cpu_class()
        n, threads = stream_shape(self.params.streams, placement.kind, out["runtime"])
        out["streams"] = f"{n} x {threads} thread{'s' if threads > 1 else ''}"
        return out

    def model_to_run(self, ctx: StageContext) -> tuple[ResolvedModel, Placement]:
        """The model this stage runs and where: the resolved model, or the variant its precision
        runs (:mod:`stagebench.models.variants`, built once into the cache), and its placement."""
        p = self.params
        resolved = resolve_model(p.model, p.source)
        placement = self.placement()
        ran = for_placement(resolved, placement, onnx_kind(resolved), ctx.cache, f"stage {self.name}", self.role)
        self._itself = ran is resolved  # a torch model whose ONNX export failed runs itself (what_runs says so)
        return ran, placement
