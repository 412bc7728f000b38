"""The TensorRT converter, specified against the recording TensorRT stand-in.

TensorRT cannot be installed here, so these tests check the network our converter builds
(layers, weight wiring, builder flags, profiles, names) with tests/benchmarks/trt_standin.py
and evaluate that network numerically against the eager model. Tests marked
`needs_tensorrt` run the same converter against the real module wherever it imports.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch import nn

from benchmarks import trt_converter as tc
from benchmarks import trt_network, trt_options
from benchmarks.backends import get_backend
from benchmarks.backends.tensorrt import (
    NOT_INSTALLED,
    engine_build_choices,
    engine_layer_evidence,
    engine_layers,
    evidence_diff,
    fused_layer_names,
    spec_problem,
    tensorrt_importable,
)
from benchmarks.build import fingerprint
from benchmarks.models import CUSTOM_OP_NAME, build_model, example_input
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy
from tests.benchmarks import trt_standin as si

HAS_TENSORRT = tensorrt_importable()  # tensorrt-stubs alone is an empty namespace package
needs_tensorrt = pytest.mark.skipif(not HAS_TENSORRT, reason="tensorrt is not importable here")
# pinned builds (the default) load and save the host's timing cache: a fresh one per test
pytestmark = pytest.mark.usefixtures("host_tuning_cache")


@functools.cache
def _built(model: str, width: int, num_classes: int, seed: int) -> nn.Module:
    return build_model(BenchSpec(model=model, width=width, num_classes=num_classes, seed=seed))


def model_for(spec: BenchSpec) -> nn.Module:
    """model_for(spec), built once per architecture and seed (a copy: tests may cast it)."""
    return copy.deepcopy(_built(spec.model, spec.width, spec.num_classes, spec.seed))


def tiny_spec(**kw: Any) -> BenchSpec:
    base: dict[str, Any] = dict(model="resnet18", backend="tensorrt", width=8, image_size=32,
                                batch_size=2, num_classes=10)
    base.update(kw)
    return BenchSpec(**base).validate()


class BiasedResidual(nn.Module):
    """Conv with bias, BN, ReLU, a residual add, global pooling, flatten, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1, bias=True)
        self.bn1 = nn.BatchNorm2d(6)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.flat = nn.Flatten()
        self.fc = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)) + y)
        return self.fc(self.flat(self.pool(y)))


def biased_model(seed: int = 0) -> BiasedResidual:
    torch.manual_seed(seed)
    model = BiasedResidual()
    for bn in (model.bn1, model.bn2):  # non-trivial running statistics
        assert bn.running_mean is not None and bn.running_var is not None
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        nn.init.uniform_(bn.weight, 0.5, 1.5)
        nn.init.uniform_(bn.bias, -0.2, 0.2)
    model.requires_grad_(False)
    return model.eval()


def convert(model: nn.Module, spec: BenchSpec, trt: Any = None,
            shape: tuple[int, ...] = (2, 3, 32, 32)) -> tuple[Any, trt_options.ConversionReport]:
    trt = trt or si.TensorRTStandIn()
    return trt, tc.build_network(trt, model, shape, spec)


def net(report: trt_options.ConversionReport) -> si.INetworkDefinition:
    """The network as the stand-in's type (the report is typed with TensorRT's)."""
    return cast(si.INetworkDefinition, report.network)


def cfg(report: trt_options.ConversionReport) -> si.IBuilderConfig:
    return cast(si.IBuilderConfig, report.config)


def layers_of(report: trt_options.ConversionReport, kind: si.LayerType) -> list[si.ILayer]:
    return [layer for layer in net(report).layers if layer.kind == kind]


def producer_kind(tensor: si.ITensor | None) -> si.LayerType | None:
    assert tensor is not None
    return tensor.producer.kind if tensor.producer is not None else None


def count(model: nn.Module, cls: type[nn.Module]) -> int:
    return sum(isinstance(m, cls) for m in model.modules())


def run_engine(trt: Any, report: trt_options.ConversionReport, x: torch.Tensor) -> torch.Tensor:
    plan = tc.build_plan(trt, report)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan.plan)
    return engine.evaluate({trt_options.INPUT_NAME: x})[trt_options.OUTPUT_NAME]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


# ------------------------------------------------------------------ weight wiring


@pytest.mark.parametrize("weights", ["constant", "refit"])
def test_constant_weights_are_trt_weights_on_every_conv_and_no_constant_layer_feeds_one(
    weights: str,
) -> None:
    model = model_for(tiny_spec())
    _, report = convert(model, tiny_spec(weights=weights))
    convs = layers_of(report, si.LayerType.CONVOLUTION)
    assert len(convs) == count(model, nn.Conv2d)
    for conv in convs:
        assert not conv.weights()["kernel"].is_empty
        assert conv.set_input_calls == []
        assert all(producer_kind(t) != si.LayerType.CONSTANT for t in conv.inputs)
    # BN stays a separate per-channel scale layer: fusing it is TensorRT's job
    assert len(layers_of(report, si.LayerType.SCALE)) == count(model, nn.BatchNorm2d)


