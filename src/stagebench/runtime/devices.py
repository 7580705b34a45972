"""Where a model runs and at which precision: ``device`` and ``precision`` resolved once, logged.

``device: auto`` is CUDA when torch sees a GPU, else Apple's MPS, else the CPU (torch is not imported
where no GPU can be: :func:`gpu_possible`); ``cuda``,
``cuda:N``, ``mps`` and ``cpu`` are taken as asked (a device that is not there is an error).

``precision: auto`` picks the fastest path measured to keep quality (``make perf``'s precision
table, docs/models.md) among the paths that are **batch-invariant** (a text's embedding or a pair's
score does not depend on its batch mates or padding beyond fp32 rounding):

* on every CPU class (Intel AVX2, Intel AVX-512 with or without AVX512-BF16, Intel AMX, AMD
  AVX512-BF16), fp32 for torch models. bf16 autocast was the default on AMX and on AMD with
  AVX512-BF16 (faster there), but it is batch-dependent at bf16's rounding: on an AMD EPYC with
  AVX512-BF16 an embedding of MiniLM-L6 moved by up to 7.6e-4 between a text encoded alone and in
  a padded batch (9e-4 on an Intel Xeon with AVX512-BF16), against exactly 0 for the fp32 ONNX
  export (docs/models.md#precision-auto-per-cpu-class, issue 66). bf16 stays there to ask for
  (``precision: bf16``);
* a torch bi-encoder or cross-encoder at fp32 on a CPU runs exported to ONNX (onnxruntime): the same
  fp32 arithmetic, faster than torch there (a cross-encoder: 1.8-2.6x on a Zen 5), checked against torch when it is
  built, torch where it does not export (:func:`stagebench.models.variants.variant_recipe`);
* on a GPU, fp32: for MiniLM-L6 on an H200 it was also the fastest (8,918 texts/s at batch 128
  against 6,301 under fp16 and 6,802 under bf16 autocast, whose casts cost more than they save on
  a model this small); fp16 and bf16 are there to ask for;
* ONNX graphs quantized dynamically (the bundled carriers) run on a CPU at ``int8-token``:
  their INT8 weights with one activation scale per token, so that a pair's score or a text's
  embedding does not depend on its batch mates (:mod:`stagebench.models.variants`); measured within
  0.002 nDCG@10 of fp32 on the three collections (docs/models.md#precision); on a GPU, their
  weights dequantized (``fp32``, batch-invariant too; not measured on a GPU here). Other ONNX
  graphs run as they were exported.

``bf16`` (and ``fp16`` on a GPU) of a torch model runs in fixed batch shapes (:mod:`stagebench.models.shapes`):
batch-invariant, but measured no faster than the fp32 export on AMD's AVX512-BF16 CPUs (docs/models.md#fixed-shape-bf16),
so ``auto`` does not pick it there. ``bf16`` of a dynamic INT8 ONNX cross-encoder runs its weights dequantized
in torch (``dequantized-torch``), in the same fixed shapes.

``int8`` is explicit and **batch-dependent**: torch's dynamic INT8 of the Linear layers, or an
ONNX graph's own dynamic INT8, both take one activation scale for the whole batch (padding
included), so an input's output moves with what it is batched with; it also costs nDCG for
torch models (see ``make perf``). ``int8-token`` (CPU, onnxruntime) is the batch-invariant
INT8: one activation scale per token (a torch model is exported to ONNX for it); ``fp32`` of an
INT8 ONNX graph runs its weights dequantized (:mod:`stagebench.models.variants`). CPU features are read once from ``/proc/cpuinfo`` (Linux);
``STAGEBENCH_CPU_FEATURES`` replaces them (``""``: none, e.g. to see the fp32 default on a
bf16 machine).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from stagebench.errors import StagebenchError
from stagebench.optional import need
from stagebench.params import RUN, SCORES, DeviceSpec, PositiveInt, param
from stagebench.runtime.system import compute_threads

log = logging.getLogger("stagebench")

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8", "int8-token")
#: how place() sees a model: torch, an ONNX graph, or an ONNX graph with dynamic (per batch) INT8
BACKENDS = ("torch", "onnx", "onnx-dynamic-int8")
#: CPU flags that mean native bf16 matrix arithmetic
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
FEATURES_ENV = "STAGEBENCH_CPU_FEATURES"


@dataclass
class HardwareParams:
    """The ``device`` and ``precision`` keys of every neural stage (and of ``training:``)."""

    # a pair's score and a text's embedding depend on them: in the run's key and the pair scores' as written,
    # and in every entry's key as resolved (the placement: device type and precision)
    device: DeviceSpec = param("auto", "where the model runs: auto (CUDA, else MPS, else CPU) | cpu | cuda | cuda:N | mps",
                               affects=(RUN, SCORES))  # fmt: skip
    precision: Literal["auto", "fp32", "bf16", "fp16", "int8", "int8-token"] = param(
        "auto", "auto: the fastest batch-invariant path: torch models fp32 on every CPU (a torch bi-encoder or "
        "cross-encoder runs exported to ONNX, checked against torch) and on GPUs; INT8 ONNX carriers int8-token on a "
        "CPU, dequantized fp32 on a GPU "
        "(docs/models.md#precision); bf16 (fp16 on a GPU): torch autocast in fixed batch shapes (batch-invariant; an INT8 "
        "ONNX cross-encoder's weights dequantized into torch), measured no faster than the fp32 ONNX paths on a CPU; int8: one activation scale per "
        "batch (batch-dependent); int8-token: per token (batch-invariant, CPU); fp32 of an INT8 ONNX model: its weights "
        "dequantized", affects=(RUN, SCORES))


@dataclass
class StreamParams:
    """The ``streams`` key of the stages that run an encoder (dense, cross-encoder)."""

    # never in a key: a batch's output is the same bits whichever stream runs it and on how many threads
    # (tests/models/test_batch_invariance.py)
    streams: Literal["auto"] | PositiveInt = param(
        "auto", "model batches run at once, each on its own share of the cores (cores / streams threads): auto: one "
        "a core (up to 8) for an ONNX model on a CPU (faster, and steady where other work takes a core: docs/models.md#streams), 1 "
        "on a GPU and for a model torch runs; never changes an output", affects=())


#: the most streams ``auto`` runs: the model batches of one dense engine unit (``models.encoders.BATCHES_PER_UNIT``
#: reads it), so that every stream has a batch; past as many cores, each stream gets several threads
MOST_AUTO_STREAMS = 8


def stream_shape(streams: str | int, device: str, runtime: str) -> tuple[int, int]:
    """``(streams, threads each)`` of a model that ``runtime`` (onnxruntime | torch) runs on ``device``:
    ``auto`` is one stream a core for onnxruntime on a CPU (a sequential kernel a batch, no barrier between
    two cores: on a shared 2-core machine one batch on both cores lost a third of its rate whenever the
    other core was taken) up to :data:`MOST_AUTO_STREAMS`, the cores then shared evenly among them
    (16 cores: 8 x 2 threads); one stream on a GPU and for torch. The cores are :func:`compute_threads`."""
    cores = compute_threads()
    if streams == "auto":
        if runtime != "onnxruntime" or device != "cpu":
            return 1, cores
        threads = -(-cores // MOST_AUTO_STREAMS)
        return cores // threads, threads
    n = int(streams)
    return n, max(1, cores // n)


@lru_cache(maxsize=1)
def _detected_features() -> frozenset[str]:
    """The flags of the first CPU in ``/proc/cpuinfo``, and its vendor as ``vendor=<vendor_id>``."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    flags: list[str] = []
    vendor = ""
    for line in text.splitlines():
        if line.startswith("vendor_id") and not vendor:
            vendor = line.partition(":")[2].strip()
        elif line.startswith("flags"):
            flags = line.partition(":")[2].split()
            break
    return frozenset(flags + ([f"vendor={vendor}"] if vendor else []))


