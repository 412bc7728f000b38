"""The torch_tensorrt backend: which compile settings a spec becomes, per installed version.

torch_tensorrt cannot be installed here; the settings are derived from the parameter names
of `torch_tensorrt.dynamo.compile`, so they are specified against the names real releases
have (read at the release tags: 2.4 refit; 2.5 make_refittable; 2.6-2.12 immutable_weights,
enabled_precisions and use_explicit_typing; 2.13 no enabled_precisions nor
use_explicit_typing). Which conv weight representation a release builds is a property of
its converters, not a setting: 2.7 ITensors, every other release trt.Weights. Compiling for
real needs torch_tensorrt and a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import types
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from benchmarks.backends import BackendUnavailable, get_backend
from benchmarks.backends import torch_tensorrt as torch_trt_backend
from benchmarks.backends.torch_tensorrt import (
    NOT_INSTALLED,
    compile_settings,
    compiled_module_evidence,
    engines_build_choices,
    pinned_timing_cache,
    release_network,
    weights_problem,
)
from benchmarks.build import fingerprint
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy
from tests.benchmarks import trt_standin as si

HAS_TORCH_TRT = importlib.util.find_spec("torch_tensorrt") is not None

COMMON = {"inputs", "arg_inputs", "device", "min_block_size", "optimization_level",
          "workspace_size", "timing_cache_path", "use_python_runtime"}
V2_4 = COMMON | {"enabled_precisions", "refit"}
V2_5 = COMMON | {"enabled_precisions", "make_refittable"}
V2_7 = COMMON | {"enabled_precisions", "immutable_weights", "use_explicit_typing"}
V2_13 = COMMON | {"immutable_weights"}
NO_REFIT = COMMON | {"enabled_precisions"}  # a build without any refit setting


def spec(**kw: Any) -> BenchSpec:
    base: dict[str, Any] = dict(backend="torch_tensorrt", device="cuda", width=8,
                                image_size=32)
    base.update(kw)
    return BenchSpec(**base).validate()


@pytest.mark.parametrize(("weights", "version", "immutable"), [
    ("constant", "2.8.0", True), ("tensor", "2.7.1", True), ("refit", "2.7.1", False),
    ("refit", "2.8.0", False),
])
def test_only_refit_builds_a_refittable_engine(weights: str, version: str,
                                               immutable: bool) -> None:
    settings = compile_settings(spec(weights=weights), V2_7, version)
    assert settings["immutable_weights"] is immutable
    assert "make_refittable" not in settings


@pytest.mark.parametrize(("version", "names", "key"), [
    ("2.5.0", V2_5, "make_refittable"), ("2.4.1", V2_4, "refit")])
@pytest.mark.parametrize(("weights", "refittable"), [("constant", False), ("refit", True)])
def test_versions_before_immutable_weights_get_their_own_refit_setting(
    version: str, names: set[str], key: str, weights: str, refittable: bool,
) -> None:
    settings = compile_settings(spec(weights=weights), names, version)
    assert settings[key] is refittable
    assert "immutable_weights" not in settings


def test_a_version_without_refit_refuses_refittable_specs() -> None:
    with pytest.raises(BackendUnavailable, match=r"2\.4\.0 cannot build refittable"):
        compile_settings(spec(weights="refit"), NO_REFIT, "2.4.0")
    assert compile_settings(spec(weights="constant"), NO_REFIT, "2.4.0") == {
        "enabled_precisions": {torch.float32}}


@pytest.mark.parametrize(("version", "conv", "batchnorm", "network"), [
    ("2.4.0", "constant", "add_scale", "none (2.4: BatchNorm through add_scale)"),
    ("2.5.0", "constant", "elementwise", "trt-2.6"),
    ("2.6.1", "constant", "elementwise", "trt-2.6"),
    ("2.7.0+cu128", "tensor", "elementwise", "trt-2.7"),
    ("2.8.0", "constant", "add_scale_nd", "trt-2.8"),
    ("2.13.0", "constant", "add_scale_nd", "trt-2.8"),
])
def test_the_weight_representation_is_read_from_the_installed_release(
    version: str, conv: str, batchnorm: str, network: str,
) -> None:
    assert release_network(version) == {"torch_trt_conv_weights": conv,
                                        "torch_trt_batchnorm": batchnorm,
                                        "torch_trt_network": network}


@pytest.mark.parametrize(("weights", "version", "reason"), [
    ("tensor", "2.8.0", r"2\.8\.0 hands conv weights to TensorRT as trt\.Weights"),
    ("tensor", "2.6.0", r"weights 'tensor' is built by torch_tensorrt 2\.7\.x"),
    ("constant", "2.7.1", r"constant-layer ITensors through set_input"),
    ("constant", "1.4.0", r"cannot tell"),
])
def test_a_representation_the_installed_release_does_not_build_is_refused_with_why(
    weights: str, version: str, reason: str,
) -> None:
    with pytest.raises(BackendUnavailable, match=reason):
        compile_settings(spec(weights=weights), V2_7, version)
    assert weights_problem("refit", version) is None  # refit is its own axis


@pytest.mark.parametrize(("precision", "dtype"), [("fp16", torch.float16),
                                                  ("bf16", torch.bfloat16)])
def test_precision_becomes_enabled_precisions_where_it_exists(precision: str,
                                                              dtype: torch.dtype) -> None:
    assert compile_settings(spec(precision=precision), V2_7, "2.6.0")[
        "enabled_precisions"] == {dtype}
    # 2.13 takes precision from the model's dtype (explicit typing) and has no such setting
    assert "enabled_precisions" not in compile_settings(spec(precision=precision), V2_13,
                                                        "2.13.0")


def test_the_opt_level_axis_becomes_optimization_level() -> None:
    settings = compile_settings(spec(opt_level="5"), V2_7, "2.8.0")
    assert settings["optimization_level"] == 5
    with pytest.raises(BackendUnavailable, match="both given"):
        compile_settings(spec(opt_level="5", options={"optimization_level": 1}), V2_7, "2.8.0")


def test_options_pass_through_and_the_timing_cache_alias_is_translated() -> None:
    options = {"optimization_level": 5, "min_block_size": 3, "timing_cache": "/tmp/tc.bin",
               "threads": 2}
    settings = compile_settings(spec(options=options), V2_7, "2.8.0")
    assert settings["optimization_level"] == 5
    assert settings["min_block_size"] == 3
    assert settings["timing_cache_path"] == "/tmp/tc.bin"
    assert "threads" not in settings  # the runner's option, not the compiler's


def test_an_option_the_installed_version_lacks_is_refused_by_name() -> None:
    with pytest.raises(BackendUnavailable, match=r"tiling_optimization_level.*2\.8\.0"):
        compile_settings(spec(options={"tiling_optimization_level": "full"}), V2_7, "2.8.0")


def test_settings_derived_from_the_spec_cannot_be_overridden() -> None:
    bad = spec(options={"immutable_weights": False})
    with pytest.raises(BackendUnavailable, match="derived from the spec"):
        compile_settings(bad, V2_7, "2.8.0")
    assert "derived from the spec" in (get_backend("torch_tensorrt").unavailable_reason(bad)
                                       or "")


def test_partition_evidence_counts_engines_and_pytorch_subgraphs() -> None:
    # the shape of a compiled module: children named by Torch-TensorRT's partitioner
    compiled = nn.Module()
    compiled.add_module("_run_on_acc_0", nn.Identity())
    compiled.add_module("_run_on_gpu_1", nn.Identity())
    compiled.add_module("_run_on_acc_2", nn.Identity())
    evidence = compiled_module_evidence(compiled)
    assert evidence["torch_trt_engines"] == 2
    assert evidence["torch_trt_torch_subgraphs"] == 1


@pytest.mark.skipif(HAS_TORCH_TRT, reason="torch_tensorrt is importable here")
def test_backend_says_torch_tensorrt_is_not_installed_here() -> None:
    assert get_backend("torch_tensorrt").unavailable_reason(spec()) == NOT_INSTALLED


@pytest.mark.skipif(not HAS_TORCH_TRT, reason="torch_tensorrt is not importable here")
def test_backend_needs_a_cuda_device() -> None:
    assert get_backend("torch_tensorrt").unavailable_reason(spec(device="cpu")) == \
        "Torch-TensorRT needs a CUDA device"


def test_compile_without_the_backend_raises_backend_unavailable_not_a_crash() -> None:
    backend = get_backend("torch_tensorrt")
    if backend.unavailable_reason(spec(device="cpu")) is None:
        pytest.skip("torch_tensorrt runs on this machine")
    with pytest.raises(BackendUnavailable):
        backend.compile(nn.Identity(), torch.zeros(1, 3, 32, 32), spec(device="cpu"))


# ------------------------------------------------------------------ pinned builds


def test_a_pinned_build_gets_the_hosts_timing_cache_named_for_tensorrt_and_the_gpu(
    host_tuning_cache: Path,
) -> None:
    settings = compile_settings(spec(), V2_7, "2.8.0")
    assert pinned_timing_cache(spec(), settings, V2_7, "10.13.0.35") == (
        host_tuning_cache / "torch_tensorrt" / "10.13.0.35-nvidia-h100-sm90.timing-cache")


@pytest.mark.usefixtures("host_tuning_cache")
def test_no_host_cache_as_shipped_for_the_users_own_or_before_2_4() -> None:
    shipped = spec(timing=TimingPolicy(builds="as-shipped"))
    assert pinned_timing_cache(shipped, compile_settings(shipped, V2_7, "2.8.0"), V2_7,
                               "10.13.0.35") is None
    own = spec(options={"timing_cache": "/tmp/mine.bin"})
    assert pinned_timing_cache(own, compile_settings(own, V2_7, "2.8.0"), V2_7,
                               "10.13.0.35") is None
    before = V2_4 - {"timing_cache_path"}  # 2.3's compile had no such setting
    assert pinned_timing_cache(spec(), {}, before, "10.0.1") is None


def layer_info(tactic: str = "0x11bde0e1d9f2f35d", *, detailed: bool = True) -> str:
    """An engine's layer information as get_layer_info() returns it (inspector JSON)."""
    layers: list[Any] = [
        {"Name": "conv1 + bn1 + relu", "LayerType": "CaskConvolution",
         "ParameterType": "Convolution", "TacticName": "sm90_xmma_fprop", "TacticValue": tactic},
        {"Name": "fc", "LayerType": "CaskGemmMatrixMultiply", "TacticValue": "0x2"},
    ]
    if not detailed:
        layers = [layer["Name"] for layer in layers]
    return json.dumps({"Layers": layers, "Bindings": ["x", "output0"]})


