"""The ONNX Runtime backend: export to ONNX, optimize in ORT, run through I/O binding.

Weights:
- `constant`: the exported initializers stay initializers, so ORT's optimizer may fold
  Conv+BatchNormalization, fuse Conv+Relu (FusedConv) and pre-pack / re-layout weights.
- `tensor`: every float initializer feeding a weight-consuming op becomes a graph input
  (benchmarks.onnx_weights), fed at run time. ORT cannot fold what it does not know.

The exporter never folds anything itself (`do_constant_folding=False`, the dynamo
exporter's `optimize=False`): both variants start from the same unfused graph with every
BatchNormalization node in it, so the node counts ORT reports after optimization show what
its optimizer did with constants and nothing else.

Weights of the `tensor` variant are bound once, as OrtValues already on the device, with
`IOBinding.bind_ortvalue_input`; each call then binds only the image and the output. That
mirrors "weights enter as tensors" (a TensorRT engine with tensor weights does not upload
them per call either) and keeps the per-call cost equal for both variants, so the speedup
difference is the optimizer's doing, not feed-dict bookkeeping over ~300 names. Input and
output are bound by pointer to the torch tensors: zero copy on CPU and on CUDA.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import model_ref
from benchmarks.backends.base import BackendUnavailable, Compiled
from benchmarks.onnx_weights import domain_counts, node_counts, weights_to_inputs
from benchmarks.spec import profiled_here

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime as ort
    import torch

    from benchmarks.spec import BenchSpec

DEFAULT_OPSET = 17
# the dynamo exporter implements nothing below opset 18
DYNAMO_MIN_OPSET = 18
EXPORTERS = ("auto", "torchscript", "dynamo")
OPT_LEVELS = ("disable", "basic", "extended", "layout", "all")
# the spec's opt_level axis -> ORT's level names (option ort_opt_level, kept for old series)
AXIS_LEVELS = {"disabled": "disable", "basic": "basic", "extended": "extended",
               "layout": "layout", "all": "all"}
CALIBRATION_SAMPLES = 32  # int8: seeded calibration images


def opt_level_name(spec: BenchSpec) -> str:
    """ORT's level for the spec: the axis when set, else option ort_opt_level, else all."""
    if spec.opt_level != "default":
        return AXIS_LEVELS[spec.opt_level]
    return str(spec.options.get("ort_opt_level", "all"))
INPUT_NAME = "input"
OUTPUT_NAME = "output"


class OnnxExportError(RuntimeError):
    """Export failed for a reason other than an op without an ONNX translation."""


# An ONNX Runtime build in the host's build cache (benchmarks.build_cache).
ORT_EXPORTED = "exported.onnx"
ORT_QUANTIZED = "quantized.onnx"
ORT_BUILD_META = "export.json"


def _ort() -> Any:
    import onnxruntime

    return onnxruntime


def _opt_level(name: str) -> Any:
    level = _ort().GraphOptimizationLevel
    attr = {
        "disable": "ORT_DISABLE_ALL",
        "basic": "ORT_ENABLE_BASIC",
        "extended": "ORT_ENABLE_EXTENDED",
        "layout": "ORT_ENABLE_LAYOUT",
        "all": "ORT_ENABLE_ALL",
    }[name]
    if not hasattr(level, attr):
        raise BackendUnavailable(f"option ort_opt_level: {name!r} needs a newer onnxruntime")
    return getattr(level, attr)


def _unsupported_op(exc: BaseException) -> str | None:
    """The op named by an exporter's 'no translation for this op' error, if it is one.

    Both exporters say so in prose only: the TorchScript one as 'unrecognized namespace
    ns::op' or 'aten::op ... not supported', the dynamo one as "OpOverload(op='ns.op'".
    """
    text = str(exc)
    for cause in (exc.__cause__, exc.__context__):
        if cause is not None:
            text += "\n" + str(cause)
    match = re.search(r"namespace (\w+::\w+)", text) or re.search(
        r"operator '?(\w+::\w+)'? to ONNX", text
    )
    if match:
        return match.group(1)
    match = re.search(r"op='(\w+)\.(\w+)'", text)
    if match:
        return f"{match.group(1)}::{match.group(2)}"
    return None