def test_constant_conv_bias_is_passed_as_bias_weights() -> None:
    model = biased_model()
    _, report = convert(model, tiny_spec(weights="constant"))
    first = layers_of(report, si.LayerType.CONVOLUTION)[0]
    assert model.conv1.bias is not None
    np.testing.assert_array_equal(first.weights()["bias"].numpy(), model.conv1.bias.numpy())
    assert layers_of(report, si.LayerType.CONVOLUTION)[1].weights()["bias"].is_empty


def test_tensor_weights_enter_every_conv_through_set_input_from_constant_layers() -> None:
    model = biased_model()
    _, report = convert(model, tiny_spec(weights="tensor"))
    convs = layers_of(report, si.LayerType.CONVOLUTION)
    biased = {0}  # conv1 has a bias, conv2 none
    for i, conv in enumerate(convs):
        assert conv.weights()["kernel"].is_empty and conv.weights()["bias"].is_empty
        indices = [index for index, _ in conv.set_input_calls]
        assert indices == ([1, 2] if i in biased else [1])
        for _, tensor in conv.set_input_calls:
            assert producer_kind(tensor) == si.LayerType.CONSTANT
    kernel = convs[0].inputs[1]
    assert kernel is not None and kernel.producer is not None
    np.testing.assert_array_equal(kernel.producer.weights()["weights"].numpy(),
                                  model.conv1.weight.numpy())


def test_tensor_mode_constant_layers_are_one_per_weight_tensor() -> None:
    model = model_for(tiny_spec())
    _, report = convert(model, tiny_spec(weights="tensor"))
    convs = count(model, nn.Conv2d)
    bns = count(model, nn.BatchNorm2d)
    conv_biases = sum(m.bias is not None for m in model.modules() if isinstance(m, nn.Conv2d))
    feeding_convs = [
        tensor for conv in layers_of(report, si.LayerType.CONVOLUTION)
        for _, tensor in conv.set_input_calls
    ]
    assert len(feeding_convs) == convs + conv_biases
    # BN: gamma, beta, mean, var, eps as constants (Torch-TensorRT 2.7's pattern);
    # linear: weight and bias
    constants = layers_of(report, si.LayerType.CONSTANT)
    assert len(constants) == convs + conv_biases + 5 * bns + 2
    assert layers_of(report, si.LayerType.SCALE) == []
    wiring = report.evidence()["trt_weight_wiring"]
    # only conv weights are "tensor" weights; BN's constants are operands, as in 2.6
    assert wiring["tensor"] == convs + conv_biases
    assert wiring["constant-layer"] == 5 * bns + 2


# ------------------------------------------------------------------ the three releases' networks

L = si.LayerType


def residual_adds(model: nn.Module) -> int:
    import operator

    graph = torch.fx.symbolic_trace(model).graph
    return sum(n.op == "call_function" and n.target in (operator.add, operator.iadd)
               for n in graph.nodes)


def mode_spec(mode: str, **kw: Any) -> BenchSpec:
    weights = "tensor" if mode == "trt-2.7" else "constant"
    return tiny_spec(weights=weights, options={"trt_mode": mode}, **kw)


