"""Our converter from a PyTorch module to a TensorRT network, through the network definition API.

Owns: walking the module's torch.fx graph and emitting TensorRT layers, the network patterns
the product measures, the builder configuration (precision, optimization level, static or
dynamic shapes, timing cache, refit, int8 calibration) and refitting a built engine.

Network modes (option `trt_mode`): each reproduces what one Torch-TensorRT release's dynamo
converters emit for a Conv2d and a BatchNorm2d, so a regression and its fix can be measured
one change at a time (upstream files: py/torch_tensorrt/dynamo/conversion/impl/conv.py and
impl/normalization/ops.py, at the release tags v2.6.0, v2.7.0 and v2.8.0):
- `trt-2.6`: conv kernel and bias handed to add_convolution_nd as `trt.Weights` (2.6 turns
  them into numpy arrays in the input's dtype); BatchNorm as elementwise arithmetic on
  constants: gamma, beta, mean and var as rank-1 constants, eps as a rank-0 constant, then
  var+eps, sqrt, gamma/std, mean*scale, beta-that, two shuffles to (1, C, 1, 1), x*scale and
  +shift. Torch-TensorRT's binary elementwise helper first prepends ones to the lower-rank
  operand (a shuffle) and, where neither operand has a dynamic dimension, expands both to
  one shape with a stride-0 slice; both steps are reproduced, so eps costs a shuffle and a
  slice and, with static shapes, x*scale and +shift a slice each.
- `trt-2.7`: the same BatchNorm; conv kernel and bias become constant layers (in the input's
  dtype) wired in with `set_input(1)` / `set_input(2)` and empty `trt.Weights` on the layer:
  the 2.7 regression, where the builder no longer saw conv weights as weights.
- `trt-2.8`: conv weights back to `trt.Weights`; BatchNorm, when all its parameters are
  tensors of the module, folded on the host into one `add_scale_nd(CHANNEL)` with shift,
  scale and a power of ones, channel axis 1: the fix.
Every mode carries weights in the input's dtype and adds no cast layers, as those releases
did. Not reproduced: upstream makes eps a float32 constant whatever the input's dtype, so in
half precision its type promotion inserts casts; here eps takes the input's dtype.

Weight representations (`spec.weights`, the product's axis) and the modes they build:
- `constant` is `trt-2.8` (the default for it; `trt-2.6` may be asked for).
- `tensor` is `trt-2.7`: so constant-vs-tensor compares 2.8 with 2.7, which changes the
  conv wiring AND the BatchNorm pattern. The conv change alone is `trt-2.6` vs `trt-2.7`.
- `refit`: any mode (default `trt-2.8`) plus the REFIT builder flag and a name on every
  weight (`network.set_weights_name`), so `refit_engine` can swap weights without a rebuild.

`trt` (the tensorrt module) is passed in rather than imported: production passes the real
module, the unit tests pass tests/benchmarks/trt_standin.py, which records and evaluates
what we build. The objects it returns are annotated with the `tensorrt` stubs' classes
(tensorrt-stubs, see scripts/trt_stubs.py), so mypy checks every call made on them.
"""

from __future__ import annotations

import hashlib
import operator
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

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


# --------------------------------------------------------------------------------------
# entry points


def build_network(
    trt: Any,
    model: nn.Module,
    example_shape: Sequence[int],
    spec: BenchSpec,
    *,
    io_dtype: torch.dtype | None = None,
) -> ConversionReport:
    """Convert `model` into a configured TensorRT network (not yet built).

    `io_dtype` is the dtype of the tensor run() will be given (default: the spec's precision).
    """
    options = ConverterOptions.for_spec(spec)
    report = start_network(trt, spec, options, io_dtype=io_dtype, path="network")
    graph_module = _trace(model)
    emitter = _Emitter(trt, report, graph_module, options)
    emitter.emit(example_shape, dynamic=spec.shape_mode == "dynamic")
    configure(trt, report, spec, options, example_shape)
    return report


