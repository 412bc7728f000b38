"""The inductor backend: torch.compile with freezing on (`constant`) or off (`tensor`).

Compiling is slow on a shared 2-core machine (tens of seconds even for a few layers), so
every test that compiles is marked slow and uses the smallest model that still has
Conv+BatchNorm to freeze.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from benchmarks.backends import Compiled, get_backend
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec, SpecError
from tests.benchmarks.conftest import make_tiny_spec

FP32_ATOL = 1e-4
FP32_RTOL = 1e-4


def inductor_spec(**overrides: Any) -> BenchSpec:
    values: dict[str, Any] = {"backend": "inductor", "num_classes": 10}
    values.update(overrides)
    return make_tiny_spec(**values).validate()


def conv_bn_relu() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
    )
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert m.running_mean is not None and m.running_var is not None
            with torch.no_grad():
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_()
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


class WithGraphBreak(nn.Module):
    """Two fusable halves with a forced graph break between them."""

    def __init__(self) -> None:
        super().__init__()
        self.first = conv_bn_relu()
        self.second = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU()).eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.first(x)
        torch._dynamo.graph_break()
        return self.second(y)


def compile_and_check(model: nn.Module, spec: BenchSpec) -> Compiled:
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    compiled = get_backend("inductor").compile(model, x, spec)
    with torch.inference_mode():
        expected = model(x)
    torch.testing.assert_close(compiled.run(x), expected, atol=FP32_ATOL, rtol=FP32_RTOL)
    return compiled


# ---- availability ------------------------------------------------------------------------


def test_fp32_on_cpu_is_available_where_a_cxx_compiler_exists() -> None:
    assert get_backend("inductor").unavailable_reason(inductor_spec()) is None


def test_without_a_cxx_compiler_cpu_inductor_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no g++, no clang++
    reason = get_backend("inductor").unavailable_reason(inductor_spec())
    assert reason is not None
    assert "C++ compiler" in reason
    assert "\n" not in reason


def test_an_unknown_mode_is_unavailable_with_the_allowed_modes() -> None:
    reason = get_backend("inductor").unavailable_reason(
        inductor_spec(options={"mode": "turbo"}))
    assert reason is not None
    assert "max-autotune" in reason
    assert "\n" not in reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_without_a_gpu_is_unavailable() -> None:
    reason = get_backend("inductor").unavailable_reason(inductor_spec(device="cuda"))
    assert reason is not None
    assert "\n" not in reason


def test_refit_is_not_a_weight_representation_of_inductor() -> None:
    with pytest.raises(SpecError, match="refit"):
        inductor_spec(weights="refit")


def test_tensors_print_short_during_a_compile_and_as_before_after_it() -> None:
    """Dynamo formats the parameters it guards; a frozen ResNet50's full reprs read tens of
    thousands of values off a GPU while it compiled."""
    from benchmarks.backends.inductor import short_tensor_reprs

    weight = torch.arange(4096.0).reshape(8, 8, 8, 8)
    torch.set_printoptions(precision=2)
    try:
        before = repr(weight)
        with short_tensor_reprs():
            during = repr(weight)
        with pytest.raises(RuntimeError), short_tensor_reprs():
            raise RuntimeError("a failed compile")
        assert repr(weight) == before
    finally:
        torch.set_printoptions(profile="default")
    assert len(during) < len(before) / 10
    assert "4095." in during  # still the tensor's own last value, summarised


# ---- compiling (slow here) ---------------------------------------------------------------


@pytest.mark.slow
def test_constant_weights_compile_frozen_and_match_eager(single_thread: None) -> None:
    compiled = compile_and_check(conv_bn_relu(), inductor_spec(weights="constant"))
    assert compiled.evidence["freezing"] is True
    assert compiled.evidence["inductor_kernels"] > 0
    assert compiled.evidence["graph_breaks"] == 0
    assert compiled.evidence["dynamo_graphs"] == 1
    assert compiled.cuda_graph_safe is True


@pytest.mark.slow
def test_timed_calls_reuse_the_graph_compiled_up_front(single_thread: None) -> None:
    """Outside inference mode too: the candidate itself enters the mode it was compiled in."""
    model = conv_bn_relu()
    x = torch.randn(2, 3, 16, 16)
    compiled = get_backend("inductor").compile(model, x, inductor_spec(weights="constant"))
    graphs = counters["stats"]["unique_graphs"]
    compiled.run(x)
    with torch.inference_mode():
        compiled.run(x)
    assert counters["stats"]["unique_graphs"] == graphs


def compile_workers() -> list[str]:
    """This process's children that are inductor's compile workers (their command lines)."""
    me = str(os.getpid())
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = stat.read_text().rsplit(")", 1)[1].split()[1]
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if ppid == me and "compile_worker" in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_tensor_weights_compile_unfrozen_match_eager_and_count_graph_breaks(
    single_thread: None,
) -> None:
    compiled = compile_and_check(WithGraphBreak().eval(), inductor_spec(weights="tensor"))
    assert compiled.evidence["freezing"] is False
    assert compiled.evidence["graph_breaks"] >= 1
    assert compiled.evidence["dynamo_graphs"] == 2


@pytest.mark.slow
def test_no_compile_worker_runs_on_beside_the_timing_after_a_build(
    single_thread: None,
) -> None:
    """A GPU build compiles its Triton kernels in inductor's worker processes, which then
    stayed up (and a load from the cache started them, still importing torch while the
    process timed, about one core busy beside it)."""
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile

    with config.patch(compile_threads=2):
        AsyncCompile.warm_pool()  # started, as a GPU build starts them
        assert compile_workers(), "the workers' process was not found: the check sees nothing"
        compile_and_check(conv_bn_relu(), inductor_spec(weights="tensor"))
        assert compile_workers() == []


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["constant", "tensor"])
def test_run_spec_measures_inductor_end_to_end(weights: str, single_thread: None) -> None:
    result = run_spec(inductor_spec(weights=weights, batch_size=2))
    assert result.status == "ok", result.reason
    assert result.accuracy is not None and result.accuracy.passed
    assert result.speedup is not None and result.speedup.value > 0
    assert result.evidence["freezing"] is (weights == "constant")
    assert result.evidence["inductor_kernels"] > 0
    assert result.compile_seconds is not None and result.compile_seconds > 0


# ---- weights representation: are constants really baked in? ------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("weights", "baked"), [("constant", True), ("tensor", False)])
def test_constant_weights_are_baked_into_the_program_and_tensor_weights_are_read_per_call(
    weights: str, baked: bool
) -> None:
    """The whole point of `constant`: later edits to the module's weights cannot reach the
    frozen program, while `tensor` weights are read at every call. (Regression: passing
    freezing through torch.compile's `options` silently froze nothing on torch 2.13.)"""
    model = conv_bn_relu()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    compiled = get_backend("inductor").compile(model, x, inductor_spec(weights=weights))
    before = compiled.run(x).clone()
    first_conv = model[0]
    assert isinstance(first_conv, nn.Conv2d)
    with torch.no_grad():
        first_conv.weight.mul_(-1.0)
    after = compiled.run(x)
    assert torch.equal(before, after) is baked
