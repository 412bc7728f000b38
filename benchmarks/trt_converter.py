"""Our converter from a PyTorch module to a TensorRT network, through the network definition API.

Owns: walking the module's torch.fx graph and emitting TensorRT layers, the two weight
representations the product measures, the builder configuration (precision, optimization
level, static or dynamic shapes, timing cache, refit) and refitting a built engine.

Weight representations (the point of the tensorrt backend):
- `constant`: weights handed to the layer as `trt.Weights`, so the builder sees them and may
  fuse Conv+BatchNorm(+ReLU) into one kernel with pre-transformed weights.
- `tensor`: the layer gets EMPTY `trt.Weights` and the weights arrive through
  `layer.set_input(1/2, constant_layer.get_output(0))`, and BatchNorm becomes elementwise
  arithmetic on constant tensors: the pattern Torch-TensorRT 2.7's converters emit, which
  is what the regression series measures.
- `refit`: `constant` wiring plus the REFIT builder flag and a name on every weight
  (`network.set_weights_name`), so `refit_engine` can swap weights without a rebuild.

`trt` (the tensorrt module) is passed in rather than imported: production passes the real
module, the unit tests pass tests/benchmarks/trt_standin.py, which records and evaluates
what we build. Nothing here may touch an attribute of TensorRT the documented TensorRT 10
Python API does not have.
"""

from __future__ import annotations

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
    from benchmarks.spec import BenchSpec

INPUT_NAME = "input"
OUTPUT_NAME = "output"
DEFAULT_OPTIMIZATION_LEVEL = 3

# Options in spec.options this module reads (the backend reads `path` itself).
CONVERTER_OPTIONS = ("optimization_level", "timing_cache", "fold_bn", "strongly_typed",
                     "workspace_mb")

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
        return cls(optimization_level=level, timing_cache=cache, workspace_mb=workspace, **flags)