def _export(
    model: torch.nn.Module, example: torch.Tensor, path: Path, spec: BenchSpec
) -> tuple[str, int]:
    """Export with the chosen exporter; 'auto' tries TorchScript, then dynamo.

    TorchScript first: on a ResNet it takes well under a second where the dynamo exporter
    takes several, and its output is deterministic across runs. Returns (exporter, opset).
    Neither exporter may fold BatchNormalization: folding is ORT's job, and the measured one.
    """
    import torch

    choice = spec.options.get("exporter", "auto")
    opset = int(spec.options.get("opset", DEFAULT_OPSET))
    order = ["torchscript", "dynamo"] if choice == "auto" else [choice]
    params = inspect.signature(torch.onnx.export).parameters
    dynamic = spec.shape_mode == "dynamic"
    errors: list[str] = []
    for exporter in order:
        kwargs: dict[str, Any] = {"input_names": [INPUT_NAME], "output_names": [OUTPUT_NAME]}
        args = (example,)
        if exporter == "torchscript":
            if "dynamo" in params:
                kwargs["dynamo"] = False
            kwargs["do_constant_folding"] = False
            used_opset = opset
            if dynamic:
                kwargs["dynamic_axes"] = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}
        else:
            if "dynamo" not in params:
                errors.append(f"dynamo: torch {torch.__version__} has no dynamo ONNX exporter")
                continue
            kwargs["dynamo"] = True
            if "optimize" in params:
                kwargs["optimize"] = False
            used_opset = max(opset, DYNAMO_MIN_OPSET)
            if dynamic:
                kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch", min=1, max=1024)},)
                if example.shape[0] == 1:
                    # torch.export specialises a size-1 dimension to the constant 1
                    args = (example.expand(2, *example.shape[1:]).contiguous(),)
        kwargs["opset_version"] = used_opset
        try:
            with torch.inference_mode(False), torch.no_grad():
                if exporter == "torchscript":
                    torch.onnx.export(model, args, str(path), **kwargs)
                else:
                    program = torch.onnx.export(model, args, **kwargs)
                    if program is None:
                        raise OnnxExportError("the dynamo exporter returned no program")
                    _fold_constants_only(program)
                    program.save(str(path))
            return exporter, used_opset
        except Exception as exc:
            op = _unsupported_op(exc)
            if op is not None and not op.startswith(("aten::", "prim::")):
                # the other exporter has no translation for a custom op either
                raise BackendUnavailable(
                    f"custom op {op} has no ONNX symbolic; ONNX Runtime cannot run this model"
                ) from exc
            root = _root_cause(exc)
            first_line = (str(root).strip().splitlines() or [type(root).__name__])[0]
            errors.append(f"{exporter}: {type(root).__name__}: {first_line[:300]}")
            if op is not None and len(order) == 1:
                raise BackendUnavailable(f"{op} has no ONNX translation ({exporter} "
                                         f"exporter, opset {used_opset})") from exc
    raise OnnxExportError("ONNX export failed: " + " | ".join(errors))


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost cause of an export error: the dynamo exporter's own first line is
    "Failed to convert the exported program..." and the op it could not translate is
    named three causes down ("No ONNX function found for <OpOverload(op=...)>")."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def _fold_constants_only(program: Any) -> None:
    """Fold what the dynamo exporter leaves computable, but fuse nothing.

    Unoptimized, it computes a bias-less Conv's zero bias at run time (Shape, Expand,
    CastLike), which stops ORT from folding BatchNormalization into that Conv; its full
    optimizer (optimize=True) would fold the BatchNormalization itself. Constant folding
    alone gives the TorchScript exporter's shape of graph: Conv, then BatchNormalization.
    """
    try:
        import onnxscript.optimizer as onnxscript_optimizer
    except ImportError:
        return
    onnxscript_optimizer.fold_constants(program.model)
    onnxscript_optimizer.remove_unused_nodes(program.model)


def _providers(spec: BenchSpec) -> list[Any]:
    if spec.device == "cuda":
        import torch

        device_id = torch.cuda.current_device()
        # Run on torch's current stream so the image torch produced is ready when ORT reads
        # it and the output is ordered before torch's next use, without a device sync here.
        stream = torch.cuda.current_stream().cuda_stream
        options: dict[str, Any] = {"device_id": device_id, "has_user_compute_stream": "1",
                                   "user_compute_stream": str(stream)}
        if spec.timing.builds == "pinned":
            # ORT's CUDA provider times every cuDNN convolution algorithm by default
            # (EXHAUSTIVE): a choice by noise, as PyTorch's cudnn.benchmark is; pinned
            # builds take cuDNN's heuristics, as the eager baseline does.
            options["cudnn_conv_algo_search"] = "HEURISTIC"
        return [("CUDAExecutionProvider", options)]
    return ["CPUExecutionProvider"]