def cpu_features() -> frozenset[str]:
    """The CPU's feature flags and ``vendor=<vendor_id>`` (``$STAGEBENCH_CPU_FEATURES``, comma- or
    space-separated, if set)."""
    forced = os.environ.get(FEATURES_ENV)
    if forced is not None:
        return frozenset(forced.replace(",", " ").split())
    return _detected_features()


def cpu_has_bf16() -> bool:
    return bool(BF16_FLAGS & cpu_features())


def cpu_class() -> str:
    """The CPU class ``precision: auto`` was decided for (docs/models.md): Intel AMX, AVX512-BF16 (AMD or
    Intel), AVX-512, AVX2, or other; from :func:`cpu_features` (so ``$STAGEBENCH_CPU_FEATURES`` sets it)."""
    f = cpu_features()
    vendor = next((x.partition("=")[2] for x in f if x.startswith("vendor=")), "")
    who = {"AuthenticAMD": "AMD ", "GenuineIntel": "Intel "}.get(vendor, "")
    if "amx_bf16" in f:
        return f"{who}AMX"
    if "avx512_bf16" in f:
        return f"{who}AVX512-BF16"
    if "avx512f" in f:
        return f"{who}AVX-512"
    return f"{who}AVX2" if "avx2" in f else f"{who}CPU without AVX2".strip()


