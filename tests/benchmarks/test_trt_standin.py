"""The TensorRT stand-in is held to TensorRT's own surface, and the backend's runtime paths
(engine runner, ONNX parser, refit from ONNX, int8 calibration) run against it.

The surface is read from tensorrt-stubs (generated from the real bindings; scripts/setup
installs it and scripts/trt_stubs.py writes the checked copy to typings/): every class,
method, parameter and enum value the stand-in offers must exist there as spelt, so a call
the stand-in accepts is one the real module has. Stand-in-only helpers are listed in
STANDIN_ONLY, and nothing else may be added.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from benchmarks import trt_converter as tc
from benchmarks.backends import tensorrt as trt_backend
from benchmarks.build import fingerprint
from benchmarks.models import build_model, example_input
from benchmarks.profile import OTHER
from benchmarks.spec import BenchSpec
from tests.benchmarks import trt_standin as si

STUBS = Path(__file__).resolve().parents[2] / "typings" / "tensorrt_bindings" / "tensorrt.pyi"
# pinned builds (the default) load and save the host's timing cache: a fresh one per test
pytestmark = pytest.mark.usefixtures("host_tuning_cache")

# Helpers the stand-in has for tests, which TensorRT does not have: nothing else may differ.
STANDIN_ONLY = {
    "ITensor": {"declared_shape", "declared_dtype", "producer"},
    "ILayer": {"weights", "kind", "inputs", "set_input_calls"},
    "INetworkDefinition": {"layers", "weight_names", "strongly_typed"},
    "ICudaEngine": {"evaluate", "refittable", "refitted"},
    "IBuilderConfig": {"memory_pool_limits", "profiles"},
    "IExecutionContext": {"enqueues"},
    "IOptimizationProfile": {"shapes"},
    "ITimingCache": {"entries", "MAGIC"},
    "Weights": {"is_empty", "key", "values", "pointer", "dtype", "size"},
    "Builder": {"logger", "networks"},
    "Logger": {"messages"},
}
# Classes only TensorRT constructs (the real ones have no Python constructor): the
# stand-in's __init__ is its own plumbing, which product code never calls.
MADE_BY_TENSORRT = {"IBuilderConfig", "ICudaEngine", "IExecutionContext", "EngineInspector",
                    "IOptimizationProfile", "ITimingCache", "INetworkDefinition", "ITensor",
                    "ParserError"}
# Stand-in classes whose real counterpart has another name (one stand-in layer class
# plays every ILayer subclass; its attributes are checked per kind below).
RENAMED = {"ParserError": "ParserError"}
LAYER_CLASSES = {
    si.LayerType.CONVOLUTION: "IConvolutionLayer", si.LayerType.POOLING: "IPoolingLayer",
    si.LayerType.ACTIVATION: "IActivationLayer", si.LayerType.SCALE: "IScaleLayer",
    si.LayerType.ELEMENTWISE: "IElementWiseLayer", si.LayerType.UNARY: "IUnaryLayer",
    si.LayerType.SHUFFLE: "IShuffleLayer", si.LayerType.REDUCE: "IReduceLayer",
    si.LayerType.MATRIX_MULTIPLY: "IMatrixMultiplyLayer", si.LayerType.CONSTANT: "IConstantLayer",
    si.LayerType.CAST: "ICastLayer", si.LayerType.IDENTITY: "IIdentityLayer",
    si.LayerType.SLICE: "ISliceLayer",
}


class Surface:
    """Classes of the stubs: members (with bases), method parameters, enum values."""

    def __init__(self, text: str) -> None:
        tree = ast.parse(text)
        self.classes: dict[str, ast.ClassDef] = {
            node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        self.text = text

    def members(self, name: str) -> dict[str, ast.AST]:
        out: dict[str, ast.AST] = {}
        cls = self.classes[name]
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes:
                out.update(self.members(base.id))
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out[node.target.id] = node
            elif isinstance(node, ast.ClassDef):
                out[node.name] = node
        return out

    def params(self, cls: str, method: str) -> list[list[str]]:
        """Parameter names (self excluded) of each overload of cls.method."""
        return [names for names, _ in self.signatures(cls, method)]

    def signatures(self, cls: str, method: str) -> list[tuple[list[str], int]]:
        """(parameter names, how many have no default) of each overload of cls.method."""
        cls_node = self.classes[cls]
        found = [node for node in ast.walk(cls_node)
                 if isinstance(node, ast.FunctionDef) and node.name == method]
        out = []
        for node in found:
            names = [a.arg for a in node.args.args[1:]]
            out.append((names, len(names) - len(node.args.defaults)))
        return out

    def enum_values(self, name: str) -> dict[str, int]:
        block = self.text[self.text.index(f"\nclass {name}"):]
        block = block[:block.index("\nclass ", 1)]
        return {m: int(v) for m, v in re.findall(rf"# value = <{name}\.(\w+): (-?\d+)>", block)}


@pytest.fixture(scope="module")
def surface() -> Surface:
    if not STUBS.is_file():
        pytest.fail(f"{STUBS} is missing: run `bash scripts/setup` (installs tensorrt-stubs and "
                    "writes the checked stubs with scripts/trt_stubs.py)")
    return Surface(STUBS.read_text())


def standin_classes() -> dict[str, type]:
    return {name: value for name, value in vars(si.TensorRTStandIn).items()
            if isinstance(value, type) and not name.startswith("_")}


def test_every_enum_member_of_the_standin_has_tensorrts_value(surface: Surface) -> None:
    for name, cls in standin_classes().items():
        if issubclass(cls, si._Enum):
            real = surface.enum_values(name)
            mine = {m.name: int(m.value) for m in cls}
            assert mine.items() <= real.items(), (name, set(mine.items()) - set(real.items()))


def test_every_standin_method_and_attribute_exists_in_tensorrt_with_its_parameters(
    surface: Surface,
) -> None:
    for name, cls in standin_classes().items():
        if issubclass(cls, si._Enum) or name == "ILayer":
            continue
        real_name = RENAMED.get(name, name)
        assert real_name in surface.classes, f"trt.{real_name} does not exist"
        real = surface.members(real_name)
        for attr, value in vars(cls).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            if attr in STANDIN_ONLY.get(name, set()) or attr in ("Severity",) or attr.isupper():
                continue
            if attr == "__init__" and name in MADE_BY_TENSORRT:
                assert "__init__" not in real, f"trt.{real_name} has a constructor: mirror it"
                continue
            assert attr in real, f"trt.{real_name}.{attr} does not exist in TensorRT"
            if inspect.isfunction(value):
                parameters = inspect.signature(value).parameters
                if any(p.kind == p.VAR_POSITIONAL for p in parameters.values()):
                    continue  # emulates the overloads itself (Weights), tested on its own
                mine = [p for p in parameters if p != "self"]
                overloads = surface.signatures(real_name, attr)
                # same names in the same order; the stand-in may leave out trailing
                # parameters that have a default in TensorRT, never a required one
                assert any(mine == names[:len(mine)] and len(mine) >= required
                           for names, required in overloads), (name, attr, mine, overloads)


def test_every_settable_layer_attribute_exists_on_its_tensorrt_layer_class(
    surface: Surface,
) -> None:
    base = surface.members("ILayer")
    for kind, attributes in si._ATTRIBUTES.items():
        real = {**base, **surface.members(LAYER_CLASSES[kind])}
        for attr in attributes:
            assert attr in real, f"{LAYER_CLASSES[kind]}.{attr} does not exist"


def test_network_methods_take_tensorrts_parameter_names(surface: Surface) -> None:
    for attr, value in vars(si.INetworkDefinition).items():
        if attr.startswith("add_") or attr in ("mark_output", "set_weights_name"):
            mine = [p for p in inspect.signature(value).parameters if p != "self"]
            assert mine in surface.params("INetworkDefinition", attr), attr


# ------------------------------------------------------------------ calls TensorRT refuses


def test_objects_take_no_attribute_tensorrt_does_not_have() -> None:
    trt = si.TensorRTStandIn()
    builder = trt.Builder(trt.Logger())
    config = builder.create_builder_config()
    with pytest.raises(AttributeError):
        config.max_workspace_size = 1 << 30  # type: ignore[attr-defined]  # gone in TRT 10
    network = builder.create_network(0)
    with pytest.raises(AttributeError):
        network.name_of_my_choice = 1  # type: ignore[attr-defined]


def test_ranks_are_checked_when_the_layer_is_created() -> None:
    trt = si.TensorRTStandIn()
    network = trt.Builder(trt.Logger()).create_network(0)
    flat = network.add_input("x", trt.float32, (2, 8))
    with pytest.raises(ValueError, match="rank"):
        network.add_scale(flat, trt.ScaleMode.CHANNEL)
    image = network.add_input("y", trt.float32, (2, 8, 4, 4))
    with pytest.raises(ValueError, match="rank"):
        network.add_convolution_nd(flat, 4, (3, 3), trt.Weights(np.ones((4, 8, 3, 3), np.float32)))
    bias = si._out(network.add_constant((8,), trt.Weights(np.ones(8, np.float32))))
    with pytest.raises(ValueError, match="equal rank"):
        network.add_elementwise(image, bias, trt.ElementWiseOperation.SUM)
    assert image.shape == (2, 8, 4, 4) and bias.shape == (8,)


def test_missing_weights_names_what_a_partial_refit_left_out() -> None:
    spec = BenchSpec(model="resnet18", backend="tensorrt", width=8, image_size=32,
                     num_classes=10, weights="refit").validate()
    model = build_model(spec).eval()
    trt = si.TensorRTStandIn()
    report = tc.build_network(trt, model, (1, 3, 32, 32), spec)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(tc.build_plan(trt, report).plan)
    assert engine is not None
    refitter = trt.Refitter(engine, trt.Logger())
    kernel = tc.named_weight_values(model)["conv1.weight"].numpy().copy()
    assert refitter.set_named_weights("conv1.weight", trt.Weights(kernel))
    # conv1 feeds bn1's scale layer only: TensorRT fuses them, so they refit together
    assert refitter.get_missing_weights() == ["bn1.power", "bn1.scale", "bn1.shift"]
    assert not refitter.refit_cuda_engine()


# ------------------------------------------------------------------ the backend on the stand-in


@pytest.fixture
def standin_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The tensorrt backend with the stand-in where `import tensorrt` would be, no CUDA
    check, and stream handle 0: so compile(), _EngineRunner, _parse_onnx and
    _refit_from_onnx run here on CPU tensors."""
    monkeypatch.setattr(trt_backend, "_import_tensorrt", si.TensorRTStandIn)
    monkeypatch.setattr(trt_backend, "cuda_only_reason", lambda spec, product: None)
    monkeypatch.setattr(trt_backend, "_current_stream", lambda: 0)
    return trt_backend.BACKEND


