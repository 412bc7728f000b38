"""The tensorrt backend: our converter (or TensorRT's ONNX parser) -> a TensorRT engine.

Options (spec.options):
- `path`: "network" (default, benchmarks/trt_converter.py through the network definition
  API) or "onnx" (export to ONNX, then `trt.OnnxParser`).
- `optimization_level` (0-5, default 3), `timing_cache` (file path: loaded if present,
  saved after the build; default: the host's cache when timing.builds is "pinned", none
  when "as-shipped"), `fold_bn` (pre-fold BN into convs), `strongly_typed`,
  `workspace_mb`: see trt_converter.

Weights: `constant` (network mode trt-2.8 unless `trt_mode` says trt-2.6), `tensor` (trt-2.7;
network path only: TensorRT's ONNX parser turns initializers into weights itself, and ONNX
graph inputs would be runtime inputs, not weights, so there is no faithful "tensor" ONNX
counterpart) and `refit` (any mode; a refittable engine, refit once from the model after
the build to prove it works; the count and time are evidence). `trt_mode` (trt-2.6,
trt-2.7, trt-2.8) picks which Torch-TensorRT release's network the converter reproduces:
see benchmarks/trt_converter.py.

Only the real `tensorrt` module is ever used here; nothing falls back to a stand-in.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.backends.base import BackendUnavailable, Compiled, cuda_only_reason
from benchmarks.spec import harness_option, profiled_here

if TYPE_CHECKING:
    import tensorrt
    import torch

    from benchmarks.spec import BenchSpec

PATHS = ("network", "onnx")
# every option this backend understands: its own, the converter's, the ONNX exporter's
# (path=onnx) and the runner's; anything else is a typo worth refusing
KNOWN_OPTIONS = frozenset({"path", "exporter", "opset", "threads", "cudnn_benchmark"})
NOT_INSTALLED = "tensorrt is not installed (NVIDIA wheels unreachable here)"


def _import_tensorrt() -> Any:
    import tensorrt

    if not hasattr(tensorrt, "Builder"):
        # tensorrt-stubs (installed for mypy) leaves a folder `tensorrt` of .pyi files only,
        # which Python imports as an empty namespace package: that is not TensorRT
        raise ImportError("tensorrt here is only type stubs (tensorrt-stubs)", name="tensorrt")
    return tensorrt


def tensorrt_importable() -> bool:
    """True where the real TensorRT module imports (not its stubs' empty namespace)."""
    try:
        _import_tensorrt()
    except ImportError:
        return False
    return True


def engine_layer_evidence(trt: Any, engine: Any) -> dict[str, Any]:
    """The engine's own account of its layers after fusion, from the engine inspector, in
    the inspector's vocabulary (never mixed with the network's layer types).

    With ProfilingVerbosity.DETAILED each entry of `Layers` is an object: "LayerType" is
    the kernel family ("CaskConvolution", "PointWiseV2", "Reformat", ...), "ParameterType"
    the operation, and "Name" joins the names of the network layers fused into it with
    " + " (a pointwise fusion reads "PWN(a, b)"). With less detail an entry is a name only.
    """
    layers = engine_layers(trt, engine)
    details = [layer for layer in layers if isinstance(layer, dict)]
    names = [str(layer.get("Name", layer)) if isinstance(layer, dict) else str(layer)
             for layer in layers]
    evidence: dict[str, Any] = {"trt_engine_layers": len(layers)}
    if details:
        families = Counter(str(layer.get("LayerType", "unknown")) for layer in details)
        parameters = Counter(str(layer.get("ParameterType", "unknown")) for layer in details)
        evidence["trt_engine_kernel_families"] = dict(families.most_common())
        evidence["trt_engine_parameter_types"] = dict(parameters.most_common())
    fused = [fused_layer_names(name) for name in names]
    evidence["trt_engine_fused_layers"] = sum(len(parts) > 1 for parts in fused)
    evidence["trt_engine_network_layers_covered"] = sum(len(parts) for parts in fused)
    return evidence


def engine_layers(trt: Any, engine: Any) -> list[Any]:
    """The engine inspector's `Layers`, in engine order: objects with DETAILED verbosity,
    names with less."""
    inspector = engine.create_engine_inspector()
    info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    return list(info.get("Layers", []))


# What a DETAILED entry says the build chose for an engine layer: which network layers it
# fused ("Name"), the kernel family ("LayerType") and the tactic timing picked (TensorRT's
# developer guide, "Engine Inspector": "TacticName" and "TacticValue", e.g. "0x11bde0e1d9f2f35d").
CHOICE_KEYS = ("Name", "LayerType", "TacticName", "TacticValue")


def engine_build_choices(layers: list[Any]) -> list[dict[str, Any]] | None:
    """Per engine layer, in engine order, what the build chose (CHOICE_KEYS, where given):
    the description benchmarks.build fingerprints, so two engines with the same fusions and
    tactics share a fingerprint and a tactic timed differently changes it.

    None when the engine was built with less than DETAILED verbosity: its layer names
    cannot tell one tactic from another, and a fingerprint blind to tactics would vouch
    for builds it never compared.
    """
    if not layers or not all(isinstance(layer, dict) for layer in layers):
        return None
    return [{key: layer[key] for key in CHOICE_KEYS if key in layer} for layer in layers]


def fused_layer_names(name: str) -> list[str]:
    """The network layers an engine layer's name says it fused: 'a + b + c' -> [a, b, c],
    'PWN(a, b)' -> [a, b] (nested as TensorRT nests them)."""
    parts: list[str] = []
    depth, start = 0, 0
    separators = (" + ", ", ")
    i = 0
    while i < len(name):
        if name[i] == "(":
            depth += 1
        elif name[i] == ")":
            depth -= 1
        elif depth == 0 and name.startswith(separators, i):
            parts.append(name[start:i])
            i += 2 if name.startswith(", ", i) else 3
            start = i
            continue
        i += 1
    parts.append(name[start:])
    out: list[str] = []
    for part in (p.strip() for p in parts):
        if part.startswith("PWN(") and part.endswith(")"):
            out.extend(fused_layer_names(part[4:-1]))
        elif part:
            out.append(part)
    return out


# Evidence keys by vocabulary: a diff compares a network count with a network count and an
# engine count with an engine count, never one with the other.
NETWORK_COUNTS = ("trt_network_layers_by_type",)
ENGINE_COUNTS = ("trt_engine_kernel_families", "trt_engine_parameter_types")


def evidence_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per key of NETWORK_COUNTS and ENGINE_COUNTS: {name: after - before} where they differ
    (e.g. trt-2.6 vs trt-2.7: the network gains constants, the engine's families change)."""
    out: dict[str, dict[str, Any]] = {}
    for key in (*NETWORK_COUNTS, *ENGINE_COUNTS):
        a, b = before.get(key) or {}, after.get(key) or {}
        delta = {name: int(b.get(name, 0)) - int(a.get(name, 0)) for name in sorted({*a, *b})}
        changed = {name: d for name, d in delta.items() if d}
        if changed:
            out[key] = changed
    return out


def spec_problem(spec: BenchSpec) -> str | None:
    """Why this spec can never run on this backend, wherever it runs (None if it can)."""
    from benchmarks.trt_options import CONVERTER_OPTIONS, ConversionError, ConverterOptions

    unknown = {k for k in spec.options if not harness_option(k)} - KNOWN_OPTIONS \
        - set(CONVERTER_OPTIONS)
    if unknown:
        return f"unknown tensorrt option(s): {', '.join(sorted(unknown))}"
    path = spec.options.get("path", "network")
    if path not in PATHS:
        return f"option path: {path!r} is not one of {', '.join(PATHS)}"
    if path == "onnx" and spec.weights == "tensor":
        return ("weights 'tensor' has no ONNX-parser form: TensorRT's parser makes "
                "initializers weights, and graph inputs would be runtime inputs; use "
                "path=network")
    try:
        ConverterOptions.for_spec(spec).mode_for(spec.weights)
    except ConversionError as exc:
        return str(exc)
    return None


class TensorRTBackend:
    name = "tensorrt"

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        problem = spec_problem(spec)
        if problem is not None:
            return problem
        try:
            _import_tensorrt()
        except ImportError:
            return NOT_INSTALLED
        return cuda_only_reason(spec, "TensorRT")

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        from benchmarks import trt_converter as conv
        from benchmarks import trt_options

        reason = self.unavailable_reason(spec)
        if reason is not None:
            raise BackendUnavailable(reason)
        trt = _import_tensorrt()
        path = spec.options.get("path", "network")
        try:
            if path == "onnx":
                report = _parse_onnx(trt, model, example, spec)
            else:
                report = conv.build_network(trt, model, tuple(example.shape), spec,
                                            io_dtype=example.dtype)
            built = conv.build_plan(trt, report)
        except trt_options.UnsupportedOp as exc:
            raise BackendUnavailable(str(exc)) from exc

        runtime: tensorrt.Runtime = trt.Runtime(report.logger)
        engine = runtime.deserialize_cuda_engine(built.plan)
        if engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine it just built")

        evidence: dict[str, Any] = report.evidence()
        evidence.update(engine_layer_evidence(trt, engine))
        evidence["trt_build_seconds"] = round(built.seconds, 4)
        evidence["trt_plan_bytes"] = built.nbytes
        evidence["trt_timing_cache_saved"] = built.timing_cache_saved
        evidence["trt_timing_cache_merged"] = built.timing_cache_merged
        if spec.weights == "refit":
            start = time.perf_counter()
            if report.source_path is not None:
                evidence["trt_refit_count"] = _refit_from_onnx(trt, engine, report.source_path)
            else:
                evidence["trt_refit_count"] = conv.refit_engine(
                    trt, engine, model, weight_dtype=report.weight_dtype,
                    fold_bn=report.fold_bn, mode=report.mode)
            evidence["trt_refit_seconds"] = round(time.perf_counter() - start, 4)

        runner = _EngineRunner(trt, engine, runtime, report.logger,
                               dynamic=spec.shape_mode == "dynamic")
        runner(example)  # first enqueue outside any CUDA graph capture (TensorRT asks so)
        layers = engine_layers(trt, engine)

        def profile(x: torch.Tensor, inferences: int) -> dict[str, Any]:
            return layer_profile(trt, engine, runtime, report.logger, layers, x, inferences,
                                 dynamic=spec.shape_mode == "dynamic")

        return Compiled(run=runner, evidence=evidence, cuda_graph_safe=True,
                        versions={"tensorrt": str(getattr(trt, "__version__", "unknown"))},
                        build_choices=engine_build_choices(layers),
                        profile=profile if profiled_here(spec) else None)


def layer_profile(trt: Any, engine: Any, runtime: Any, logger: Any, layers: list[Any],
                  x: torch.Tensor, inferences: int, *, dynamic: bool) -> dict[str, Any]:
    """TensorRT's own per-layer times (an IProfiler on an execution context of its own, so
    the timed context never carries one): one enqueue to warm up, then `inferences` read.
    Each layer is named as the engine inspector names it (the network layers it fused)
    and grouped by its kernel family ("LayerType", with DETAILED profiling verbosity)."""
    import torch

    from benchmarks.profile import tensorrt_profile

    kinds = {str(entry.get("Name")): str(entry.get("LayerType", "layer"))
             for entry in layers if isinstance(entry, dict)}

    class LayerTimes(trt.IProfiler):  # trt is the module found at run time (Any)
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)  # TensorRT requires the base initialised
            self.ms: dict[str, float] = {}
            self.recording = False

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            if self.recording:
                self.ms[layer_name] = self.ms.get(layer_name, 0.0) + float(ms)

    runner = _EngineRunner(trt, engine, runtime, logger, dynamic=dynamic)
    times = LayerTimes()
    runner.context.profiler = times  # enqueue_emits_profile (default True): reported per run
    runner(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    times.recording = True
    for _ in range(inferences):
        runner(x)
        if x.is_cuda:
            torch.cuda.synchronize()
    return tensorrt_profile(((name, kinds.get(name, "layer"), ms)
                             for name, ms in times.ms.items()), inferences)


def _parse_onnx(trt: Any, model: torch.nn.Module, example: torch.Tensor,
                spec: BenchSpec) -> Any:
    """Export to ONNX and let TensorRT's parser fill the network; same builder settings."""
    from benchmarks import trt_converter as conv
    from benchmarks import trt_options
    from benchmarks.backends.onnxruntime import _export

    options = trt_options.ConverterOptions.for_spec(spec)
    report = conv.start_network(trt, spec, options, io_dtype=example.dtype, path="onnx")
    # kept (and deleted with the report) because a refit reads the same file again
    tmp = tempfile.TemporaryDirectory(prefix="speedwatch-trt-onnx-")
    report.keepalive.append(tmp)
    onnx_path = Path(tmp.name) / "model.onnx"
    exporter, opset = _export(model, example, onnx_path, spec)
    report.notes.update(onnx_exporter=exporter, onnx_opset=opset)
    report.source_path = str(onnx_path)
    parser: tensorrt.OnnxParser = trt.OnnxParser(report.network, report.logger)
    # parse_from_file also finds weights the exporter stored as external data
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i).desc()) for i in range(parser.num_errors)]
        raise trt_options.ConversionError("TensorRT's ONNX parser failed: " + "; ".join(errors[:3]))
    report.keepalive.append(parser)
    report.layer_counts = dict(Counter(
        _layer_type_name(trt, report.network.get_layer(i))
        for i in range(report.network.num_layers)))
    conv.configure(trt, report, spec, options, tuple(example.shape))
    return report