@dataclass(frozen=True)
class Placement:
    """A resolved device and precision, and why (for the log and the manifest)."""

    device: str  # cpu | cuda:N | mps
    precision: str  # fp32 | bf16 | fp16 | int8
    why: str

    @property
    def kind(self) -> str:
        """The device type torch's autocast takes: cpu, cuda or mps."""
        return self.device.split(":")[0]

    def key(self) -> dict:
        """What can change the bits of an output: the device type and the precision."""
        return {"device": self.kind, "precision": self.precision}


def _torch_or_none():
    try:
        return need("torch", "device detection")
    except StagebenchError:
        return None


def gpu_possible(platform: str = sys.platform, dev: Path = Path("/dev")) -> bool:
    """Whether torch could see a GPU here, answered without importing torch (about 1.5 s of every command
    that places a model, a fully cached run's too): on Linux a GPU needs its driver's device nodes (CUDA:
    ``/dev/nvidia*``, under WSL ``/dev/dxg``; ROCm: ``/dev/kfd``), so without them ``auto`` is the CPU; on
    other systems (macOS's MPS, Windows) torch is asked."""
    if not platform.startswith("linux"):
        return True
    return (dev / "dxg").exists() or (dev / "kfd").exists() or any(dev.glob("nvidia*"))


def resolve_device(spec: str) -> str:
    if spec == "cpu" or (spec == "auto" and not gpu_possible()):
        return "cpu"
    torch = _torch_or_none()
    if spec == "auto":
        if torch is not None and torch.cuda.is_available():
            return "cuda:0"
        if torch is not None and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if spec.startswith("cuda"):
        n = torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0
        index = int(spec.partition(":")[2] or 0)
        if n == 0:
            raise StagebenchError(f"device {spec}: no CUDA device is available here (torch "
                                  f"{getattr(torch, '__version__', 'not installed')}); use device: auto or cpu")  # fmt: skip
        if index >= n:
            raise StagebenchError(f"device {spec}: only {n} CUDA device(s) here (cuda:0 .. cuda:{n - 1})")
        return f"cuda:{index}"
    if spec == "mps":
        if torch is None or not torch.backends.mps.is_available():
            raise StagebenchError("device mps: Apple's MPS is not available here; use device: auto or cpu")
        return "mps"
    raise StagebenchError(f"device {spec!r}: must be auto, cpu, cuda, cuda:N or mps")


#: what a model does, which decides what ``precision: auto`` was measured to keep: a bi-encoder
#: (dense), a cross-encoder, or a generator (an LLM reranker or judge)
ROLES = ("bi_encoder", "cross_encoder", "generator")