def graph_choices(model: Any) -> list[Any]:
    """The optimized graph as ORT built it, node by node: domain, op type and attributes
    (tensor-valued ones by name only). The graph is what ORT's optimizer chose to run:
    folds, fusions, layouts; a changed one is a changed build."""
    out: list[Any] = []
    for node in model.graph.node:
        attributes: dict[str, Any] = {}
        for attr in node.attribute:
            value: Any
            if attr.type == attr.INT:
                value = attr.i
            elif attr.type == attr.FLOAT:
                value = round(attr.f, 6)
            elif attr.type == attr.STRING:
                value = attr.s.decode("utf-8", errors="replace")
            elif attr.type == attr.INTS:
                value = list(attr.ints)
            elif attr.type == attr.FLOATS:
                value = [round(f, 6) for f in attr.floats]
            else:
                value = "<tensor>"
            attributes[attr.name] = value
        out.append([node.domain or "ai.onnx", node.op_type, len(node.input), attributes])
    return out


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        try:
            ort = _ort()
            import onnx  # noqa: F401
        except ImportError as exc:
            return f"onnxruntime backend needs {exc.name or 'onnxruntime/onnx'}, not installed"
        exporter = spec.options.get("exporter", "auto")
        if exporter not in EXPORTERS:
            return f"option exporter: {exporter!r} is not one of {', '.join(EXPORTERS)}"
        level = spec.options.get("ort_opt_level", "all")
        if level not in OPT_LEVELS:
            return f"option ort_opt_level: {level!r} is not one of {', '.join(OPT_LEVELS)}"
        if spec.opt_level != "default" and "ort_opt_level" in spec.options:
            return "opt_level and option ort_opt_level both given: use opt_level"
        if spec.precision == "int8":
            if spec.weights != "constant":
                return ("int8: static quantization turns the weights into int8 initializers "
                        "at build time; only weights 'constant' exists")
            if spec.device != "cpu":
                return "int8 with onnxruntime is measured on the CPU provider here"
        if spec.precision == "bf16":
            return "onnxruntime has no bf16 Conv kernels (CPU or CUDA); use fp16 on cuda"
        if spec.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "CUDA is not available here"
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                return ("onnxruntime here has no CUDAExecutionProvider "
                        "(install onnxruntime-gpu matching the CUDA version)")
        elif spec.precision == "fp16":
            # Converting to fp32 would time a different program than the series names.
            return "onnxruntime's CPU provider has no fp16 Conv kernels; run fp16 on cuda"
        return None

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        return self._compile(model, example, spec, None, keep=False)

    def compile_cached(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec,
                       artifacts: dict[str, bytes] | None) -> Compiled:
        """The build a later process loads is the graph ONNX Runtime starts from (the
        export, and for int8 the quantized graph): exporting and calibrating are the slow,
        torch-dependent part; the session's own optimisation of that graph runs in every
        process, as deployed, and its result is what the build fingerprint checks."""
        return self._compile(model, example, spec, artifacts, keep=artifacts is None)

    def _compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec,
                 loaded: dict[str, bytes] | None, *, keep: bool) -> Compiled:
        import onnx
        import torch

        reason = self.unavailable_reason(spec)
        if reason is not None:
            raise BackendUnavailable(reason)
        ort = _ort()
        keep_dir = spec.options.get("onnx_dir")
        workdir = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="speedwatch-onnx-"))
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            exported_path = workdir / "model.onnx"
            keeps: dict[str, bytes] = {}
            exporter, opset, meta = _exported(model, example, spec, loaded, exported_path)
            exported = onnx.load(str(exported_path))

            weights: dict[str, np.ndarray] = {}
            session_path = exported_path
            quantized: dict[str, Any] = {}
            if spec.precision == "int8" and loaded is not None:
                session_path = workdir / "model.int8.onnx"
                session_path.write_bytes(loaded[ORT_QUANTIZED])
                quantized = dict(meta["quantized"])
            elif spec.precision == "int8":
                session_path, quantized = _quantize_static(exported_path, example, spec)
            if keep:
                keeps[ORT_EXPORTED] = exported_path.read_bytes()
                keeps[ORT_BUILD_META] = json.dumps(
                    {"exporter": exporter, "opset": opset, "quantized": quantized},
                    sort_keys=True, default=str).encode()
                if spec.precision == "int8":
                    keeps[ORT_QUANTIZED] = session_path.read_bytes()
            if spec.weights == "tensor":
                rewritten, weights = weights_to_inputs(exported)
                session_path = workdir / "model.tensor-weights.onnx"
                onnx.save(rewritten, str(session_path))

            level_name = opt_level_name(spec)
            threads = int(spec.options.get("intra_op_threads", torch.get_num_threads()))
            optimized_path = workdir / "model.optimized.onnx"
            options = _session_options(ort, spec, level_name, threads, optimized_path)
            providers = _providers(spec)
            session = ort.InferenceSession(str(session_path), options, providers=providers)
            # the profile pass's session reads the same graph (benchmarks.profile); only a
            # process that profiles keeps it (a ResNet50 graph is about 100 MB)
            graph_bytes = session_path.read_bytes() if profiled_here(spec) else None
            wanted = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
            if session.get_providers()[0] != wanted:
                raise BackendUnavailable(
                    f"onnxruntime fell back to {session.get_providers()[0]} instead of {wanted}")

            optimized = onnx.load(str(optimized_path), load_external_data=False)
        finally:
            if not keep_dir:
                shutil.rmtree(workdir, ignore_errors=True)

        run = _BoundSession(session, weights, example, spec)
        evidence = {
            **_graph_evidence(exported, optimized),
            "onnx_graph_inputs": len(session.get_inputs()),
            "onnx_weight_inputs": len(weights),
            "onnx_exporter": exporter,
            "onnx_opset": opset,
            "ort_opt_level": level_name,
            "ort_provider": session.get_providers()[0],
            "ort_intra_op_threads": threads,
            **quantized,
        }
        profile = None
        if graph_bytes is not None:
            def profile(x: torch.Tensor, inferences: int) -> dict[str, Any]:
                return _profile_session(graph_bytes, weights, example, spec, providers,
                                        level_name, threads, x, inferences)
        return Compiled(run=run, evidence=evidence, cuda_graph_safe=False,
                        versions={"onnxruntime": ort.__version__, "onnx": onnx.__version__},
                        build_choices=graph_choices(optimized), profile=profile,
                        artifacts=keeps or None)


