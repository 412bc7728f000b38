"""The torch_tensorrt backend: `torch_tensorrt.compile(ir="dynamo")`, settings passed through.

Weights: which representation conv weights get is not a setting of Torch-TensorRT but a
property of its converters, fixed per release (py/torch_tensorrt/dynamo/conversion/impl/
conv.py at each tag): 2.4-2.6 hand them to TensorRT as `trt.Weights` (numpy arrays), 2.7
as constant-layer ITensors wired with set_input (the regression), 2.8 and later as
`trt.Weights` again (to_trt_weights). So the representation is read from the installed
version and recorded in the result (`torch_trt_conv_weights`, `torch_trt_network`), and a
spec asking for the one the installed version does not build (`tensor` on 2.8, `constant`
on 2.7) is refused with that reason rather than measured as something it is not.
`constant` and `tensor` compile the version's default, non-refittable engine;
`refit` is its own axis: a refittable engine (2.6+: immutable_weights=False; 2.5:
make_refittable=True; 2.4: refit=True) whatever the representation.

Keyword names by version (dynamo.compile's signature at each tag): `refit` (2.4),
`make_refittable` (2.5), `immutable_weights` (2.6+); `enabled_precisions` and
`use_explicit_typing` exist up to 2.12 and left in 2.13 (the model's dtype decides). The
installed signature decides what is passed, never a version string.

Every other key of spec.options is passed to the compiler as is (`optimization_level`,
`min_block_size`, `workspace_size`, `use_python_runtime`, ...) if the installed
torch_tensorrt knows it; an unknown one is refused with its name rather than ignored.
`timing_cache` is accepted as an alias of `timing_cache_path`.

Timing cache: TensorRT times each layer's candidate tactics, so two builds of one model can
run different kernels. A pinned build (timing.builds, the default) with no cache of the
user's loads and saves the host's own (benchmarks.build.tuning_cache_file, keyed by TensorRT
version and GPU), through a private copy that is merged back under a lock: Torch-TensorRT
(2.4-2.13, _TRTInterpreter) rewrites its file in place, unlocked, which a second worker
could read half-written or overwrite. An as-shipped build passes nothing, so it gets what
a user gets: from 2.4 on one file in the temporary directory
(torch_tensorrt_engine_cache/timing_cache.bin) that all builds on the host share; before
2.4 (no `timing_cache_path`) nothing, and builds cannot be pinned.

Build choices: the engines' layers and tactics from each engine module's `get_layer_info()`
(the engine inspector's JSON, in both runtimes from 2.4 to 2.13). Torch-TensorRT builds
with ProfilingVerbosity.DETAILED only when debugging (option `debug: true` up to 2.7, a
Debugger context from 2.8); otherwise the JSON names layers without tactics, and
build_choices is None.
"""

from __future__ import annotations

import inspect
import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import build
from benchmarks.backends.base import BackendUnavailable, Compiled, cuda_only_reason
from benchmarks.spec import harness_option

if TYPE_CHECKING:
    import torch

    from benchmarks.spec import BenchSpec

NOT_INSTALLED = "torch_tensorrt is not installed (NVIDIA wheels unreachable here)"
ALIASES = {"timing_cache": "timing_cache_path"}
# settings this backend derives from the spec itself; an option may not override them
DERIVED = ("inputs", "arg_inputs", "enabled_precisions", "immutable_weights",
           "make_refittable", "refit", "ir")

# How each release's converters build a ResNet's conv and BatchNorm (impl/conv.py and
# impl/normalization/ops.py at the release tags): (conv weights, BatchNorm, the tensorrt
# backend's trt_mode that reproduces the network, where one does)
_RELEASES: list[tuple[tuple[int, int], tuple[str, str, str]]] = [
    ((2, 4), ("constant", "add_scale", "none (2.4: BatchNorm through add_scale)")),
    ((2, 5), ("constant", "elementwise", "trt-2.6")),
    ((2, 7), ("tensor", "elementwise", "trt-2.7")),
    ((2, 8), ("constant", "add_scale_nd", "trt-2.8")),
]


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def release_network(version: str) -> dict[str, str] | None:
    """What the installed release builds for conv weights and BatchNorm (None: unknown)."""
    minor = _minor(version)
    if minor is None or minor < _RELEASES[0][0]:
        return None
    found = _RELEASES[0][1]
    for first, values in _RELEASES:
        if minor >= first:
            found = values
    conv, batchnorm, mode = found
    return {"torch_trt_conv_weights": conv, "torch_trt_batchnorm": batchnorm,
            "torch_trt_network": mode}