@pytest.mark.parametrize("shape_mode", ["static", "dynamic"])
def test_the_three_release_networks_side_by_side(shape_mode: str) -> None:
    """What each mode builds for the same ResNet, counted per layer type.

    2.6 and 2.7 differ only in how conv weights arrive (trt.Weights vs constant layers into
    set_input); 2.7 and 2.8 also differ in BatchNorm (18 elementwise-pattern layers, 16
    with dynamic shapes, against one scale layer). Each network must also build on the
    stricter stand-in and compute the eager model's function.
    """
    model = model_for(tiny_spec())
    convs, bns = count(model, nn.Conv2d), count(model, nn.BatchNorm2d)
    adds, relus = residual_adds(model), 0
    graph = torch.fx.symbolic_trace(model).graph
    relus = sum(n.op == "call_module" and isinstance(model.get_submodule(n.target), nn.ReLU)
                for n in graph.nodes)
    # slices: eps expanded to C; x*scale and +shift expanded to the activation's shape,
    # only where that shape is static (Torch-TensorRT's broadcast_to_same_shape)
    slices = bns * (3 if shape_mode == "static" else 1)
    elementwise_bn = {L.CONSTANT: 5 * bns, L.SHUFFLE: 3 * bns, L.SLICE: slices,
                      L.UNARY: bns, L.ELEMENTWISE: 6 * bns}
    common = {L.CONVOLUTION: convs, L.ACTIVATION: relus, L.POOLING: 1, L.REDUCE: 1,
              L.SHUFFLE: 1, L.MATRIX_MULTIPLY: 1, L.CONSTANT: 2, L.ELEMENTWISE: adds + 1}

    def plus(*parts: dict[si.LayerType, int]) -> dict[str, int]:
        total: dict[str, int] = {}
        for part in parts:
            for kind, n in part.items():
                if n:
                    total[kind.name] = total.get(kind.name, 0) + n
        return total

    expected = {
        "trt-2.6": plus(common, elementwise_bn),
        "trt-2.7": plus(common, elementwise_bn, {L.CONSTANT: convs}),
        "trt-2.8": plus(common, {L.SCALE: bns}),
    }
    x = torch.randn(2, 3, 32, 32)
    built = {}
    for mode in trt_options.TRT_MODES:
        spec = mode_spec(mode, shape_mode=shape_mode)
        trt, report = convert(model, spec)
        kinds = Counter(layer.kind.name for layer in net(report).layers)
        assert dict(kinds) == expected[mode], mode
        assert report.layer_counts == expected[mode]  # what the evidence reports
        assert report.evidence()["trt_mode"] == mode
        assert rel_err(run_engine(trt, report, x), model(x)) < 1e-5, mode
        built[mode] = report
    # the conv wiring is the one difference between 2.6 and 2.7
    for mode, tensor_weights in (("trt-2.6", False), ("trt-2.7", True), ("trt-2.8", False)):
        for conv in layers_of(built[mode], L.CONVOLUTION):
            assert conv.weights()["kernel"].is_empty is tensor_weights
            assert bool(conv.set_input_calls) is tensor_weights


def test_elementwise_batchnorm_is_built_in_torch_tensorrt_26s_order_and_ranks() -> None:
    """One BatchNorm2d as impl/normalization/ops.py (v2.6.0, v2.7.0) builds it: rank-1
    parameters and a rank-0 eps, eps broadcast by a shuffle and a slice, two reshapes to
    (1, C, 1, 1) and, with a static input, a slice before each of the last two layers."""
    bn = nn.BatchNorm2d(5).eval()
    _, report = convert(nn.Sequential(bn), mode_spec("trt-2.6"), shape=(2, 5, 4, 4))
    layers = net(report).layers
    assert [layer.kind for layer in layers] == [
        L.CONSTANT, L.CONSTANT, L.CONSTANT, L.CONSTANT, L.CONSTANT,  # gamma beta mean var eps
        L.SHUFFLE, L.SLICE, L.ELEMENTWISE,  # var + eps
        L.UNARY, L.ELEMENTWISE, L.ELEMENTWISE, L.ELEMENTWISE,  # sqrt, div, mul, sub
        L.SHUFFLE, L.SHUFFLE,  # scale and shift to (1, C, 1, 1)
        L.SLICE, L.ELEMENTWISE, L.SLICE, L.ELEMENTWISE,  # x * scale + shift
    ]
    assert [layer.shape for layer in layers[:5]] == [(5,), (5,), (5,), (5,), ()]
    ops = [layer.op for layer in layers if layer.kind == L.ELEMENTWISE]
    E = si.ElementWiseOperation
    assert ops == [E.SUM, E.DIV, E.PROD, E.SUB, E.PROD, E.SUM]
    assert layers[14].stride == (0, 1, 0, 0) and layers[14].shape == (2, 5, 4, 4)


@pytest.mark.parametrize(("weights", "mode"), [("constant", "trt-2.7"), ("tensor", "trt-2.6"),
                                               ("tensor", "trt-2.8")])
def test_a_mode_that_contradicts_the_weights_is_refused(weights: str, mode: str) -> None:
    spec = tiny_spec(weights=weights, options={"trt_mode": mode}, device="cuda")
    problem = spec_problem(spec)
    assert problem is not None and "trt_mode" in problem


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(trt_options.ConversionError, match=r"trt-2\.9"):
        trt_options.ConverterOptions.from_spec({"trt_mode": "trt-2.9"})


@pytest.mark.parametrize("mode", trt_options.TRT_MODES)
def test_refit_is_its_own_axis_and_works_with_every_mode(mode: str) -> None:
    spec = tiny_spec(weights="refit", options={"trt_mode": mode})
    first, second = model_for(spec), model_for(tiny_spec(seed=1))
    x = example_input(spec)
    trt, report = convert(first, spec)
    assert report.mode == mode
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(tc.build_plan(trt, report).plan)
    assert tc.refit_engine(trt, engine, second, mode=mode) == len(report.weight_names)
    out = engine.evaluate({trt_options.INPUT_NAME: x})[trt_options.OUTPUT_NAME]
    assert rel_err(out, second(x)) < 1e-5