@dataclass
class ConversionReport:
    """What was built and how: the objects the build needs, and the evidence worth keeping.

    `keepalive` holds every array a `trt.Weights` points into: TensorRT reads them only when
    the engine is built, and a Weights made from an array does not copy it.
    """

    logger: Any
    builder: Any
    network: Any
    config: Any
    path: str  # "network" (our converter) or "onnx" (TensorRT's ONNX parser)
    weights: str  # constant / tensor / refit
    typing: str  # "weak" (precision flags) or "strong" (types decide precision)
    io_dtype: torch.dtype
    weight_dtype: torch.dtype
    builder_flags: list[str] = field(default_factory=list)
    optimization_level: int = DEFAULT_OPTIMIZATION_LEVEL
    profile: dict[str, list[int]] | None = None  # min/opt/max input shapes when dynamic
    timing_cache_path: str | None = None
    timing_cache_loaded: bool = False
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
    options = ConverterOptions.from_spec(spec.options)
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
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strong else 0
    network = builder.create_network(flags)
    config = builder.create_builder_config()
    weight_dtype = _precision_dtype(spec.precision) if strong else torch.float32
    return ConversionReport(
        logger=logger, builder=builder, network=network, config=config, path=path,
        weights=spec.weights, typing="strong" if strong else "weak", io_dtype=dtype,
        weight_dtype=weight_dtype, optimization_level=options.optimization_level,
        fold_bn=options.fold_bn,
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
    if spec.weights == "refit":
        flags.append("REFIT")
    for name in flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    report.builder_flags = flags

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

    if options.timing_cache is not None:
        path = Path(options.timing_cache)
        data = path.read_bytes() if path.is_file() else b""
        cache = config.create_timing_cache(data)
        if not config.set_timing_cache(cache, False):
            raise ConversionError(f"timing cache {path}: TensorRT refused it (other version?)")
        report.timing_cache_path = str(path)
        report.timing_cache_loaded = bool(data)


def build_plan(trt: Any, report: ConversionReport) -> BuiltPlan:
    """Build the serialized engine, timed; then save the timing cache if one was asked for."""
    start = time.perf_counter()
    plan = report.builder.build_serialized_network(report.network, report.config)
    seconds = time.perf_counter() - start
    if plan is None:
        errors = "; ".join(getattr(report.logger, "errors", [])[-3:])
        raise ConversionError("TensorRT could not build an engine" +
                              (f": {errors}" if errors else " (no error was logged)"))
    saved = False
    if report.timing_cache_path is not None:
        data = bytes(memoryview(report.config.get_timing_cache().serialize()))
        path = Path(report.timing_cache_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # atomic: a concurrent build never reads half a cache
        saved = True
    return BuiltPlan(plan=plan, seconds=seconds, nbytes=memoryview(plan).nbytes,
                     timing_cache_saved=saved)


def refit_engine(
    trt: Any,
    engine: Any,
    model: nn.Module,
    *,
    weight_dtype: torch.dtype = torch.float32,
    fold_bn: bool = False,
) -> int:
    """Refit a refittable engine with `model`'s current weights; returns how many were set.

    Weights are derived exactly as `build_network` derived them (same names, same BN
    arithmetic), so `weight_dtype` and `fold_bn` must match the build.
    """
    values = named_weight_values(model, fold_bn=fold_bn)
    logger = make_logger(trt)
    refitter = trt.Refitter(engine, logger)
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


def named_weight_values(model: nn.Module, *, fold_bn: bool = False) -> dict[str, torch.Tensor]:
    """Every named weight a `refit` network carries, computed from the model's state.

    Names follow the module paths: '<conv>.weight'/'<conv>.bias' (BN folded in when
    `fold_bn`), '<bn>.scale'/'<bn>.shift', '<linear>.weight'/'<linear>.bias'.
    """
    return _graph_weight_values(_trace(model), fold_bn=fold_bn)


def _graph_weight_values(
    graph_module: torch.fx.GraphModule, *, fold_bn: bool
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
            scale, shift = batchnorm_scale_shift(module)
            values[f"{node.target}.scale"] = scale
            values[f"{node.target}.shift"] = shift
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
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
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
        self.network = report.network
        self.mode = report.weights  # constant / tensor / refit
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
        if self.mode == "refit":
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

    def _cast(self, tensor: Any, dtype: torch.dtype, name: str) -> Any:
        layer = self.network.add_cast(tensor, trt_dtype(self.trt, dtype))
        return self._layer("CAST", layer, name).get_output(0)

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
                if report.io_dtype != report.weight_dtype:
                    # weakly typed: compute types are the builder's choice; the cast only
                    # states that the half/bf16 input feeds a float32-typed graph
                    tensor = self._cast(tensor, report.weight_dtype, "input_cast")
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
        if report.io_dtype != report.weight_dtype:
            out = self._cast(out, report.io_dtype, "output_cast")
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
        if self.mode == "tensor":
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
        trt = self.trt
        if self.mode == "tensor":
            return self._batchnorm_as_tensors(name, x, bn)
        scale, shift = batchnorm_scale_shift(bn)
        layer = self.network.add_scale(
            x, trt.ScaleMode.CHANNEL,
            shift=self._weights(shift, f"{name}.shift", "weights"),
            scale=self._weights(scale, f"{name}.scale", "weights"),
            power=self._empty(),
        )
        return self._layer("SCALE", layer, name).get_output(0)

    def _batchnorm_as_tensors(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        """BN from its raw parameters as constant tensors and elementwise arithmetic.

        (x * (gamma / sqrt(var + eps))) + (beta - mean * gamma / sqrt(var + eps)): what
        Torch-TensorRT 2.7 emits when weights are tensors; the builder must constant-fold
        the parameter arithmetic before it can see a per-channel scale to fuse.
        """
        trt = self.trt
        if bn.running_mean is None or bn.running_var is None:
            raise ConversionError(f"{name}: BatchNorm2d without running statistics")
        channels = int(bn.num_features)
        bshape = (1, channels, 1, 1)
        ones, zeros = torch.ones(channels), torch.zeros(channels)
        gamma = self._constant(bn.weight.detach() if bn.weight is not None else ones,
                               f"{name}.weight", "tensor", bshape)
        beta = self._constant(bn.bias.detach() if bn.bias is not None else zeros,
                              f"{name}.bias", "tensor", bshape)
        mean = self._constant(bn.running_mean.detach(), f"{name}.running_mean", "tensor", bshape)
        var = self._constant(bn.running_var.detach(), f"{name}.running_var", "tensor", bshape)
        eps = self._constant(torch.full((1,), float(bn.eps)), f"{name}.eps", "constant-layer",
                             (1, 1, 1, 1))
        op = trt.ElementWiseOperation

        def ew(a: Any, b: Any, kind: Any) -> Any:
            return self._layer("ELEMENTWISE", self.network.add_elementwise(a, b, kind),
                               name).get_output(0)

        std = self._layer("UNARY", self.network.add_unary(ew(var, eps, op.SUM),
                                                          trt.UnaryOperation.SQRT),
                          name).get_output(0)
        scale = ew(gamma, std, op.DIV)
        shift = ew(beta, ew(mean, scale, op.PROD), op.SUB)
        return ew(ew(x, scale, op.PROD), shift, op.SUM)

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