def _refit_from_onnx(trt: Any, engine: Any, onnx_path: str) -> int:
    """Refit an engine the ONNX parser built: its weights carry the initializers' names,
    which only the ONNX parser's refitter knows how to map."""
    from benchmarks.trt_network import make_logger
    from benchmarks.trt_options import ConversionError

    logger = make_logger(trt)
    refitter: tensorrt.Refitter = trt.Refitter(engine, logger)
    parser_refitter: tensorrt.OnnxParserRefitter = trt.OnnxParserRefitter(refitter, logger)
    if not parser_refitter.refit_from_file(onnx_path):
        errors = [str(parser_refitter.get_error(i).desc())
                  for i in range(parser_refitter.num_errors)]
        raise ConversionError("refit from ONNX failed: " + "; ".join(errors[:3]))
    if not refitter.refit_cuda_engine():
        raise ConversionError("refit: TensorRT could not refit the engine: "
                              + "; ".join(logger.errors[-3:]))
    return len(refitter.get_all_weights())


def _layer_type_name(trt: Any, layer: Any) -> str:
    """ILayer.type, read through the base class: pooling and activation layers shadow
    `type` with their own pooling/activation kind."""
    prop = getattr(trt.ILayer, "type", None)
    kind = prop.fget(layer) if isinstance(prop, property) and prop.fget else layer.type
    return str(getattr(kind, "name", kind))