def weights_problem(weights: str, version: str) -> str | None:
    """Why the installed version cannot build `weights`' representation (None if it can)."""
    if weights == "refit":
        return None
    network = release_network(version)
    if network is None:
        return (f"cannot tell which conv weight representation torch_tensorrt {version} "
                "builds (known: 2.4 and later)")
    built = network["torch_trt_conv_weights"]
    if weights != built:
        builds = "2.7.x" if weights == "tensor" else "2.4-2.6 and 2.8 or later"
        how = ("constant-layer ITensors through set_input" if built == "tensor"
               else "trt.Weights")
        return (f"torch_tensorrt {version} hands conv weights to TensorRT as {how} (its "
                f"impl/conv.py); weights {weights!r} is built by torch_tensorrt {builds}")
    return None
# options the runner reads itself (benchmarks/runner.py), never compiler settings
RUNNER_OPTIONS = ("threads", "cudnn_benchmark")


def _import_torch_tensorrt() -> Any:
    import torch_tensorrt

    return torch_tensorrt


def _import_tensorrt() -> Any | None:
    """The tensorrt module Torch-TensorRT builds with (None: not importable)."""
    from benchmarks.backends import tensorrt as trt_backend

    try:
        return trt_backend._import_tensorrt()
    except ImportError:
        return None


def compile_settings(spec: BenchSpec, accepted: Iterable[str], version: str) -> dict[str, Any]:
    """The keyword arguments for torch_tensorrt.compile, given the names the installed
    `torch_tensorrt.dynamo.compile` accepts. Raises BackendUnavailable when a setting the
    spec needs (refit, an option) does not exist in this version."""
    from benchmarks.models import model_dtype

    names = set(accepted)
    problem = weights_problem(spec.weights, version)
    if problem is not None:
        raise BackendUnavailable(problem)
    settings: dict[str, Any] = {}
    if "enabled_precisions" in names:
        settings["enabled_precisions"] = {model_dtype(spec.precision)}
    refittable = spec.weights == "refit"
    if "immutable_weights" in names:
        settings["immutable_weights"] = not refittable
    elif "make_refittable" in names:
        settings["make_refittable"] = refittable
    elif "refit" in names:
        settings["refit"] = refittable
    elif refittable:
        raise BackendUnavailable(f"torch_tensorrt {version} cannot build refittable engines "
                                 f"(weights {spec.weights!r})")
    if spec.opt_level != "default":
        if "optimization_level" in spec.options:
            raise BackendUnavailable("opt_level and option optimization_level both given: "
                                     "use opt_level")
        if "optimization_level" not in names:
            raise BackendUnavailable(f"torch_tensorrt {version} has no optimization_level")
        settings["optimization_level"] = int(spec.opt_level)
    for key, value in spec.options.items():
        if key in RUNNER_OPTIONS or harness_option(key):
            continue
        name = ALIASES.get(key, key)
        if name in DERIVED:
            raise BackendUnavailable(f"option {key}: derived from the spec, not settable")
        if name not in names:
            raise BackendUnavailable(f"option {key}: not a setting of torch_tensorrt {version}")
        settings[name] = value
    return settings


def pinned_timing_cache(spec: BenchSpec, settings: dict[str, Any], accepted: Iterable[str],
                        tensorrt_version: str) -> Path | None:
    """The host's timing cache a build loads and saves; None where the user named one (it
    is passed as given), builds are as shipped, or the installed release has no
    `timing_cache_path` (before 2.4)."""
    if spec.timing.builds != "pinned" or "timing_cache_path" in settings:
        return None
    if "timing_cache_path" not in set(accepted):
        return None
    return build.tuning_cache_file("torch_tensorrt", tensorrt_version, "timing-cache")


def engines_build_choices(module: torch.nn.Module) -> list[dict[str, Any]] | None:
    """Per TensorRT engine of the compiled module, in the partitioner's order, its layers
    and their tactics (benchmarks.backends.tensorrt.engine_build_choices). None when any
    engine cannot say (no get_layer_info, no engine yet, layer names only): a description
    missing an engine would give two builds that differ in it the same fingerprint."""
    from benchmarks.backends.tensorrt import engine_build_choices

    engines: list[dict[str, Any]] = []
    for name, child in module.named_children():
        if not name.startswith("_run_on_acc"):
            continue
        get_layer_info = getattr(child, "get_layer_info", None)
        if get_layer_info is None:
            return None
        try:
            layers = json.loads(get_layer_info()).get("Layers", [])
        except (RuntimeError, ValueError, TypeError, AttributeError):
            return None
        choices = engine_build_choices(layers)
        if choices is None:
            return None
        engines.append({"engine": name, "layers": choices})
    return engines or None