# ------------------------------------------------------------------ builder configuration


def test_refit_sets_the_refit_flag_and_names_every_weight_after_its_layer_uses_it() -> None:
    model = model_for(tiny_spec())
    _, report = convert(model, tiny_spec(weights="refit"))
    assert cfg(report).get_flag(si.BuilderFlag.REFIT)
    named = net(report).weight_names
    assert sorted(named) == sorted(trt_network.named_weight_values(model))
    conv = layers_of(report, si.LayerType.CONVOLUTION)[0]
    assert named["conv1.weight"] is conv.weights()["kernel"]


@pytest.mark.parametrize("weights", ["constant", "tensor"])
def test_only_refit_builds_a_refittable_network(weights: str) -> None:
    _, report = convert(model_for(tiny_spec()), tiny_spec(weights=weights))
    assert not cfg(report).get_flag(si.BuilderFlag.REFIT)
    assert net(report).weight_names == {}


@pytest.mark.parametrize("weights", ["constant", "tensor"])
@pytest.mark.parametrize(("precision", "flag", "dtype"), [
    ("fp16", "FP16", torch.float16), ("bf16", "BF16", torch.bfloat16)])
def test_reduced_precision_sets_its_flag_and_weights_take_the_input_dtype_without_casts(
    weights: str, precision: str, flag: str, dtype: torch.dtype,
) -> None:
    """Torch-TensorRT 2.6-2.8 convert weights to the input's dtype (impl/conv.py); a
    float32 graph behind cast layers would be a network none of those releases built."""
    spec = tiny_spec(precision=precision, weights=weights)
    trt, report = convert(model_for(spec).to(dtype), spec)
    assert cfg(report).get_flag(si.BuilderFlag[flag])
    assert report.builder_flags == [flag]
    assert not net(report).strongly_typed
    assert layers_of(report, si.LayerType.CAST) == []
    io_type = net(report).get_input(0).declared_dtype
    for layer in net(report).layers:
        for role, w in layer.weights().items():
            assert w.is_empty or w.dtype == io_type, (layer.name, role)
    tc.build_plan(trt, report)


def test_fp32_sets_no_precision_flag() -> None:
    _, report = convert(model_for(tiny_spec()), tiny_spec(precision="fp32"))
    assert not cfg(report).get_flag(si.BuilderFlag.FP16)
    assert not cfg(report).get_flag(si.BuilderFlag.BF16)
    assert layers_of(report, si.LayerType.CAST) == []


def test_strongly_typed_fp16_carries_fp16_weights_and_no_precision_flag() -> None:
    spec = tiny_spec(precision="fp16", options={"strongly_typed": True})
    trt, report = convert(model_for(tiny_spec()).half(), spec)
    assert net(report).strongly_typed and report.builder_flags == []
    conv = layers_of(report, si.LayerType.CONVOLUTION)[0]
    assert conv.weights()["kernel"].dtype == si.DataType.HALF
    tc.build_plan(trt, report)  # the stand-in refuses mixed types in strongly typed nets


def test_tensorrt_11_has_no_weak_typing_so_types_carry_the_precision() -> None:
    trt = si.TensorRT11StandIn()
    spec = tiny_spec(precision="bf16", weights="tensor")
    model = model_for(tiny_spec())
    _, report = convert(model.to(torch.bfloat16), spec, trt)
    assert report.typing == "strong"
    x = example_input(spec)
    out = run_engine(trt, report, x.to(torch.bfloat16))
    assert rel_err(out, model.float()(x)) < 0.05


def test_dynamic_shape_gets_a_profile_from_one_to_twice_the_batch() -> None:
    spec = tiny_spec(shape_mode="dynamic", batch_size=4)
    _, report = convert(model_for(spec), spec, shape=(4, 3, 32, 32))
    assert net(report).get_input(0).declared_shape == (-1, 3, 32, 32)
    (profile,) = cfg(report).profiles
    assert profile.get_shape(trt_options.INPUT_NAME) == [(1, 3, 32, 32), (4, 3, 32, 32),
                                                         (8, 3, 32, 32)]
    assert report.profile == {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32],
                              "max": [8, 3, 32, 32]}


def test_static_shape_has_no_profile() -> None:
    _, report = convert(model_for(tiny_spec()), tiny_spec())
    assert cfg(report).profiles == []
    assert net(report).get_input(0).declared_shape == (2, 3, 32, 32)


def test_optimization_level_and_workspace_come_from_the_options() -> None:
    spec = tiny_spec(options={"optimization_level": 5, "workspace_mb": 64})
    _, report = convert(model_for(spec), spec)
    assert cfg(report).builder_optimization_level == 5
    assert cfg(report).memory_pool_limits[si.MemoryPoolType.WORKSPACE] == 64 << 20
    assert cfg(report).profiling_verbosity == si.ProfilingVerbosity.DETAILED


