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
from typing import Any

import pytest
import torch
from torch import nn

from benchmarks.backends import BackendUnavailable, get_backend
from benchmarks.backends.torch_tensorrt import (
    NOT_INSTALLED,
    compile_settings,
    compiled_module_evidence,
    release_network,
    weights_problem,
)
from benchmarks.spec import BenchSpec

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