def _graph_evidence(exported: Any, optimized: Any) -> dict[str, Any]:
    """What the exporter made and what ONNX Runtime's optimiser left of it."""
    counts, exported_counts = node_counts(optimized), node_counts(exported)
    return {
        "onnx_node_counts": counts,
        "onnx_nodes_total": sum(counts.values()),
        "onnx_node_domains": domain_counts(optimized),
        "onnx_exported_node_counts": exported_counts,
        "onnx_exported_nodes_total": sum(exported_counts.values()),
        "onnx_initializers": len(optimized.graph.initializer),
    }


def _exported(model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec,
              loaded: dict[str, bytes] | None, path: Path) -> tuple[str, int, dict[str, Any]]:
    """(exporter, opset, the stored build's metadata) with the ONNX graph written to `path`:
    exported here, or the one a cached build kept. A model of the user's that no exporter
    takes is skipped, not failed."""
    meta: dict[str, Any] = {}
    try:
        if loaded is not None:
            meta = json.loads(loaded[ORT_BUILD_META])
            path.write_bytes(loaded[ORT_EXPORTED])
            return str(meta["exporter"]), int(meta["opset"]), meta
        exporter, opset = _export(model, example, path, spec)
        return exporter, opset, meta
    except OnnxExportError as exc:
        if model_ref.parse(spec.model, allow_absolute=True).builtin:
            raise  # the built-in models export: failing to is a finding
        # A model of the user's that no exporter takes is a property of the model
        # (data-dependent control flow, an op without a translation): skipped.
        why = re.sub(r"\x1b\[[0-9;]*m", "", str(exc).removeprefix("ONNX export failed: "))
        raise BackendUnavailable(
            f"model {spec.model} cannot be exported to ONNX ({why})") from exc