def _save_to_host(trt: Any, private: Path, host: Path, loaded: bytes) -> dict[str, Any]:
    """Merge the cache Torch-TensorRT saved to `private` into the host's, with the tensorrt
    backend's save (so both lock alike); the evidence says what happened."""
    from benchmarks import trt_converter as conv

    # unchanged when the build timed nothing new (or built no engine at all)
    saved = private.is_file() and private.read_bytes() != loaded
    merged = False
    if saved:
        config = trt.Builder(conv.make_logger(trt)).create_builder_config()
        cache = config.create_timing_cache(private.read_bytes())
        merged = conv.save_timing_cache(config, cache, host, conv.timing_cache_digest(loaded))
    return {"torch_trt_timing_cache": str(host), "torch_trt_timing_cache_loaded": bool(loaded),
            "torch_trt_timing_cache_saved": saved, "torch_trt_timing_cache_merged": merged}


def compiled_module_evidence(module: torch.nn.Module) -> dict[str, Any]:
    """How the graph was partitioned: TensorRT engines vs subgraphs left to PyTorch.

    Torch-TensorRT's partitioner names the children of the compiled GraphModule
    `_run_on_acc_<i>` (a TensorRT engine) and `_run_on_gpu_<i>` (run by PyTorch).
    """
    engines: list[str] = []
    torch_subgraphs = 0
    for name, child in module.named_children():
        if name.startswith("_run_on_acc"):
            engines.append(type(child).__name__)
        elif name.startswith("_run_on_gpu"):
            torch_subgraphs += 1
    return {"torch_trt_engines": len(engines), "torch_trt_torch_subgraphs": torch_subgraphs,
            "torch_trt_engine_modules": sorted(set(engines))}


class TorchTensorRTBackend:
    name = "torch_tensorrt"

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        for key in spec.options:
            if ALIASES.get(key, key) in DERIVED:
                return f"option {key}: derived from the spec, not settable"
        try:
            torch_tensorrt = _import_torch_tensorrt()
        except ImportError as exc:
            missing = getattr(exc, "name", None)
            if missing in (None, "torch_tensorrt"):
                return NOT_INSTALLED
            return f"torch_tensorrt cannot be imported: {exc}"
        problem = weights_problem(spec.weights,
                                  str(getattr(torch_tensorrt, "__version__", "unknown")))
        return problem or cuda_only_reason(spec, "Torch-TensorRT")

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        import torch

        reason = self.unavailable_reason(spec)
        if reason is not None:
            raise BackendUnavailable(reason)
        torch_tensorrt = _import_torch_tensorrt()
        version = str(getattr(torch_tensorrt, "__version__", "unknown"))
        accepted = inspect.signature(torch_tensorrt.dynamo.compile).parameters
        settings = compile_settings(spec, accepted, version)

        shape = tuple(example.shape)
        if spec.shape_mode == "dynamic":
            batch = shape[0]
            spec_input = torch_tensorrt.Input(
                min_shape=(1, *shape[1:]), opt_shape=shape, max_shape=(2 * batch, *shape[1:]),
                dtype=example.dtype)
        else:
            spec_input = torch_tensorrt.Input(shape=shape, dtype=example.dtype)
        trt = _import_tensorrt()
        trt_version = str(getattr(trt, "__version__", "unknown"))
        host = (pinned_timing_cache(spec, settings, accepted, trt_version)
                if trt is not None else None)
        cache_evidence: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="speedwatch-torch-trt-") as tmp:
            passed = dict(settings)
            if host is not None:
                private = Path(tmp) / host.name
                loaded = host.read_bytes() if host.is_file() else b""
                private.write_bytes(loaded)
                passed["timing_cache_path"] = str(private)
            with torch.inference_mode(False), torch.no_grad():
                compiled = torch_tensorrt.compile(model, ir="dynamo", inputs=[spec_input],
                                                  **passed)
            if host is not None:
                cache_evidence = _save_to_host(trt, private, host, loaded)
                settings["timing_cache_path"] = str(host)  # what the private copy stood for

        evidence: dict[str, Any] = compiled_module_evidence(compiled)
        evidence.update(release_network(version) or {})
        evidence["torch_trt_settings"] = {
            k: sorted(map(str, v)) if isinstance(v, set) else v for k, v in settings.items()
        }
        evidence.update(cache_evidence)
        versions = {"torch_tensorrt": version}
        if trt is not None:
            versions["tensorrt"] = trt_version
        run = _no_grad_call(compiled)
        run(example)  # first call builds lazily-initialised engines outside any capture
        return Compiled(run=run, evidence=evidence, cuda_graph_safe=True, versions=versions,
                        build_choices=engines_build_choices(compiled))


def _no_grad_call(module: Callable[[torch.Tensor], torch.Tensor]
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
    import torch

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return module(x)

    return run


BACKEND = TorchTensorRTBackend()