class Engine(nn.Identity):
    """A compiled module's TensorRT engine child, as far as build choices read it."""

    def __init__(self, info: Callable[[], str]) -> None:
        super().__init__()
        self.info = info

    def get_layer_info(self) -> str:
        return self.info()


def compiled_with(*children: tuple[str, nn.Module]) -> nn.Module:
    """A compiled module's shape: children named by Torch-TensorRT's partitioner, run in turn."""
    return nn.Sequential(OrderedDict(children))


def test_build_choices_are_each_engines_layers_and_tactics() -> None:
    compiled = compiled_with(("_run_on_acc_0", Engine(layer_info)),
                             ("_run_on_gpu_1", nn.Identity()),
                             ("_run_on_acc_2", Engine(lambda: layer_info("0x3"))))
    choices = engines_build_choices(compiled)
    assert choices is not None
    assert [engine["engine"] for engine in choices] == ["_run_on_acc_0", "_run_on_acc_2"]
    assert choices[0]["layers"][0] == {"Name": "conv1 + bn1 + relu",
                                       "LayerType": "CaskConvolution",
                                       "TacticName": "sm90_xmma_fprop",
                                       "TacticValue": "0x11bde0e1d9f2f35d"}
    again = compiled_with(("_run_on_acc_0", Engine(layer_info)),
                          ("_run_on_acc_2", Engine(lambda: layer_info("0x3"))))
    assert fingerprint(engines_build_choices(again)) == fingerprint(choices)
    other = compiled_with(("_run_on_acc_0", Engine(lambda: layer_info("0x4"))),
                          ("_run_on_acc_2", Engine(lambda: layer_info("0x3"))))
    assert fingerprint(engines_build_choices(other)) != fingerprint(choices)