def test_default_optimization_level_is_three() -> None:
    _, report = convert(model_for(tiny_spec()), tiny_spec())
    assert cfg(report).builder_optimization_level == 3


@pytest.mark.parametrize(("options", "message"), [
    ({"optimization_level": 7}, "optimization_level"),
    ({"optimization_level": "3"}, "optimization_level"),
    ({"fold_bn": "yes"}, "fold_bn"),
    ({"workspace_mb": 0}, "workspace_mb"),
])
def test_bad_options_are_refused_with_their_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(trt_options.ConversionError, match=message):
        convert(model_for(tiny_spec()), tiny_spec(options=options))


def test_timing_cache_is_saved_after_a_build_and_loaded_by_the_next(tmp_path: Path) -> None:
    cache = tmp_path / "sub" / "trt.cache"
    spec = tiny_spec(options={"timing_cache": str(cache)})
    trt, first = convert(model_for(spec), spec)
    assert not first.timing_cache_loaded
    assert tc.build_plan(trt, first).timing_cache_saved
    saved = cached_tactics(cache)
    # another image size: layer configurations the first build never timed
    wider = tiny_spec(options={"timing_cache": str(cache)}, image_size=64)
    trt, second = convert(model_for(wider), wider, shape=(2, 3, 64, 64))
    assert second.timing_cache_loaded
    tc.build_plan(trt, second)
    after = cached_tactics(cache)
    assert saved.items() < after.items()  # kept what it loaded, added what it timed


# ------------------------------------------------------------------ pinned builds


def cached_tactics(path: Path) -> dict[str, int]:
    """The stand-in timing cache saved at `path`: layer configuration -> tactic."""
    config = si.IBuilderConfig()
    return config.create_timing_cache(path.read_bytes()).entries


def built_choices(trt: Any, report: trt_options.ConversionReport) -> Any:
    """Build `report` and return the engine's build choices (what build_fingerprint hashes)."""
    plan = tc.build_plan(trt, report)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan.plan)
    return engine_build_choices(engine_layers(trt, engine))


def host_cache(tuning_dir: Path) -> Path:
    """The host's TensorRT timing cache: named for the TensorRT version and the GPU."""
    return tuning_dir / "tensorrt" / "0.0.0-standin-nvidia-h100-sm90.timing-cache"


def as_shipped(**kw: Any) -> BenchSpec:
    return tiny_spec(timing=TimingPolicy(builds="as-shipped"), **kw)


def other_tactics_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timing noise: from now on the stand-in's timing finds another candidate fastest."""
    monkeypatch.setattr(si, "fastest_tactic", lambda key, candidates: candidates - 1)


def test_pinned_builds_use_the_hosts_timing_cache_named_for_tensorrt_and_the_gpu(
    host_tuning_cache: Path,
) -> None:
    spec = tiny_spec()
    assert spec.timing.builds == "pinned"  # the default
    trt, report = convert(model_for(spec), spec)
    path = host_cache(host_tuning_cache)
    assert report.timing_cache_path == str(path)
    assert report.evidence()["trt_timing_cache"] == str(path)
    assert not report.timing_cache_loaded
    assert tc.build_plan(trt, report).timing_cache_saved
    assert len(cached_tactics(path)) > 0


def test_a_second_pinned_build_replays_the_tactics_the_first_saved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = tiny_spec()
    trt, first = convert(model_for(spec), spec)
    choices = built_choices(trt, first)
    other_tactics_win(monkeypatch)
    trt, second = convert(model_for(spec), spec)
    assert second.timing_cache_loaded
    assert fingerprint(built_choices(trt, second)) == fingerprint(choices)
    # the same noise in a build without the cache: other tactics, another fingerprint
    trt, fresh = convert(model_for(spec), as_shipped())
    assert fingerprint(built_choices(trt, fresh)) != fingerprint(choices)


def test_the_fingerprint_follows_the_tactics_not_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = as_shipped()
    trt, first = convert(model_for(spec), spec)
    trt, second = convert(model_for(spec), spec)
    a, b = built_choices(trt, first), built_choices(trt, second)
    assert a is not None and fingerprint(a) == fingerprint(b)
    # one entry per engine layer, in engine order, with the tactic the build chose
    assert [layer["Name"] for layer in a] == [layer.name for layer in net(first).layers]
    assert all({"LayerType", "TacticName", "TacticValue"} <= set(layer) for layer in a)
    other_tactics_win(monkeypatch)
    trt, third = convert(model_for(spec), spec)
    c = built_choices(trt, third)
    assert [layer["Name"] for layer in c] == [layer["Name"] for layer in a]
    assert fingerprint(c) != fingerprint(a)