def start_network(
    trt: Any,
    spec: BenchSpec,
    options: ConverterOptions,
    *,
    io_dtype: torch.dtype | None,
    path: str,
) -> ConversionReport:
    """Logger, builder, empty network and config: shared by our converter and the ONNX path."""
    dtype = io_dtype or _precision_dtype(spec.precision)
    # TensorRT 11 dropped weakly typed networks (and the FP16/BF16 flags with them): there
    # the types of the weights and inputs alone decide precision.
    weak_available = hasattr(trt.BuilderFlag, "FP16")
    strong = options.strongly_typed or not weak_available
    if spec.precision == "int8" and strong:
        # implicit quantization (the INT8 flag and a calibrator) needs a weakly typed
        # network; TensorRT 11 has none, and strongly typed networks need explicit Q/DQ
        raise ConversionError("int8 through a calibrator needs a weakly typed network "
                              "(TensorRT 10, option strongly_typed false)")
    logger = make_logger(trt)
    builder: tensorrt.Builder = trt.Builder(logger)
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strong else 0
    network = builder.create_network(flags)
    config = builder.create_builder_config()
    # Torch-TensorRT 2.6-2.8 convert weights to the input's dtype (to_numpy / to_torch with
    # dtype=input.dtype in impl/conv.py): no cast layers, strongly typed or not
    return ConversionReport(
        logger=logger, builder=builder, network=network, config=config, path=path,
        weights=spec.weights, mode=options.mode_for(spec.weights),
        typing="strong" if strong else "weak", io_dtype=dtype, weight_dtype=dtype,
        optimization_level=options.optimization_level, fold_bn=options.fold_bn,
    )


def configure(
    trt: Any,
    report: ConversionReport,
    spec: BenchSpec,
    options: ConverterOptions,
    example_shape: Sequence[int],
) -> None:
    """Builder flags, optimization level, profile, timing cache, inspector verbosity."""
    config = report.config
    config.builder_optimization_level = options.optimization_level
    # DETAILED so the engine inspector lists every fused layer with its type (evidence)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if options.workspace_mb is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mb << 20)
    flags: list[str] = []
    if report.typing == "weak":
        # strongly typed networks refuse precision flags: there the types already say it
        if spec.precision == "fp16":
            flags.append("FP16")
        elif spec.precision == "bf16":
            flags.append("BF16")
        elif spec.precision == "int8":
            # FP16 as well, so layers without an int8 kernel fall back to half, not fp32
            flags += ["INT8", "FP16"]
    if spec.weights == "refit":
        flags.append("REFIT")
    for name in flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    report.builder_flags = flags

    if spec.precision == "int8":
        calibrator = make_calibrator(trt, calibration_batches(spec, example_shape))
        config.int8_calibrator = calibrator
        report.keepalive.append(calibrator)  # TensorRT holds a raw pointer until the build
        report.notes.update(int8_calibrator="IInt8EntropyCalibrator2",
                            int8_calibration_batches=CALIBRATION_BATCHES,
                            int8_calibration_seed=spec.seed + 1000)

    if spec.shape_mode == "dynamic":
        batch = int(example_shape[0])
        rest = [int(d) for d in example_shape[1:]]
        shapes = {"min": [1, *rest], "opt": [batch, *rest], "max": [2 * batch, *rest]}
        profile = report.builder.create_optimization_profile()
        profile.set_shape(INPUT_NAME, tuple(shapes["min"]), tuple(shapes["opt"]),
                          tuple(shapes["max"]))
        if config.add_optimization_profile(profile) < 0:
            raise ConversionError(f"TensorRT refused the optimization profile {shapes}")
        report.profile = shapes

    path = timing_cache_path(trt, spec, options)
    if path is not None:
        data = path.read_bytes() if path.is_file() else b""
        cache = config.create_timing_cache(data)
        if not config.set_timing_cache(cache, False):
            raise ConversionError(f"timing cache {path}: TensorRT refused it (other version?)")
        report.timing_cache_path = str(path)
        report.timing_cache_loaded = bool(data)
        report.timing_cache_loaded_digest = timing_cache_digest(data)


def timing_cache_path(trt: Any, spec: BenchSpec, options: ConverterOptions) -> Path | None:
    """The timing cache a build loads and saves, if any.

    TensorRT picks each layer's tactic by timing the candidates, so timing noise alone can
    make two builds of one network run different kernels. A timing cache replays the first
    build's picks: pinned builds share one per host (benchmarks.build.tuning_cache_file,
    keyed by TensorRT version and GPU), so every build there runs what the first one chose.
    As-shipped builds get none and time afresh, as a user's fresh build does. A cache the
    options name is used either way: sharing it is then the user's choice.
    """
    from benchmarks import build

    if options.timing_cache is not None:
        return Path(options.timing_cache)
    if spec.timing.builds != "pinned":
        return None
    return build.tuning_cache_file("tensorrt", str(getattr(trt, "__version__", "unknown")),
                                   "timing-cache")