def test_no_build_choices_where_an_engine_cannot_name_its_tactics() -> None:
    def not_built() -> str:
        raise RuntimeError("Engine has not been initialized yet.")

    names_only = Engine(lambda: layer_info(detailed=False))  # built without DETAILED
    for engine in (names_only, Engine(not_built), nn.Identity()):
        compiled = compiled_with(("_run_on_acc_0", Engine(layer_info)),
                                 ("_run_on_acc_1", engine))
        assert engines_build_choices(compiled) is None
    assert engines_build_choices(compiled_with(("_run_on_gpu_0", nn.Identity()))) is None


class FakeTorchTensorRT:
    """torch_tensorrt as far as the backend uses it: 2.8's dynamo.compile parameters, Input,
    and compile(), which treats `timing_cache_path` as _TRTInterpreter does (2.4-2.13: load
    the file if there, build, write the builder's cache back in place, no lock) and returns
    a module whose one TensorRT engine reports its layers with their tactics. The build's
    one layer is timed unless the cache has it; `during_build` runs mid-build (another
    worker's build finishing meanwhile)."""

    __version__ = "2.8.0"

    def __init__(self, trt: Any) -> None:
        self.trt = trt
        self.timed = "0x1"  # the tactic timing picks for a layer the cache lacks
        self.calls: list[dict[str, Any]] = []
        self.during_build: Callable[[], Any] | None = None

        def compile(inputs: Any = None, enabled_precisions: Any = None,
                    immutable_weights: bool = True, timing_cache_path: str = "/tmp/x",
                    optimization_level: Any = None) -> None:
            raise AssertionError("the backend reads this signature, never calls it")

        self.dynamo = types.SimpleNamespace(compile=compile)

    def Input(self, **kw: Any) -> dict[str, Any]:
        return kw

    def compile(self, model: nn.Module, ir: str, inputs: list[Any],
                **settings: Any) -> nn.Module:
        self.calls.append(settings)
        config = self.trt.Builder(self.trt.Logger()).create_builder_config()
        path = settings.get("timing_cache_path")
        buffer = b""
        if path is not None and os.path.isfile(path):
            buffer = Path(path).read_bytes()
        cache = config.create_timing_cache(buffer)
        key = f"conv|{inputs[0]['shape']}"
        tactic = cache.entries.setdefault(key, int(self.timed, 16))
        if self.during_build is not None:
            during, self.during_build = self.during_build, None
            during()
        if path is not None:
            Path(path).write_bytes(cache.serialize())
        return compiled_with(("_run_on_acc_0", Engine(lambda: layer_info(hex(tactic)))))


