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
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    import tensorrt

    from benchmarks.spec import BenchSpec

from benchmarks.trt_network import (
    _Emitter,
    _precision_dtype,
    _to_weights,
    _trace,
    make_logger,
    named_weight_values,
)
from benchmarks.trt_options import (
    INPUT_NAME,
    BuiltPlan,
    ConversionError,
    ConversionReport,
    ConverterOptions,
)


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


# helpers