def place(device: str, precision: str, backend: str, what: str, role: str = "cross_encoder") -> Placement:
    """Resolve ``device``/``precision`` for a model of ``backend`` (``torch`` or ``onnx``) that
    plays ``role`` (:data:`ROLES`): ``auto`` picks only batch-invariant paths - a torch model at fp32
    on every CPU class (bf16 autocast is batch-dependent: ``precision: bf16`` asks for it), a
    dynamically quantized ONNX graph at per-token INT8 on a CPU. Which model runs at the
    placement (a torch bi-encoder on a CPU runs exported to ONNX) is
    :func:`stagebench.models.variants.variant_recipe`'s business."""
    if role not in ROLES:
        raise StagebenchError(f"{what}: unknown model role {role!r}")
    if precision not in PRECISIONS:
        raise StagebenchError(f"{what}: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    dev = resolve_device(device)
    kind = dev.split(":")[0]
    if backend not in BACKENDS:
        raise StagebenchError(f"{what}: unknown model backend {backend!r}")
    if precision == "int8-token":
        if kind != "cpu":
            raise StagebenchError(f"{what}: precision int8-token runs on the CPU (onnxruntime); on {dev} use fp32, bf16 or fp16")
        if role == "generator":
            raise StagebenchError(f"{what}: precision int8-token is for the encoders (dense, cross_encoder)")
        return Placement(dev, "int8-token", "as configured: INT8 with per-token activation scales (batch-invariant)")
    if backend != "torch":
        return _place_onnx(dev, kind, precision, backend == "onnx-dynamic-int8", what)
    if precision == "auto":
        why = (kind if kind != "cpu" else
               f"{cpu_class()}: fp32 (exported to ONNX) is batch-invariant; bf16 in fixed batch shapes is too, but "
               "measured no faster than the fp32 export on AMD AVX512-BF16 CPUs (precision: bf16 to ask for it)"
               if role != "generator" else "bf16 not measured for this model kind")  # fmt: skip
        return Placement(dev, "fp32", f"auto: {why}: fp32")
    if precision == "fp16" and kind == "cpu":
        raise StagebenchError(f"{what}: precision fp16 is for GPUs; on a CPU use bf16 (native on "
                              "AVX512-BF16/AMX CPUs), fp32 or int8")  # fmt: skip
    if precision == "int8" and kind != "cpu":
        raise StagebenchError(f"{what}: precision int8 (dynamic INT8 quantization) runs on the CPU only")
    if precision == "bf16" and kind == "cpu" and not cpu_has_bf16():
        log.warning("%s: bf16 asked for on a CPU without native bf16: it is emulated and slower than fp32", what)
    return Placement(dev, precision, "as configured")


def _place_onnx(dev: str, kind: str, precision: str, dynamic: bool, what: str) -> Placement:
    if precision in ("bf16", "fp16") and not dynamic:
        raise StagebenchError(f"{what}: an ONNX model runs at fp32, int8 (its own dynamic INT8) or int8-token; "
                              f"precision {precision} needs a torch model (a local folder or source: hub)")  # fmt: skip
    if precision in ("bf16", "fp16"):
        if precision == "fp16" and kind == "cpu":
            raise StagebenchError(f"{what}: precision fp16 is for GPUs; on a CPU use bf16, int8-token or fp32")
        if precision == "bf16" and kind == "cpu" and not cpu_has_bf16():
            log.warning("%s: bf16 asked for on a CPU without native bf16: it is emulated and slower than fp32", what)
        return Placement(dev, precision, f"as configured: the INT8 graph's weights dequantized into torch, {precision} "
                                         "autocast in fixed batch shapes")  # fmt: skip
    if precision == "auto":
        if dynamic and kind == "cpu":
            return Placement(dev, "int8-token", "auto: the dynamic INT8 ONNX graph with one activation scale per token "
                                                "(batch-invariant; within 0.002 nDCG@10 of fp32, docs/models.md)")  # fmt: skip
        if dynamic:
            return Placement(dev, "fp32", f"auto: on {kind}, the INT8 graph's weights dequantized (batch-invariant; "
                                          "int8-token runs on the CPU only)")  # fmt: skip
        return Placement(dev, "fp32", "auto: the ONNX model's own precision (fp32)")
    if precision == "int8":
        if not dynamic:
            raise StagebenchError(f"{what}: precision int8 runs an ONNX graph's own dynamic INT8, and this graph has none; "
                                  "int8-token quantizes it (per-channel weights, per-token activations)")  # fmt: skip
        return Placement(dev, "int8", "as configured: the ONNX graph's dynamic INT8, one activation scale per batch "
                                      "(batch-dependent)")  # fmt: skip
    return Placement(dev, "fp32", "as configured" + (": the INT8 graph's weights dequantized" if dynamic else ""))


def gpu_worker_placement(precision: str, backend: str, what: str) -> Placement:
    """The placement of a model that runs on Ray workers holding a GPU each (``num_gpus_per_worker``
    > 0): ``cuda:0`` is the GPU Ray gave the worker, whatever the driver has. ``auto`` precision
    is what it is for a local GPU (fp32; ONNX models: their own)."""
    if precision not in PRECISIONS:
        raise StagebenchError(f"{what}: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "int8-token":
        raise StagebenchError(f"{what}: precision int8-token runs on the CPU (onnxruntime); the Ray workers have GPUs "
                              "(num_gpus_per_worker > 0)")  # fmt: skip
    if backend != "torch":
        pl = _place_onnx("cuda:0", "cuda", precision, backend == "onnx-dynamic-int8", what)
        return Placement("cuda:0", pl.precision, f"{pl.why}, on the Ray workers' GPUs")
    if precision == "int8":
        raise StagebenchError(f"{what}: precision int8 (dynamic INT8 quantization) runs on the CPU only; "
                              "the Ray workers have GPUs (num_gpus_per_worker > 0)")  # fmt: skip
    p = "fp32" if precision == "auto" else precision
    return Placement("cuda:0", p, f"{'auto: GPU: fp32' if precision == 'auto' else 'as configured'}, "
                                  "on the Ray workers' GPUs (num_gpus_per_worker)")


def autocast_dtype(placement: Placement):
    """The torch dtype ``placement``'s arithmetic runs at under autocast (bf16, fp16), or None: fp32 (and int8,
    whose quantized layers are their own) runs without autocast."""
    torch = need("torch", "mixed precision")
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(placement.precision)


def weights_dtype(placement: Placement):
    """The dtype a torch model's weights are loaded in at ``placement``: half precision on a GPU at bf16/fp16
    (fp16 runs on GPUs only), float32 otherwise (a CPU's bf16 is autocast over fp32 weights)."""
    torch = need("torch", "mixed precision")
    if placement.precision == "fp16" or (placement.precision == "bf16" and placement.kind != "cpu"):
        return autocast_dtype(placement)
    return torch.float32


def autocast(placement: Placement):
    """The context that runs a torch model at ``placement``'s precision (bf16/fp16 autocast),
    or a no-op context for fp32 and int8."""
    torch = need("torch", "mixed precision")
    dtype = autocast_dtype(placement)
    return torch.autocast(placement.kind, dtype=dtype, enabled=dtype is not None)


def onnx_providers(device: str) -> tuple[list[str], str]:
    """onnxruntime execution providers for a resolved device, and a line for the log: CUDA's
    when the device is a GPU and onnxruntime-gpu is installed, else the CPU's."""
    ort = need("onnxruntime", "an ONNX model")
    if device.startswith("cuda"):
        if "CUDAExecutionProvider" in ort.get_available_providers():
            index = int(device.partition(":")[2] or 0)
            return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"], f"onnxruntime CUDA ({device})"  # type: ignore[list-item]
        return ["CPUExecutionProvider"], (f"onnxruntime CPU: the device is {device} but this onnxruntime has no CUDA "
                                          "provider (pip install onnxruntime-gpu)")  # fmt: skip
    return ["CPUExecutionProvider"], "onnxruntime CPU"