@pytest.fixture
def fake_torch_trt(monkeypatch: pytest.MonkeyPatch) -> FakeTorchTensorRT:
    trt = si.TensorRTStandIn()
    fake = FakeTorchTensorRT(trt)
    monkeypatch.setattr(torch_trt_backend, "_import_torch_tensorrt", lambda: fake)
    monkeypatch.setattr(torch_trt_backend, "_import_tensorrt", lambda: trt)
    monkeypatch.setattr(torch_trt_backend, "cuda_only_reason", lambda spec, product: None)
    return fake


def compile_on(fake: FakeTorchTensorRT, batch: int = 1, **kw: Any) -> Any:
    s = spec(batch_size=batch, **kw)
    return get_backend("torch_tensorrt").compile(nn.Identity(), torch.zeros(batch, 3, 32, 32), s)


def test_pinned_builds_load_and_save_the_hosts_cache_through_a_private_copy(
    fake_torch_trt: FakeTorchTensorRT, host_tuning_cache: Path,
) -> None:
    host = host_tuning_cache / "torch_tensorrt" / "0.0.0-standin-nvidia-h100-sm90.timing-cache"
    first = compile_on(fake_torch_trt)
    passed = fake_torch_trt.calls[0]["timing_cache_path"]
    assert passed != str(host)  # Torch-TensorRT writes in place, unlocked: never the host's
    assert first.evidence["torch_trt_timing_cache"] == str(host)
    assert first.evidence["torch_trt_settings"]["timing_cache_path"] == str(host)
    assert not first.evidence["torch_trt_timing_cache_loaded"]
    assert first.evidence["torch_trt_timing_cache_saved"] and host.is_file()
    fake_torch_trt.timed = "0x2"  # timing noise: another tactic would win now
    second = compile_on(fake_torch_trt)
    assert second.evidence["torch_trt_timing_cache_loaded"]
    assert fingerprint(second.build_choices) == fingerprint(first.build_choices)


def test_pinned_builds_finishing_meanwhile_are_merged_not_overwritten(
    fake_torch_trt: FakeTorchTensorRT, host_tuning_cache: Path,
) -> None:
    host = host_tuning_cache / "torch_tensorrt" / "0.0.0-standin-nvidia-h100-sm90.timing-cache"
    finished: list[Any] = []
    fake_torch_trt.during_build = lambda: finished.append(compile_on(fake_torch_trt, batch=2))
    slow = compile_on(fake_torch_trt, batch=1)
    assert not finished[0].evidence["torch_trt_timing_cache_merged"]
    assert slow.evidence["torch_trt_timing_cache_merged"]
    entries = si.IBuilderConfig().create_timing_cache(host.read_bytes()).entries
    assert set(entries) == {"conv|(1, 3, 32, 32)", "conv|(2, 3, 32, 32)"}


def test_as_shipped_builds_leave_the_timing_cache_to_torch_tensorrt(
    fake_torch_trt: FakeTorchTensorRT, host_tuning_cache: Path,
) -> None:
    compiled = compile_on(fake_torch_trt, timing=TimingPolicy(builds="as-shipped"))
    assert "timing_cache_path" not in fake_torch_trt.calls[0]
    assert "torch_trt_timing_cache" not in compiled.evidence
    assert not host_tuning_cache.exists()


def test_a_timing_cache_the_user_names_is_passed_as_given(
    fake_torch_trt: FakeTorchTensorRT, host_tuning_cache: Path, tmp_path: Path,
) -> None:
    mine = tmp_path / "mine.bin"
    compile_on(fake_torch_trt, options={"timing_cache": str(mine)})
    assert fake_torch_trt.calls[0]["timing_cache_path"] == str(mine)
    assert mine.is_file() and not host_tuning_cache.exists()
