"""What our TensorRT converter can be asked (its options, modes and names) and what it
reports (the conversion report, the built plan, its errors)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    import tensorrt

    from benchmarks.spec import BenchSpec




INPUT_NAME = "input"


OUTPUT_NAME = "output"


DEFAULT_OPTIMIZATION_LEVEL = 3


# Options in spec.options this module reads (the backend reads `path` itself).
CONVERTER_OPTIONS = ("optimization_level", "timing_cache", "fold_bn", "strongly_typed",
                     "workspace_mb", "trt_mode")


TRT_MODES = ("trt-2.6", "trt-2.7", "trt-2.8")


# the mode each weight representation builds when `trt_mode` is not given
DEFAULT_MODE = {"constant": "trt-2.8", "tensor": "trt-2.7", "refit": "trt-2.8"}


# conv weights as ITensors (set_input) only in 2.7
TENSOR_CONV_MODES = ("trt-2.7",)


_NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16}


class ConversionError(ValueError):
    """The model or the options cannot become a TensorRT network; the message says why."""


class UnsupportedOp(ConversionError):
    """A graph node has no converter here; `op` names it (e.g. 'speedwatch::opaque_identity')."""

    def __init__(self, op: str, detail: str = "") -> None:
        self.op = op
        message = f"no TensorRT converter for {op}"
        super().__init__(f"{message}: {detail}" if detail else message)


@dataclass(frozen=True)
class ConverterOptions:
    optimization_level: int = DEFAULT_OPTIMIZATION_LEVEL
    timing_cache: str | None = None
    fold_bn: bool = False
    strongly_typed: bool = False
    workspace_mb: int | None = None
    trt_mode: str | None = None  # None: DEFAULT_MODE of the spec's weights

    def mode_for(self, weights: str) -> str:
        """The network mode a spec with these weights builds; ConversionError if they clash."""
        mode = self.trt_mode or DEFAULT_MODE.get(weights)
        if mode is None:
            raise ConversionError(f"weights {weights!r} have no TensorRT network mode")
        if weights == "tensor" and mode not in TENSOR_CONV_MODES:
            raise ConversionError(f"option trt_mode: {mode} hands conv weights over as "
                                  "trt.Weights; weights 'tensor' is trt-2.7")
        if weights == "constant" and mode in TENSOR_CONV_MODES:
            raise ConversionError(f"option trt_mode: {mode} feeds conv weights as tensors; "
                                  "use weights 'tensor' (or 'refit')")
        return mode

    @classmethod
    def for_spec(cls, spec: BenchSpec) -> ConverterOptions:
        """The options, with the spec's opt_level axis as the builder optimization level."""
        if spec.opt_level == "default":
            return cls.from_spec(spec.options)
        if "optimization_level" in spec.options:
            raise ConversionError("opt_level and option optimization_level both given: "
                                  "use opt_level")
        return cls.from_spec({**spec.options, "optimization_level": int(spec.opt_level)})

    @classmethod
    def from_spec(cls, options: dict[str, Any]) -> ConverterOptions:
        level = options.get("optimization_level", DEFAULT_OPTIMIZATION_LEVEL)
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 5:
            raise ConversionError(f"option optimization_level: {level!r} must be an integer 0-5")
        cache = options.get("timing_cache")
        if cache is not None and (not isinstance(cache, str) or not cache):
            raise ConversionError(f"option timing_cache: {cache!r} must be a file path")
        flags = {}
        for name in ("fold_bn", "strongly_typed"):
            value = options.get(name, False)
            if not isinstance(value, bool):
                raise ConversionError(f"option {name}: {value!r} must be true or false")
            flags[name] = value
        workspace = options.get("workspace_mb")
        if workspace is not None and (
            isinstance(workspace, bool) or not isinstance(workspace, int) or workspace <= 0
        ):
            raise ConversionError(f"option workspace_mb: {workspace!r} must be a positive integer")
        mode = options.get("trt_mode")
        if mode is not None and mode not in TRT_MODES:
            raise ConversionError(f"option trt_mode: {mode!r} is not one of "
                                  f"{', '.join(TRT_MODES)}")
        return cls(optimization_level=level, timing_cache=cache, workspace_mb=workspace,
                   trt_mode=mode, **flags)


@dataclass
class ConversionReport:
    """What was built and how: the objects the build needs, and the evidence worth keeping.

    `keepalive` holds every array a `trt.Weights` points into: TensorRT reads them only when
    the engine is built, and a Weights made from an array does not copy it.
    """

    logger: Any
    builder: tensorrt.Builder
    network: tensorrt.INetworkDefinition
    config: tensorrt.IBuilderConfig
    path: str  # "network" (our converter) or "onnx" (TensorRT's ONNX parser)
    weights: str  # constant / tensor / refit
    mode: str  # trt-2.6 / trt-2.7 / trt-2.8 (what the network reproduces)
    typing: str  # "weak" (precision flags) or "strong" (types decide precision)
    io_dtype: torch.dtype
    weight_dtype: torch.dtype
    builder_flags: list[str] = field(default_factory=list)
    optimization_level: int = DEFAULT_OPTIMIZATION_LEVEL
    profile: dict[str, list[int]] | None = None  # min/opt/max input shapes when dynamic
    timing_cache_path: str | None = None
    timing_cache_loaded: bool = False
    timing_cache_loaded_digest: str | None = None  # build_plan merges what changed since
    fold_bn: bool = False
    layer_counts: dict[str, int] = field(default_factory=dict)
    # module parameter (or derived weight) -> "weights" (trt.Weights on the layer),
    # "tensor" (constant layer into set_input) or "constant-layer" (a constant operand)
    weight_wiring: dict[str, str] = field(default_factory=dict)
    weight_names: list[str] = field(default_factory=list)  # names given for refit
    notes: dict[str, Any] = field(default_factory=dict)  # path-specific evidence
    source_path: str | None = None  # the ONNX file the parser read (kept for refit)
    keepalive: list[Any] = field(default_factory=list)

    def evidence(self) -> dict[str, Any]:
        wiring = Counter(self.weight_wiring.values())
        return {
            "trt_path": self.path,
            "trt_mode": self.mode if self.path == "network" else None,
            "trt_typing": self.typing,
            "trt_builder_flags": list(self.builder_flags),
            "trt_optimization_level": self.optimization_level,
            "trt_network_layers": sum(self.layer_counts.values()),
            "trt_network_layers_by_type": dict(self.layer_counts),
            "trt_weight_wiring": dict(wiring),
            "trt_named_weights": len(self.weight_names),
            "trt_dynamic_profile": self.profile,
            "trt_fold_bn": self.fold_bn,
            "trt_timing_cache": self.timing_cache_path,
            "trt_timing_cache_loaded": self.timing_cache_loaded,
            **self.notes,
        }


@dataclass
class BuiltPlan:
    plan: Any  # IHostMemory (buffer protocol)
    seconds: float
    nbytes: int
    timing_cache_saved: bool
    # the save combined entries another build had saved since this one loaded the cache
    timing_cache_merged: bool = False


# entry points