@pytest.mark.parametrize(("weights", "path", "shape_mode"), [
    ("constant", "network", "static"), ("tensor", "network", "dynamic"),
    ("refit", "network", "static"), ("constant", "onnx", "static"),
    ("refit", "onnx", "dynamic"),
])
def test_backend_compiles_runs_and_refits_on_the_standin(
    standin_backend: Any, weights: str, path: str, shape_mode: str,
) -> None:
    spec = BenchSpec(model="resnet18", backend="tensorrt", width=8, image_size=32,
                     num_classes=10, batch_size=2, device="cuda", weights=weights,
                     shape_mode=shape_mode, options={"path": path}).validate()
    model = build_model(spec).eval()
    x = example_input(spec)
    compiled = standin_backend.compile(model, x, spec)
    with torch.no_grad():
        expected = model(x)
    out = compiled.run(x)
    assert float((out - expected).norm() / expected.norm()) < 1e-5
    if shape_mode == "dynamic":
        smaller = x[:1].contiguous()
        assert float((compiled.run(smaller) - model(smaller)).norm()) < 1e-4
    assert compiled.evidence["trt_path"] == path
    if weights == "refit":
        assert compiled.evidence["trt_refit_count"] > 0


@pytest.mark.parametrize("path", ["network", "onnx"])
def test_backend_pins_tactics_through_the_hosts_timing_cache(
    standin_backend: Any, host_tuning_cache: Path, monkeypatch: pytest.MonkeyPatch, path: str,
) -> None:
    spec = BenchSpec(model="resnet18", backend="tensorrt", width=8, image_size=32,
                     num_classes=10, device="cuda", options={"path": path}).validate()
    model = build_model(spec).eval()
    x = example_input(spec)
    first = standin_backend.compile(model, x, spec)
    cache = host_tuning_cache / "tensorrt" / "0.0.0-standin-nvidia-h100-sm90.timing-cache"
    assert first.evidence["trt_timing_cache"] == str(cache)
    assert not first.evidence["trt_timing_cache_loaded"]
    assert first.evidence["trt_timing_cache_saved"] and cache.is_file()
    assert len(first.build_choices) == first.evidence["trt_engine_layers"]
    # timing noise would pick other tactics now, but the second build replays the first's
    monkeypatch.setattr(si, "fastest_tactic", lambda key, candidates: candidates - 1)
    second = standin_backend.compile(model, x, spec)
    assert second.evidence["trt_timing_cache_loaded"]
    assert second.build_choices == first.build_choices
    assert fingerprint(second.build_choices) == fingerprint(first.build_choices)