def test_an_engine_without_detailed_layer_information_has_no_build_choices() -> None:
    # layer names alone cannot tell one tactic from another
    assert engine_build_choices(["conv1 + bn1 + relu", "fc"]) is None
    assert engine_build_choices([]) is None
    detailed = [{"Name": "conv1", "LayerType": "CaskConvolution", "ParameterType": "Convolution",
                 "TacticName": "sm90_xmma_fprop", "TacticValue": "0x11bde0e1d9f2f35d"}]
    assert engine_build_choices(detailed) == [
        {"Name": "conv1", "LayerType": "CaskConvolution", "TacticName": "sm90_xmma_fprop",
         "TacticValue": "0x11bde0e1d9f2f35d"}]


def test_builds_saving_one_after_the_other_merge_their_timing_caches(
    host_tuning_cache: Path, tmp_path: Path,
) -> None:
    """Two workers load the host's cache, build, and save: the second to save must keep
    what the first saved meanwhile, not replace it with its own entries."""
    small, large = tiny_spec(), tiny_spec(image_size=64)
    trt_a, a = convert(model_for(small), small)
    trt_b, b = convert(model_for(large), large, shape=(2, 3, 64, 64))
    assert not a.timing_cache_loaded and not b.timing_cache_loaded  # both started empty
    assert not tc.build_plan(trt_a, a).timing_cache_merged
    saved_a = cached_tactics(host_cache(host_tuning_cache))
    built_b = tc.build_plan(trt_b, b)
    assert built_b.timing_cache_saved and built_b.timing_cache_merged
    # what b timed on its own, through a cache nobody else uses
    alone = tiny_spec(image_size=64, options={"timing_cache": str(tmp_path / "alone")})
    trt, only_b = convert(model_for(alone), alone, shape=(2, 3, 64, 64))
    tc.build_plan(trt, only_b)
    own_b = cached_tactics(tmp_path / "alone")
    assert saved_a.keys() - own_b.keys()  # b alone would have lost these
    assert cached_tactics(host_cache(host_tuning_cache)) == {**own_b, **saved_a}


def test_as_shipped_builds_time_their_tactics_afresh_without_a_cache(
    host_tuning_cache: Path,
) -> None:
    spec = as_shipped()
    trt, report = convert(model_for(spec), spec)
    assert report.timing_cache_path is None
    assert cfg(report).get_timing_cache() is None
    built = tc.build_plan(trt, report)
    assert not built.timing_cache_saved
    assert not host_tuning_cache.exists()


@pytest.mark.parametrize("builds", ["pinned", "as-shipped"])
def test_a_timing_cache_the_options_name_is_used_in_either_mode(
    builds: str, host_tuning_cache: Path, tmp_path: Path,
) -> None:
    mine = tmp_path / "mine.cache"
    spec = tiny_spec(timing=TimingPolicy(builds=builds), options={"timing_cache": str(mine)})
    trt, report = convert(model_for(spec), spec)
    assert report.timing_cache_path == str(mine)
    assert tc.build_plan(trt, report).timing_cache_saved
    assert mine.is_file() and not host_tuning_cache.exists()


def test_a_failed_build_raises_with_tensorrts_logged_reason() -> None:
    spec = tiny_spec(precision="fp16", options={"strongly_typed": True})
    trt, report = convert(model_for(tiny_spec()).half(), spec)
    cfg(report).set_flag(trt.BuilderFlag.FP16)  # TensorRT refuses this combination
    with pytest.raises(trt_options.ConversionError, match="strongly typed"):
        tc.build_plan(trt, report)


# ------------------------------------------------------------------ arithmetic