def save_timing_cache(config: tensorrt.IBuilderConfig, cache: tensorrt.ITimingCache,
                      path: Path, loaded_digest: str | None) -> bool:
    """Write `cache` to `path`, first combining what another build saved there since this
    one loaded it (`loaded_digest`: of the bytes it loaded); True if that happened.

    Workers on one host build at the same time from the same file: without the merge the
    last to finish would replace the file with its own entries and drop the other's. Read,
    combine and replace happen under a lock on a file beside the cache, so no save lands
    between this one's read and its write; the replace is atomic, so a build that loads
    the cache meanwhile (without the lock) reads either the old file or the new one.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = False
        current = path.read_bytes() if path.is_file() else b""
        if current and timing_cache_digest(current) != loaded_digest:
            # combine refuses another TensorRT version's or another device's cache (False):
            # the file's name rules both out, so such a file is foreign and ours replaces it
            merged = bool(cache.combine(config.create_timing_cache(current), False))
        data = bytes(memoryview(cache.serialize()))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # atomic: a concurrent build never reads half a cache
    return merged


def timing_cache_digest(data: bytes) -> str:
    """Tells whether a cache file changed since a build loaded it, without keeping the
    bytes (a large network's cache runs to megabytes) for as long as the build takes."""
    return hashlib.sha256(data).hexdigest()


def build_plan(trt: Any, report: ConversionReport) -> BuiltPlan:
    """Build the serialized engine, timed; then save the timing cache if the build has one."""
    start = time.perf_counter()
    plan = report.builder.build_serialized_network(report.network, report.config)
    seconds = time.perf_counter() - start
    if plan is None:
        errors = "; ".join(getattr(report.logger, "errors", [])[-3:])
        raise ConversionError("TensorRT could not build an engine" +
                              (f": {errors}" if errors else " (no error was logged)"))
    saved = merged = False
    if report.timing_cache_path is not None:
        # the build added its newly timed tactics to the config's cache
        merged = save_timing_cache(report.config, report.config.get_timing_cache(),
                                   Path(report.timing_cache_path),
                                   report.timing_cache_loaded_digest)
        saved = True
    return BuiltPlan(plan=plan, seconds=seconds, nbytes=memoryview(plan).nbytes,
                     timing_cache_saved=saved, timing_cache_merged=merged)


def refit_engine(
    trt: Any,
    engine: Any,
    model: nn.Module,
    *,
    weight_dtype: torch.dtype = torch.float32,
    fold_bn: bool = False,
    mode: str = "trt-2.8",
) -> int:
    """Refit a refittable engine with `model`'s current weights; returns how many were set.

    Weights are derived exactly as `build_network` derived them (same names, same BN
    arithmetic), so `weight_dtype`, `fold_bn` and `mode` must match the build.
    """
    values = named_weight_values(model, fold_bn=fold_bn, mode=mode)
    logger = make_logger(trt)
    refitter: tensorrt.Refitter = trt.Refitter(engine, logger)
    keep: list[Any] = []
    count = 0
    engine_names = list(refitter.get_all_weights())
    if not engine_names:
        raise ConversionError("refit: the engine has no refittable weights "
                              "(built without the REFIT flag?)")
    for name in engine_names:
        if name not in values:
            continue  # not one of ours; get_missing_weights() says if TensorRT needs it
        weights = _to_weights(trt, values[name], weight_dtype, keep)
        if not refitter.set_named_weights(name, weights):
            raise ConversionError(f"refit: TensorRT refused weights {name!r}")
        count += 1
    missing = list(refitter.get_missing_weights())
    if missing:
        raise ConversionError(f"refit: weights still missing: {', '.join(missing[:5])}")
    if not refitter.refit_cuda_engine():
        errors = "; ".join(getattr(logger, "errors", [])[-3:])
        raise ConversionError("refit: TensorRT could not refit the engine" +
                              (f": {errors}" if errors else ""))
    return count


def named_weight_values(model: nn.Module, *, fold_bn: bool = False,
                        mode: str = "trt-2.8") -> dict[str, torch.Tensor]:
    """Every named weight a `refit` network of `mode` carries, from the model's state.

    Names follow the module paths: '<conv>.weight'/'<conv>.bias' (BN folded in when
    `fold_bn`), '<linear>.weight'/'<linear>.bias', and for BatchNorm '<bn>.scale',
    '<bn>.shift', '<bn>.power' (trt-2.8) or '<bn>.weight', '<bn>.bias',
    '<bn>.running_mean', '<bn>.running_var', '<bn>.eps' (trt-2.6, trt-2.7).
    """
    return _graph_weight_values(_trace(model), fold_bn=fold_bn, mode=mode)


def batchnorm_constants(bn: nn.BatchNorm2d) -> dict[str, torch.Tensor]:
    """The five constants of the elementwise BatchNorm (trt-2.6/2.7), by role; eps rank 0."""
    if bn.running_mean is None or bn.running_var is None:
        raise ConversionError("BatchNorm2d without running statistics cannot be converted")
    channels = int(bn.num_features)
    return {
        "weight": bn.weight.detach() if bn.weight is not None else torch.ones(channels),
        "bias": bn.bias.detach() if bn.bias is not None else torch.zeros(channels),
        "running_mean": bn.running_mean.detach(),
        "running_var": bn.running_var.detach(),
        "eps": torch.tensor(float(bn.eps)),
    }


def _graph_weight_values(
    graph_module: torch.fx.GraphModule, *, fold_bn: bool, mode: str
) -> dict[str, torch.Tensor]:
    folds = _bn_folds(graph_module) if fold_bn else {}
    values: dict[str, torch.Tensor] = {}
    for node in graph_module.graph.nodes:
        if node.op != "call_module":
            continue
        module = graph_module.get_submodule(node.target)
        if isinstance(module, nn.Conv2d):
            bn = folds.get(node)
            kernel, bias = conv_parameters(module, bn[1] if bn else None)
            values[f"{node.target}.weight"] = kernel
            if bias is not None:
                values[f"{node.target}.bias"] = bias
        elif isinstance(module, nn.BatchNorm2d) and not any(
            n is node for n, _ in folds.values()
        ):
            if mode == "trt-2.8":
                scale, shift = batchnorm_scale_shift(module)
                values[f"{node.target}.scale"] = scale
                values[f"{node.target}.shift"] = shift
                values[f"{node.target}.power"] = torch.ones_like(scale)
            else:
                for role, value in batchnorm_constants(module).items():
                    values[f"{node.target}.{role}"] = value
        elif isinstance(module, nn.Linear):
            values[f"{node.target}.weight"] = module.weight.detach()
            if module.bias is not None:
                values[f"{node.target}.bias"] = module.bias.detach().reshape(1, -1)
    return values


# --------------------------------------------------------------------------------------
# arithmetic shared by build and refit


def batchnorm_scale_shift(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode BN as y = x*scale + shift, per channel, computed in float64."""
    if bn.running_mean is None or bn.running_var is None:
        raise ConversionError("BatchNorm2d without running statistics cannot be converted")
    mean = bn.running_mean.detach().double()
    var = bn.running_var.detach().double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)
    shift = beta - mean * scale
    return scale.float(), shift.float()


def conv_parameters(
    conv: nn.Conv2d, bn: nn.BatchNorm2d | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The conv's kernel and bias, with a following BN folded in when given."""
    kernel = conv.weight.detach()
    bias = conv.bias.detach() if conv.bias is not None else None
    if bn is None:
        return kernel, bias
    scale, shift = batchnorm_scale_shift(bn)
    folded = (kernel.double() * scale.double().reshape(-1, 1, 1, 1)).float()
    base = bias.double() if bias is not None else torch.zeros_like(scale, dtype=torch.float64)
    return folded, (base * scale.double() + shift.double()).float()


# --------------------------------------------------------------------------------------
# int8 calibration

CALIBRATION_BATCHES = 8


def calibration_batches(spec: BenchSpec, shape: Sequence[int]) -> list[torch.Tensor]:
    """A seeded calibration set drawn like the benchmark's input (seed spec.seed + 1000, so
    never the timed image), on the spec's device: get_batch hands TensorRT device pointers."""
    generator = torch.Generator().manual_seed(spec.seed + 1000)
    device = "cuda" if spec.device == "cuda" else "cpu"
    return [torch.randn(tuple(int(d) for d in shape), generator=generator).to(device)
            for _ in range(CALIBRATION_BATCHES)]


def make_calibrator(trt: Any, batches: list[torch.Tensor]) -> Any:
    """An IInt8EntropyCalibrator2 over `batches`, to TensorRT's documented Python API: the
    subclass calls the base __init__, get_batch_size() returns the batch, get_batch(names)
    returns one device pointer per input name (None when the set is exhausted), and
    read/write_calibration_cache keep the cache in memory (None: calibrate)."""

    class _Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.batches = batches
            self.index = 0
            self.cache: bytes | None = None

        def get_batch_size(self) -> int:
            return int(self.batches[0].shape[0]) if self.batches else 1

        def get_batch(self, names: list[str]) -> list[int] | None:
            if self.index >= len(self.batches) or names != [INPUT_NAME]:
                return None
            batch = self.batches[self.index]
            self.index += 1
            return [int(batch.data_ptr())]

        def read_calibration_cache(self) -> bytes | None:
            return self.cache

        def write_calibration_cache(self, cache: Any) -> None:
            self.cache = bytes(memoryview(cache))

    return _Calibrator()


# --------------------------------------------------------------------------------------
# helpers


def make_logger(trt: Any) -> Any:
    """A TensorRT logger that also keeps error messages, so a failed build can say why."""

    class _KeepingLogger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if getattr(severity, "name", str(severity)).endswith("ERROR"):
                self.errors.append(str(msg))

    return _KeepingLogger()


def trt_dtype(trt: Any, dtype: torch.dtype) -> Any:
    table = {torch.float32: trt.float32, torch.float16: trt.float16,
             torch.bfloat16: trt.bfloat16}
    if dtype not in table:
        raise ConversionError(f"dtype {dtype} has no TensorRT counterpart here")
    return table[dtype]


def _precision_dtype(precision: str) -> torch.dtype:
    # int8: the network's input, output and weights stay float32; the INT8 flag and the
    # calibrator let the builder choose int8 kernels
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
             "int8": torch.float32}
    if precision not in table:
        raise ConversionError(f"precision: {precision!r} is not one of fp32, fp16, bf16")
    return table[precision]


def _to_weights(trt: Any, value: torch.Tensor, dtype: torch.dtype, keep: list[Any]) -> Any:
    """trt.Weights over a contiguous CPU copy of `value` in `dtype`, kept alive in `keep`.

    numpy has no bfloat16, so bf16 goes through the (type, pointer, count) constructor over
    a torch CPU tensor; the tensor itself is what stays alive.
    """
    host = value.detach().to(device="cpu", dtype=dtype).contiguous()
    if dtype in _NUMPY_DTYPES:
        array = np.ascontiguousarray(host.numpy())
        keep.append(array)
        return trt.Weights(array)
    if dtype == torch.bfloat16:
        keep.append(host)
        return trt.Weights(trt.bfloat16, host.data_ptr(), host.numel())
    raise ConversionError(f"weights of dtype {dtype} are not supported")


def _trace(model: nn.Module) -> torch.fx.GraphModule:
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many types; all mean "cannot walk this model"
        raise ConversionError(
            f"cannot trace {type(model).__name__} with torch.fx: {type(exc).__name__}: {exc}"
        ) from exc


def _bn_folds(gm: torch.fx.GraphModule) -> dict[Any, tuple[Any, nn.BatchNorm2d]]:
    """conv node -> (bn node, bn) where a BatchNorm2d is the conv's only consumer."""
    folds: dict[Any, tuple[Any, nn.BatchNorm2d]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_module" or not isinstance(gm.get_submodule(node.target), nn.Conv2d):
            continue
        users = list(node.users)
        if len(users) == 1 and users[0].op == "call_module":
            bn = gm.get_submodule(users[0].target)
            if isinstance(bn, nn.BatchNorm2d) and users[0].args[0] is node:
                folds[node] = (users[0], bn)
    return folds


def _op_label(target: Any) -> str:
    """A readable name for an FX call target: 'speedwatch::opaque_identity', 'torch.cat'."""
    qualified = getattr(target, "_qualified_op_name", None)  # torch.ops packet
    if isinstance(qualified, str):
        return qualified
    schema = getattr(target, "_schema", None)  # torch.ops overload
    if schema is not None:
        return str(schema.name)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or str(target)
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    return f"{module}.{name}" if module else name


def _shape(tensor: Any) -> tuple[int, ...]:
    """An ITensor's dimensions as known while the network is built (-1: dynamic)."""
    return tuple(int(d) for d in tensor.shape)


def _pair(value: int | Sequence[int], what: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
        isinstance(v, int) for v in value
    ):
        return (int(value[0]), int(value[1]))
    raise ConversionError(f"{what}: {value!r} is not an int or a pair of ints")


# --------------------------------------------------------------------------------------
# the graph walk


class _Emitter:
    """Turns FX nodes into TensorRT layers, one converter per module type or function."""

    def __init__(self, trt: Any, report: ConversionReport, gm: torch.fx.GraphModule,
                 options: ConverterOptions) -> None:
        self.trt = trt
        self.report = report
        self.gm = gm
        self.network: tensorrt.INetworkDefinition = report.network
        self.mode = report.mode  # trt-2.6 / trt-2.7 / trt-2.8
        self.refit = report.weights == "refit"
        self.folds = _bn_folds(gm) if options.fold_bn else {}
        self.folded_bn_nodes = {bn_node for bn_node, _ in self.folds.values()}
        self.counts: Counter[str] = Counter()
        self.layer_names: Counter[str] = Counter()
        self.unnamed: list[tuple[Any, str]] = []
        self.values: dict[Any, Any] = {}

    # ---- bookkeeping

    def _layer(self, kind: str, layer: Any, name: str) -> Any:
        """Counts by the API we called; `layer.type` would not do (pooling and activation
        layers shadow it with their own `type` attribute)."""
        if layer is None:
            raise ConversionError(f"TensorRT refused the {kind} layer for {name}")
        self.counts[kind] += 1
        for weights, weights_name in self.unnamed:
            if not self.network.set_weights_name(weights, weights_name):
                raise ConversionError(f"TensorRT refused the weights name {weights_name!r}")
            self.report.weight_names.append(weights_name)
        self.unnamed.clear()
        base = f"{name}/{kind.lower()}"
        seen = self.layer_names[base]
        self.layer_names[base] += 1
        layer.name = f"{base}_{seen}" if seen else base  # unique, as the inspector needs
        return layer

    def _weights(self, value: torch.Tensor, name: str, wiring: str) -> Any:
        weights = _to_weights(self.trt, value, self.report.weight_dtype, self.report.keepalive)
        self.report.weight_wiring[name] = wiring
        if self.refit:
            # TensorRT names weights only once a layer uses them: _layer() names these
            self.unnamed.append((weights, name))
        return weights

    def _empty(self) -> Any:
        return self.trt.Weights(trt_dtype(self.trt, self.report.weight_dtype))

    def _constant(self, value: torch.Tensor, name: str, wiring: str,
                  shape: Sequence[int] | None = None) -> Any:
        dims = tuple(int(d) for d in (shape if shape is not None else value.shape))
        weights = self._weights(value.reshape(dims), name, wiring)
        layer = self._layer("CONSTANT", self.network.add_constant(dims, weights), name)
        return layer.get_output(0)

    # ---- the walk

    def emit(self, example_shape: Sequence[int], *, dynamic: bool) -> None:
        trt, report = self.trt, self.report
        shape = [int(d) for d in example_shape]
        if len(shape) != 4:
            raise ConversionError(f"input shape {shape}: expected NCHW")
        if dynamic:
            shape[0] = -1
        outputs: list[Any] = []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                if self.values:
                    raise ConversionError("models with more than one input are not supported")
                tensor = self.network.add_input(INPUT_NAME, trt_dtype(trt, report.io_dtype),
                                                tuple(shape))
                self.values[node] = tensor
            elif node.op == "call_module":
                self.values[node] = self._module(node)
            elif node.op in ("call_function", "call_method"):
                self.values[node] = self._function(node)
            elif node.op == "get_attr":
                raise UnsupportedOp(f"attribute {node.target}",
                                    "tensors read from module attributes are not converted")
            elif node.op == "output":
                result = node.args[0]
                if not isinstance(result, torch.fx.Node):
                    raise ConversionError("models with more than one output are not supported")
                outputs.append(self.values[result])
        if len(outputs) != 1:
            raise ConversionError("the traced model has no output")
        out = outputs[0]
        out.name = OUTPUT_NAME
        self.network.mark_output(out)
        report.layer_counts = dict(self.counts)

    def _arg(self, node: Any, index: int = 0) -> Any:
        arg = node.args[index]
        if not isinstance(arg, torch.fx.Node):
            raise UnsupportedOp(_describe(node), f"argument {index} is not a tensor")
        return self.values[arg]

    def _module(self, node: Any) -> Any:
        module = self.gm.get_submodule(node.target)
        name = str(node.target)
        x = self._arg(node)
        if node in self.folds and isinstance(module, nn.Conv2d):
            _, bn = self.folds[node]
            return self._conv(name, x, module, bn)
        if node in self.folded_bn_nodes:
            return x  # already inside the conv before it
        converters: dict[type[nn.Module], Callable[[str, Any, Any], Any]] = {
            nn.Conv2d: lambda n, t, m: self._conv(n, t, m, None),
            nn.BatchNorm2d: self._batchnorm,
            nn.ReLU: lambda n, t, m: self._relu(n, t),
            nn.MaxPool2d: self._maxpool,
            nn.AdaptiveAvgPool2d: self._adaptive_avgpool,
            nn.Flatten: self._flatten_module,
            nn.Linear: self._linear,
            nn.Identity: lambda n, t, m: t,
            nn.Dropout: lambda n, t, m: t,  # eval mode
        }
        for cls, convert in converters.items():
            if type(module) is cls:
                return convert(name, x, module)
        raise UnsupportedOp(f"module {type(module).__module__}.{type(module).__name__}",
                            f"at {name}")

    def _function(self, node: Any) -> Any:
        target = node.target
        name = str(node.name)
        if node.op == "call_method":
            if target == "relu":
                return self._relu(name, self._arg(node))
            if target == "flatten":
                return self._flatten(name, self._arg(node), *node.args[1:], **node.kwargs)
            if target == "add":
                return self._add(name, node)
            raise UnsupportedOp(f"Tensor.{target}", f"at {name}")
        if target in (operator.add, operator.iadd, torch.add):
            return self._add(name, node)
        if target in (torch.relu, torch.nn.functional.relu):
            return self._relu(name, self._arg(node))
        if target is torch.flatten:
            return self._flatten(name, self._arg(node), *node.args[1:], **node.kwargs)
        label = _op_label(target)
        if "::" in label and not label.startswith("aten::"):
            raise UnsupportedOp(label, "a custom op; TensorRT would need a plugin for it")
        raise UnsupportedOp(label, f"at {name}")

    # ---- converters

    def _conv(self, name: str, x: Any, conv: nn.Conv2d, bn: nn.BatchNorm2d | None) -> Any:
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise UnsupportedOp("module torch.nn.Conv2d",
                                f"{name}: padding {conv.padding!r}/{conv.padding_mode} "
                                "(only explicit zero padding)")
        kernel, bias = conv_parameters(conv, bn)
        out_channels = int(kernel.shape[0])
        kernel_shape = tuple(int(k) for k in kernel.shape[2:])
        if self.mode in TENSOR_CONV_MODES:
            # 2.7 (impl/conv.py): kernel and bias through get_trt_tensor, i.e. constant
            # layers of the weights' own shape, wired in with set_input; empty Weights
            layer = self.network.add_convolution_nd(x, out_channels, kernel_shape,
                                                    self._empty(), self._empty())
            self._layer("CONVOLUTION", layer, name)
            layer.set_input(1, self._constant(kernel, f"{name}.weight", "tensor"))
            if bias is not None:
                layer.set_input(2, self._constant(bias, f"{name}.bias", "tensor"))
        else:
            kernel_w = self._weights(kernel, f"{name}.weight", "weights")
            bias_w = self._weights(bias, f"{name}.bias", "weights") if bias is not None \
                else self._empty()
            layer = self.network.add_convolution_nd(x, out_channels, kernel_shape, kernel_w,
                                                    bias_w)
            self._layer("CONVOLUTION", layer, name)
        layer.stride_nd = _pair(conv.stride, f"{name}.stride")
        layer.padding_nd = _pair(conv.padding, f"{name}.padding")
        layer.dilation_nd = _pair(conv.dilation, f"{name}.dilation")
        layer.num_groups = int(conv.groups)
        return layer.get_output(0)

    def _batchnorm(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        if self.mode == "trt-2.8":
            return self._batchnorm_scale(name, x, bn)
        return self._batchnorm_elementwise(name, x, bn)

    def _batchnorm_scale(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        """2.8 (impl/normalization/ops.py): parameters folded on the host into scale and
        shift, a power of ones, one add_scale_nd(CHANNEL) on channel axis 1."""
        scale, shift = batchnorm_scale_shift(bn)
        layer = self.network.add_scale_nd(
            x, self.trt.ScaleMode.CHANNEL,
            self._weights(shift, f"{name}.shift", "weights"),
            self._weights(scale, f"{name}.scale", "weights"),
            self._weights(torch.ones_like(scale), f"{name}.power", "weights"),
            1,
        )
        return self._layer("SCALE", layer, name).get_output(0)

    def _batchnorm_elementwise(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        """2.6 and 2.7 (impl/normalization/ops.py): the raw parameters as constants and
        (x * (gamma / sqrt(var + eps))) + (beta - mean * gamma / sqrt(var + eps)); the builder
        must constant-fold the parameter arithmetic before it sees a per-channel scale."""
        trt = self.trt
        op = trt.ElementWiseOperation
        const = {role: self._constant(value, f"{name}.{role}", "constant-layer")
                 for role, value in batchnorm_constants(bn).items()}
        std = self._binary(name, const["running_var"], const["eps"], op.SUM)
        std = self._layer("UNARY", self.network.add_unary(std, trt.UnaryOperation.SQRT),
                          name).get_output(0)
        scale = self._binary(name, const["weight"], std, op.DIV)
        shift = self._binary(name, const["bias"],
                             self._binary(name, const["running_mean"], scale, op.PROD), op.SUB)
        channels = (1, int(bn.num_features), 1, 1)
        scale = self._reshape(name, scale, channels)
        shift = self._reshape(name, shift, channels)
        return self._binary(name, self._binary(name, x, scale, op.PROD), shift, op.SUM)

    def _binary(self, name: str, a: Any, b: Any, kind: Any) -> Any:
        """An elementwise layer as Torch-TensorRT's convert_binary_elementwise builds it
        (impl/elementwise/base.py): ranks made equal by prepending ones to the lower one
        (a shuffle, converter_utils.broadcast) and, where neither operand has a dynamic
        dimension, both expanded to one shape (broadcast_to_same_shape: impl.slice.expand,
        a slice whose stride is 0 along the broadcast dimensions)."""
        a_shape, b_shape = _shape(a), _shape(b)
        if len(a_shape) < len(b_shape):
            a, a_shape = self._prepend_ones(name, a, a_shape, len(b_shape) - len(a_shape))
        elif len(b_shape) < len(a_shape):
            b, b_shape = self._prepend_ones(name, b, b_shape, len(a_shape) - len(b_shape))
        if -1 not in a_shape and -1 not in b_shape and a_shape != b_shape:
            target = tuple(max(p, q) for p, q in zip(a_shape, b_shape, strict=True))
            if a_shape != target:
                a = self._expand(name, a, a_shape, target)
            if b_shape != target:
                b = self._expand(name, b, b_shape, target)
        return self._layer("ELEMENTWISE", self.network.add_elementwise(a, b, kind),
                           name).get_output(0)

    def _prepend_ones(self, name: str, x: Any, shape: tuple[int, ...],
                      count: int) -> tuple[Any, tuple[int, ...]]:
        if -1 in shape:
            # upstream computes the shape with shape layers then; no converter here needs it
            raise ConversionError(f"{name}: broadcasting a dynamically shaped operand")
        dims = (1,) * count + shape
        return self._reshape(name, x, dims), dims

    def _reshape(self, name: str, x: Any, dims: tuple[int, ...]) -> Any:
        layer = self.network.add_shuffle(x)
        self._layer("SHUFFLE", layer, name)
        layer.reshape_dims = dims
        return layer.get_output(0)

    def _expand(self, name: str, x: Any, shape: tuple[int, ...],
                target: tuple[int, ...]) -> Any:
        stride = tuple(int(i == o) for i, o in zip(shape, target, strict=True))
        layer = self.network.add_slice(x, (0,) * len(target), target, stride)
        return self._layer("SLICE", layer, name).get_output(0)

    def _relu(self, name: str, x: Any) -> Any:
        layer = self.network.add_activation(x, self.trt.ActivationType.RELU)
        return self._layer("ACTIVATION", layer, name).get_output(0)

    def _maxpool(self, name: str, x: Any, pool: nn.MaxPool2d) -> Any:
        if pool.ceil_mode or _pair(pool.dilation, f"{name}.dilation") != (1, 1):
            raise UnsupportedOp("module torch.nn.MaxPool2d",
                                f"{name}: ceil_mode or dilation is not supported")
        window = _pair(pool.kernel_size, f"{name}.kernel_size")
        layer = self.network.add_pooling_nd(x, self.trt.PoolingType.MAX, window)
        self._layer("POOLING", layer, name)
        layer.stride_nd = _pair(pool.stride if pool.stride is not None else pool.kernel_size,
                                f"{name}.stride")
        layer.padding_nd = _pair(pool.padding, f"{name}.padding")
        return layer.get_output(0)

    def _adaptive_avgpool(self, name: str, x: Any, pool: nn.AdaptiveAvgPool2d) -> Any:
        size = pool.output_size
        if size not in (1, (1, 1), [1, 1]):
            raise UnsupportedOp("module torch.nn.AdaptiveAvgPool2d",
                                f"{name}: output_size {size!r} (only global pooling, 1x1)")
        axes = (1 << 2) | (1 << 3)  # H and W of NCHW, as TensorRT's reduce bit mask
        layer = self.network.add_reduce(x, self.trt.ReduceOperation.AVG, axes, True)
        return self._layer("REDUCE", layer, name).get_output(0)

    def _flatten_module(self, name: str, x: Any, module: nn.Flatten) -> Any:
        return self._flatten(name, x, module.start_dim, module.end_dim)

    def _flatten(self, name: str, x: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
        if start_dim != 1 or end_dim != -1:
            raise UnsupportedOp("torch.flatten",
                                f"{name}: start_dim={start_dim}, end_dim={end_dim} "
                                "(only flatten(x, 1))")
        layer = self.network.add_shuffle(x)
        self._layer("SHUFFLE", layer, name)
        layer.reshape_dims = (0, -1)  # 0 copies the (possibly dynamic) batch dimension
        return layer.get_output(0)

    def _linear(self, name: str, x: Any, linear: nn.Linear) -> Any:
        """MatMul against a constant, plus a broadcast bias (TensorRT 10 has no FC layer)."""
        trt = self.trt
        weight = self._constant(linear.weight.detach(), f"{name}.weight", "constant-layer")
        layer = self.network.add_matrix_multiply(x, trt.MatrixOperation.NONE, weight,
                                                 trt.MatrixOperation.TRANSPOSE)
        out = self._layer("MATRIX_MULTIPLY", layer, name).get_output(0)
        if linear.bias is None:
            return out
        bias = self._constant(linear.bias.detach(), f"{name}.bias", "constant-layer",
                              (1, int(linear.out_features)))
        add = self.network.add_elementwise(out, bias, trt.ElementWiseOperation.SUM)
        return self._layer("ELEMENTWISE", add, name).get_output(0)

    def _add(self, name: str, node: Any) -> Any:
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
            raise UnsupportedOp(_describe(node), f"{name}: only a + b of two tensors")
        a, b = self._arg(node, 0), self._arg(node, 1)
        layer = self.network.add_elementwise(a, b, self.trt.ElementWiseOperation.SUM)
        return self._layer("ELEMENTWISE", layer, name).get_output(0)


def _describe(node: Any) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return _op_label(node.target)