def _current_stream() -> int:
    """The handle of torch's current CUDA stream (a function, so tests can stand in)."""
    import torch

    return int(torch.cuda.current_stream().cuda_stream)


class _EngineRunner:
    """run(x): bind the input and a fresh output by device pointer, enqueue on torch's stream.

    Never synchronises; a fresh output per call keeps results of earlier calls intact, and
    comes from torch's caching allocator (a CUDA graph's private pool under capture).
    """

    def __init__(self, trt: Any, engine: tensorrt.ICudaEngine, runtime: Any, logger: Any, *,
                 dynamic: bool) -> None:
        from benchmarks.trt_options import INPUT_NAME, OUTPUT_NAME

        self.engine = engine
        # TensorRT holds raw pointers to both: they must live as long as the engine
        self.runtime, self.logger = runtime, logger
        self.context: tensorrt.IExecutionContext = engine.create_execution_context()
        self.dynamic = dynamic
        self.input_name, self.output_name = INPUT_NAME, OUTPUT_NAME
        self.output_dtype = _torch_dtype(trt, engine.get_tensor_dtype(OUTPUT_NAME))
        self.shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.bound_shape: tuple[int, ...] | None = None

    def _output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if not self.dynamic:
            return tuple(self.context.get_tensor_shape(self.output_name))
        if shape != self.bound_shape:
            if not self.context.set_input_shape(self.input_name, shape):
                raise RuntimeError(f"TensorRT refused input shape {shape} (outside the profile?)")
            self.bound_shape = shape
        if shape not in self.shapes:
            self.shapes[shape] = tuple(self.context.get_tensor_shape(self.output_name))
        return self.shapes[shape]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        x = x.contiguous()
        out = torch.empty(self._output_shape(tuple(x.shape)), dtype=self.output_dtype,
                          device=x.device)
        self.context.set_tensor_address(self.input_name, x.data_ptr())
        self.context.set_tensor_address(self.output_name, out.data_ptr())
        if not self.context.execute_async_v3(_current_stream()):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        return out


def _torch_dtype(trt: Any, dtype: Any) -> torch.dtype:
    import torch

    table = {trt.float32: torch.float32, trt.float16: torch.float16,
             trt.bfloat16: torch.bfloat16}
    if dtype not in table:
        raise RuntimeError(f"engine output type {dtype} is not a float type")
    return table[dtype]


BACKEND = TensorRTBackend()