def test_batchnorm_scale_layer_matches_torch_batchnorm_numerically() -> None:
    torch.manual_seed(3)
    bn = nn.BatchNorm2d(5, eps=1e-3).eval().requires_grad_(False)
    assert bn.running_mean is not None and bn.running_var is not None
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.2, 3)
    nn.init.uniform_(bn.weight, -2, 2)
    nn.init.uniform_(bn.bias, -1, 1)
    _, report = convert(nn.Sequential(bn), tiny_spec(), shape=(2, 5, 4, 4))
    (scale_layer,) = layers_of(report, si.LayerType.SCALE)
    assert scale_layer.mode == si.ScaleMode.CHANNEL and scale_layer.channel_axis == 1
    w = scale_layer.weights()
    np.testing.assert_array_equal(w["power"].numpy(), np.ones(5, np.float32))  # as 2.8 does
    x = torch.randn(2, 5, 4, 4)
    view = (1, 5, 1, 1)
    y = (x.numpy() * w["scale"].numpy().reshape(view) + w["shift"].numpy().reshape(view)) ** 1
    np.testing.assert_allclose(y, bn(x).detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weights", ["constant", "tensor", "refit"])
@pytest.mark.parametrize("fold_bn", [False, True])
def test_network_evaluates_to_the_eager_resnet(weights: str, fold_bn: bool) -> None:
    spec = tiny_spec(weights=weights, options={"fold_bn": fold_bn})
    model = model_for(spec)
    x = example_input(spec)
    trt, report = convert(model, spec)
    assert rel_err(run_engine(trt, report, x), model(x)) < 1e-5
    if fold_bn:
        assert layers_of(report, si.LayerType.SCALE) == []


def test_biased_residual_network_evaluates_to_eager_in_tensor_mode() -> None:
    model = biased_model()
    x = torch.randn(2, 3, 32, 32)
    trt, report = convert(model, tiny_spec(weights="tensor"))
    assert rel_err(run_engine(trt, report, x), model(x)) < 1e-5


def test_dynamic_network_evaluates_at_the_smallest_and_largest_batch() -> None:
    spec = tiny_spec(shape_mode="dynamic", batch_size=2, weights="tensor")
    model = model_for(spec)
    trt, report = convert(model, spec)
    plan = tc.build_plan(trt, report)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan.plan)
    for batch in (1, 4):
        x = torch.randn(batch, 3, 32, 32)
        out = engine.evaluate({trt_options.INPUT_NAME: x})[trt_options.OUTPUT_NAME]
        assert rel_err(out, model(x)) < 1e-5


def test_resnet50_bottlenecks_convert_and_match_eager() -> None:
    spec = tiny_spec(model="resnet50")
    model = model_for(spec)
    x = example_input(spec)
    trt, report = convert(model, spec)
    assert report.layer_counts["CONVOLUTION"] == count(model, nn.Conv2d)
    assert rel_err(run_engine(trt, report, x), model(x)) < 1e-5


# ------------------------------------------------------------------ refit


def test_refit_swaps_in_another_models_weights_without_a_rebuild() -> None:
    spec = tiny_spec(weights="refit")
    first, second = model_for(spec), model_for(tiny_spec(seed=1))
    x = example_input(spec)
    trt, report = convert(first, spec)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(tc.build_plan(trt, report).plan)
    refit = tc.refit_engine(trt, engine, second)
    assert refit == len(report.weight_names) > 0
    out = engine.evaluate({trt_options.INPUT_NAME: x})[trt_options.OUTPUT_NAME]
    assert rel_err(out, second(x)) < 1e-5
    assert rel_err(out, first(x)) > 1e-2


def test_refit_of_a_non_refittable_engine_fails_clearly() -> None:
    spec = tiny_spec(weights="constant")
    model = model_for(spec)
    trt, report = convert(model, spec)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(tc.build_plan(trt, report).plan)
    with pytest.raises(trt_options.ConversionError, match="refit"):
        tc.refit_engine(trt, engine, model)


# ------------------------------------------------------------------ what cannot convert


def test_custom_op_is_reported_unsupported_by_name() -> None:
    spec = tiny_spec(model="resnet50-customop")
    with pytest.raises(trt_options.UnsupportedOp, match=CUSTOM_OP_NAME) as info:
        convert(model_for(spec), spec)
    assert info.value.op == CUSTOM_OP_NAME
    assert "plugin" in str(info.value)


def test_unsupported_module_is_named() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GELU()).eval()
    with pytest.raises(trt_options.UnsupportedOp, match="GELU"):
        convert(model, tiny_spec(), shape=(2, 3, 8, 8))