def test_onnx_parser_failure_reports_the_parsers_errors(standin_backend: Any) -> None:
    class Gelu(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.gelu(x)

    spec = BenchSpec(model="resnet18", backend="tensorrt", width=8, image_size=32,
                     device="cuda", options={"path": "onnx"}).validate()
    with pytest.raises(tc.ConversionError, match="ONNX parser failed: no importer"):
        standin_backend.compile(Gelu(), torch.randn(1, 3, 32, 32), spec)


def test_int8_runs_the_calibrator_through_tensorrts_calibration_protocol() -> None:
    spec = BenchSpec(model="resnet18", backend="tensorrt", width=8, image_size=32,
                     num_classes=10, precision="int8").validate()
    model = build_model(spec).eval()
    trt = si.TensorRTStandIn()
    report = tc.build_network(trt, model, (1, 3, 32, 32), spec)
    assert report.builder_flags == ["INT8", "FP16"]
    assert isinstance(report.config.int8_calibrator, trt.IInt8EntropyCalibrator2)
    calibrator: Any = report.config.int8_calibrator  # ours, with its own batch counter
    tc.build_plan(trt, report)
    assert calibrator.index == tc.CALIBRATION_BATCHES  # every batch was read
    assert calibrator.read_calibration_cache() is not None  # and the cache written


def test_int8_refuses_a_strongly_typed_network() -> None:
    spec = BenchSpec(backend="tensorrt", precision="int8",
                     options={"strongly_typed": True}).validate()
    with pytest.raises(tc.ConversionError, match="weakly typed"):
        tc.start_network(si.TensorRTStandIn(), spec, tc.ConverterOptions.for_spec(spec),
                         io_dtype=None, path="network")


def test_the_backend_profiles_each_engine_layer_through_an_iprofiler(
    standin_backend: Any,
) -> None:
    spec = BenchSpec(model="resnet18", backend="tensorrt", width=8, image_size=32,
                     num_classes=10, batch_size=1, device="cuda").validate()
    model = build_model(spec).eval()
    x = example_input(spec)
    compiled = standin_backend.compile(model, x, spec)
    assert compiled.profile is not None
    profile = compiled.profile(x, 3)
    assert (profile["source"], profile["what"], profile["inferences"]) == (
        "tensorrt", "layers", 3)
    rows = {e["name"]: e for e in profile["entries"]}
    # grouped by the engine inspector's kernel family
    convolutions = [e for e in rows.values() if e["group"] == "CaskConvolution"]
    assert convolutions and all(e["calls"] == 1.0 for e in rows.values() if e["name"] != OTHER)
    assert convolutions[0]["us"] == pytest.approx(50.0)  # the stand-in's 0.05 ms a run
    # the timed context never carries the profiler
    assert compiled.run.context.profiler is None


def test_a_profiler_that_skips_the_base_init_is_refused_as_tensorrt_refuses_it() -> None:
    class Careless(si.IProfiler):
        def __init__(self) -> None:
            pass

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            pass

    context = si.IExecutionContext.__new__(si.IExecutionContext)
    with pytest.raises(TypeError, match=r"did not call IProfiler\.__init__"):
        context.profiler = Careless()
