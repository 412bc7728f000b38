"""The torch_tensorrt backend: `torch_tensorrt.compile(ir="dynamo")`, settings passed through.

Weights: `constant` compiles with immutable_weights=True (weights baked into the engines);
`tensor` and `refit` with immutable_weights=False, the refittable build whose converters
keep weights as refittable tensors. Versions before 2.6 call the flag `make_refittable`
(its negation), and 2.14 dropped `enabled_precisions` (the model's dtype decides, explicit
typing): the installed signature decides what is passed, never a version string.

Every other key of spec.options is passed to the compiler as is (`optimization_level`,
`min_block_size`, `workspace_size`, `use_python_runtime`, ...) if the installed
torch_tensorrt knows it; an unknown one is refused with its name rather than ignored.
`timing_cache` is accepted as an alias of `timing_cache_path`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from benchmarks.backends.base import BackendUnavailable, Compiled, cuda_only_reason

if TYPE_CHECKING:
    import torch

    from benchmarks.spec import BenchSpec

NOT_INSTALLED = "torch_tensorrt is not installed (NVIDIA wheels unreachable here)"
ALIASES = {"timing_cache": "timing_cache_path"}
# settings this backend derives from the spec itself; an option may not override them
DERIVED = ("inputs", "arg_inputs", "enabled_precisions", "immutable_weights",
           "make_refittable", "ir")
# options the runner reads itself (benchmarks/runner.py), never compiler settings
RUNNER_OPTIONS = ("threads", "cudnn_benchmark")


def _import_torch_tensorrt() -> Any:
    import torch_tensorrt

    return torch_tensorrt


def compile_settings(spec: BenchSpec, accepted: Iterable[str], version: str) -> dict[str, Any]:
    """The keyword arguments for torch_tensorrt.compile, given the names the installed
    `torch_tensorrt.dynamo.compile` accepts. Raises BackendUnavailable when a setting the
    spec needs (refit, an option) does not exist in this version."""
    from benchmarks.models import model_dtype

    names = set(accepted)
    settings: dict[str, Any] = {}
    if "enabled_precisions" in names:
        settings["enabled_precisions"] = {model_dtype(spec.precision)}
    refittable = spec.weights != "constant"
    if "immutable_weights" in names:
        settings["immutable_weights"] = not refittable
    elif "make_refittable" in names:
        settings["make_refittable"] = refittable
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
        if key in RUNNER_OPTIONS:
            continue
        name = ALIASES.get(key, key)
        if name in DERIVED:
            raise BackendUnavailable(f"option {key}: derived from the spec, not settable")
        if name not in names:
            raise BackendUnavailable(f"option {key}: not a setting of torch_tensorrt {version}")
        settings[name] = value
    return settings


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
            _import_torch_tensorrt()
        except ImportError as exc:
            missing = getattr(exc, "name", None)
            if missing in (None, "torch_tensorrt"):
                return NOT_INSTALLED
            return f"torch_tensorrt cannot be imported: {exc}"
        return cuda_only_reason(spec, "Torch-TensorRT")

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
        with torch.inference_mode(False), torch.no_grad():
            compiled = torch_tensorrt.compile(model, ir="dynamo", inputs=[spec_input], **settings)

        evidence: dict[str, Any] = compiled_module_evidence(compiled)
        evidence["torch_trt_settings"] = {
            k: sorted(map(str, v)) if isinstance(v, set) else v for k, v in settings.items()
        }
        versions = {"torch_tensorrt": version}
        try:
            import tensorrt

            versions["tensorrt"] = str(tensorrt.__version__)
        except ImportError:
            pass
        run = _no_grad_call(compiled)
        run(example)  # first call builds lazily-initialised engines outside any capture
        return Compiled(run=run, evidence=evidence, cuda_graph_safe=True, versions=versions)


def _no_grad_call(module: Callable[[torch.Tensor], torch.Tensor]
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
    import torch

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return module(x)

    return run


BACKEND = TorchTensorRTBackend()