def test_unsupported_function_is_named() -> None:
    class Sigmoid(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(x)

    with pytest.raises(trt_options.UnsupportedOp, match="sigmoid"):
        convert(Sigmoid(), tiny_spec(), shape=(2, 3, 8, 8))


# ------------------------------------------------------------------ the stand-in is strict


def test_standin_refuses_calls_that_do_not_match_tensorrt_signatures() -> None:
    trt = si.TensorRTStandIn()
    network = trt.Builder(trt.Logger()).create_network(0)
    x = network.add_input("input", trt.float32, (1, 3, 8, 8))
    kernel = trt.Weights(np.ones((4, 3, 3, 3), np.float32))
    with pytest.raises(TypeError):
        network.add_convolution_nd(x, 4, (3, 3), kernel, bias=None, stride=(1, 1))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        network.add_convolution_nd(x, 4, (3, 3), "weights")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        network.add_activation(x)  # type: ignore[call-arg]
    layer = network.add_convolution_nd(x, 4, (3, 3), kernel)
    with pytest.raises(AttributeError):
        layer.stride = (2, 2)  # TensorRT 10 spells it stride_nd
    with pytest.raises(AttributeError):
        _ = trt.add_fully_connected  # removed in TensorRT 10


def test_standin_names_weights_only_once_a_layer_uses_them() -> None:
    trt = si.TensorRTStandIn()
    network = trt.Builder(trt.Logger()).create_network(0)
    weights = trt.Weights(np.ones((2, 2), np.float32))
    assert not network.set_weights_name(weights, "w")
    network.add_constant((2, 2), weights)
    assert network.set_weights_name(weights, "w")


# ------------------------------------------------------------------ backend surface


def test_engine_evidence_speaks_the_inspectors_vocabulary_not_the_networks() -> None:
    """The inspector's LayerType is a kernel family; its counts are reported under engine
    keys and never beside the network's layer types, which count something else."""
    spec = tiny_spec()
    model = model_for(spec)
    trt, report = convert(model, spec)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(tc.build_plan(trt, report).plan)
    evidence = engine_layer_evidence(trt, engine)
    # the stand-in does not fuse: its engine has exactly the network's layers
    assert evidence["trt_engine_layers"] == sum(report.layer_counts.values())
    assert evidence["trt_engine_kernel_families"]["CaskConvolution"] == count(model, nn.Conv2d)
    assert "CONVOLUTION" not in evidence["trt_engine_kernel_families"]
    assert evidence["trt_engine_fused_layers"] == 0
    assert not {"trt_layer_count", "trt_layers_by_type"} & set(evidence)


def test_fused_engine_layer_names_are_split_into_network_layers() -> None:
    assert fused_layer_names("conv1 + bn1 + relu") == ["conv1", "bn1", "relu"]
    assert fused_layer_names("PWN(PWN(add_1, relu_2), x)") == ["add_1", "relu_2", "x"]
    assert fused_layer_names("Reformatting CopyNode for Input Tensor 0") == [
        "Reformatting CopyNode for Input Tensor 0"]


def test_evidence_diff_compares_like_with_like() -> None:
    before = {"trt_network_layers_by_type": {"CONVOLUTION": 20, "SCALE": 20},
              "trt_engine_kernel_families": {"CaskConvolution": 20, "PointWiseV2": 3}}
    after = {"trt_network_layers_by_type": {"CONVOLUTION": 20, "CONSTANT": 120},
             "trt_engine_kernel_families": {"CaskConvolution": 20, "PointWiseV2": 41}}
    assert evidence_diff(before, after) == {
        "trt_network_layers_by_type": {"CONSTANT": 120, "SCALE": -20},
        "trt_engine_kernel_families": {"PointWiseV2": 38},
    }


@pytest.mark.skipif(HAS_TENSORRT, reason="tensorrt is importable here")
def test_backend_says_tensorrt_is_not_installed_here() -> None:
    spec = tiny_spec(device="cuda")
    assert get_backend("tensorrt").unavailable_reason(spec) == NOT_INSTALLED


@needs_tensorrt
def test_backend_needs_a_cuda_device() -> None:
    assert get_backend("tensorrt").unavailable_reason(tiny_spec(device="cpu")) == \
        "TensorRT needs a CUDA device"


@pytest.mark.parametrize(("options", "weights", "message"), [
    ({"path": "onnx"}, "tensor", "no ONNX-parser form"),
    ({"path": "plan"}, "constant", "option path"),
    ({"optimisation_level": 3}, "constant", "unknown tensorrt option"),
    ({"optimization_level": 9}, "constant", "optimization_level"),
])
def test_specs_the_backend_can_never_run_say_why(options: dict[str, Any], weights: str,
                                                 message: str) -> None:
    spec = tiny_spec(options=options, weights=weights, device="cuda")
    problem = spec_problem(spec)
    assert problem is not None and message in problem
    assert get_backend("tensorrt").unavailable_reason(spec) == problem


needs_gpu_tensorrt = pytest.mark.skipif(
    not (HAS_TENSORRT and torch.cuda.is_available()), reason="needs tensorrt and a CUDA GPU")


@needs_gpu_tensorrt
@pytest.mark.parametrize(("weights", "path", "shape_mode"), [
    ("constant", "network", "static"), ("tensor", "network", "dynamic"),
    ("refit", "network", "static"), ("constant", "onnx", "static"), ("refit", "onnx", "static"),
])
def test_real_tensorrt_engine_matches_eager(weights: str, path: str, shape_mode: str) -> None:
    spec = tiny_spec(weights=weights, device="cuda", shape_mode=shape_mode,
                     options={"path": path})
    model = model_for(spec).cuda()
    x = example_input(spec).cuda()
    compiled = get_backend("tensorrt").compile(model, x, spec)
    with torch.no_grad():
        assert rel_err(compiled.run(x), model(x)) < 1e-2  # TF32 kernels are allowed
    assert compiled.evidence["trt_engine_layers"] > 0
    if weights == "refit":
        assert compiled.evidence["trt_refit_count"] > 0