def _session_options(ort: Any, spec: BenchSpec, level_name: str, threads: int,
                     optimized_path: Path) -> Any:
    """The session's options: the level, eager's thread count (so neither side gets more
    cores), and where ONNX Runtime saves the graph it optimised (read for the evidence)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = _opt_level(level_name)
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # errors only: saving an NCHWc-optimized graph warns on every compile
    options.log_severity_level = 3
    options.optimized_model_filepath = str(optimized_path)
    if spec.options.get("ort_allow_spinning") is not None:
        options.add_session_config_entry(
            "session.intra_op.allow_spinning",
            "1" if spec.options["ort_allow_spinning"] else "0")
    return options


def _profile_session(graph: bytes, weights: dict[str, np.ndarray], example: torch.Tensor,
                     spec: BenchSpec, providers: list[Any], level_name: str, threads: int,
                     x: torch.Tensor, inferences: int) -> dict[str, Any]:
    """ONNX Runtime's own per-node profile of the timed graph, from a second session with
    profiling on (the timed one never profiles): one run to warm it, `inferences` read."""
    from benchmarks.profile import onnxruntime_profile

    ort = _ort()
    with tempfile.TemporaryDirectory(prefix="speedwatch-ort-profile-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = _opt_level(level_name)
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(graph, options, providers=providers)
        bound = _BoundSession(session, weights, example, spec)  # its first run warms it
        for _ in range(inferences):
            bound(x)
        trace = Path(session.end_profiling())
        return onnxruntime_profile(trace, inferences)


def _quantize_static(exported: Path, example: torch.Tensor,
                     spec: BenchSpec) -> tuple[Path, dict[str, Any]]:
    """ONNX Runtime static quantization, QDQ format, int8 weights (per channel) and
    activations, MinMax ranges from a seeded calibration set of CALIBRATION_SAMPLES images
    drawn like the benchmark's input (seed spec.seed + 1000, so not the timed image).

    The exported graph is pre-processed first (ORT's quant_pre_process: shape inference and
    graph optimization, which folds BatchNormalization into Conv), as ORT's quantization
    guide asks; the quantized graph then goes through the session's own optimizer like any
    other candidate."""
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    generator = torch.Generator().manual_seed(spec.seed + 1000)
    shape = tuple(example.shape)
    samples = [torch.randn(shape, generator=generator).numpy()
               for _ in range(CALIBRATION_SAMPLES)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(samples)

        def get_next(self) -> dict[str, Any] | None:
            item = next(self.items, None)
            return None if item is None else {INPUT_NAME: item}

    prepared = exported.with_name("model.preprocessed.onnx")
    quant_pre_process(str(exported), str(prepared), skip_symbolic_shape=True)
    output = exported.with_name("model.int8.onnx")
    quantize_static(str(prepared), str(output), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
    return output, {"int8_calibration_samples": CALIBRATION_SAMPLES,
                    "int8_calibration_seed": spec.seed + 1000,
                    "int8_format": "QDQ", "int8_calibration": "MinMax",
                    "int8_per_channel": True}


class _BoundSession:
    """A call that binds image and output by pointer; the weights were bound once, up front.

    It holds the weight OrtValues (on CPU they point into the numpy arrays) for as long as
    the binding that refers to them.
    """

    def __init__(self, session: ort.InferenceSession, weights: dict[str, np.ndarray],
                 example: torch.Tensor, spec: BenchSpec) -> None:
        import numpy as np
        import torch

        ort = _ort()
        self.session = session
        self.device = "cuda" if spec.device == "cuda" else "cpu"
        self.device_id = (example.device.index or 0) if self.device == "cuda" else 0
        self.binding = session.io_binding()
        self.weights = {name: ort.OrtValue.ortvalue_from_numpy(value, self.device,
                                                                self.device_id)
                        for name, value in weights.items()}
        for name, value in self.weights.items():
            self.binding.bind_ortvalue_input(name, value)
        self.np_dtype = {torch.float32: np.float32, torch.float16: np.float16}[example.dtype]
        # one call with ORT allocating the output tells its per-sample shape
        held = self._bind_input(example)
        self.binding.bind_output(OUTPUT_NAME, self.device, self.device_id)
        session.run_with_iobinding(self.binding)
        self.tail = tuple(self.binding.get_outputs()[0].shape()[1:])
        del held

    def _bind_input(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        self.binding.bind_input(INPUT_NAME, self.device, self.device_id, self.np_dtype,
                                tuple(x.shape), x.data_ptr())
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        x = self._bind_input(x)
        # a fresh output per call: callers may keep earlier outputs
        out = torch.empty((x.shape[0], *self.tail), dtype=x.dtype, device=x.device)
        self.binding.bind_output(OUTPUT_NAME, self.device, self.device_id, self.np_dtype,
                                 tuple(out.shape), out.data_ptr())
        self.session.run_with_iobinding(self.binding)
        return out


BACKEND = OnnxRuntimeBackend()
