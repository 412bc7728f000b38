"""run_spec end to end on tiny ResNets with real backends, and the ways it refuses to raise."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import benchmarks.runner as runner
from benchmarks import build_cache
from benchmarks.backends import BackendUnavailable, Compiled, get_backend
from benchmarks.result import BenchResult
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec
from tests.benchmarks.conftest import tiny_timing

SpecFactory = Callable[..., BenchSpec]
pytestmark = pytest.mark.usefixtures("single_thread")


def assert_valid_document(result: BenchResult) -> BenchResult:
    """What a worker does with a result: serialise, parse back, validate."""
    again = BenchResult.from_json(result.to_json())
    assert again.to_dict() == result.to_dict()
    return again


def test_eager_vs_eager_is_an_aa_control(tiny_spec: SpecFactory) -> None:
    # 24 paired rounds: with 6, a burst on a shared CI runner once read 1.52x
    spec = tiny_spec(batch_size=2, timing=tiny_timing(rounds=24, min_rounds=24))
    result = assert_valid_document(run_spec(spec))
    assert result.status == "ok", result.reason
    assert result.series_key == "resnet18-w8-i32/eager/constant/fp32/bs2/static/cpu/t1/nographs"
    # Same weights, same input, same kernels: bit-identical output.
    assert result.accuracy is not None
    assert result.accuracy.rel_l2 == 0.0 and result.accuracy.passed
    assert result.speedup is not None
    # No systematic difference between two copies of one model: far from any real speedup.
    assert 0.67 < result.speedup.value < 1.5
    assert result.speedup.ci_low <= result.speedup.value <= result.speedup.ci_high


def test_raw_samples_are_kept_per_round_for_both_sides(tiny_spec: SpecFactory) -> None:
    from benchmarks.timing_policy import TimingPolicy

    policy = TimingPolicy(warmup_iters=1, rounds=4, iters_per_round=3, max_seconds=60,
                          min_rounds=2, bootstrap_resamples=200)
    result = run_spec(tiny_spec(timing=policy))
    assert result.status == "ok", result.reason
    assert [len(r) for r in result.baseline_samples_ms] == [3, 3, 3, 3]
    assert [len(r) for r in result.candidate_samples_ms] == [3, 3, 3, 3]
    assert result.baseline is not None and result.baseline.n == 12
    timing = result.evidence["timing"]
    assert timing["rounds"] == 4 and timing["stopped_by"] == "rounds"
    # one thread: the statistics use the thread's CPU time, the wall clock beside it
    assert timing["clock"] == "thread_time_ns"
    assert timing["wall"]["baseline_median_ms"] > 0 and timing["wall"]["candidate_median_ms"] > 0


def test_result_carries_compile_time_memory_fingerprint_and_timestamps(
    tiny_spec: SpecFactory,
) -> None:
    result = run_spec(tiny_spec())
    assert result.compile_seconds is not None and result.compile_seconds >= 0
    assert set(result.peak_memory_bytes) == {"baseline_build", "baseline", "candidate_compile",
                                             "candidate"}
    assert all(v >= 0 for v in result.peak_memory_bytes.values())
    fp = result.fingerprint
    assert fp["device_class"] == "cpu"
    assert fp["packages"]["torch"] == torch.__version__
    assert fp["torch_threads"] == 1  # the spec's threads option took effect
    assert "throttled" not in fp  # no NVML readings on CPU, so no claim either way
    assert result.started_at and result.finished_at and result.started_at <= result.finished_at
    assert result.duration_seconds is not None and result.duration_seconds > 0
    assert result.evidence["baseline_accuracy"]["rel_l2"] == 0.0


def test_onnxruntime_candidate_runs_end_to_end(tiny_spec: SpecFactory) -> None:
    backend = get_backend("onnxruntime")
    spec = tiny_spec(backend="onnxruntime", model="resnet50")
    why_not = backend.unavailable_reason(spec)
    if why_not:
        pytest.skip(why_not)
    result = assert_valid_document(run_spec(spec))
    assert result.status == "ok", result.reason
    assert result.accuracy is not None and result.accuracy.passed
    assert 0 < result.accuracy.rel_l2 < 1e-4  # a different program, the same function
    assert result.speedup is not None and math.isfinite(result.speedup.value)
    assert result.fingerprint["packages"].get("onnxruntime")


def test_invalid_spec_is_a_failed_result_not_an_exception(tiny_spec: SpecFactory) -> None:
    result = assert_valid_document(run_spec(tiny_spec(batch_size=0)))
    assert result.status == "failed"
    assert result.reason is not None and result.reason.startswith("invalid spec: batch_size")


def test_cuda_spec_without_a_gpu_is_skipped(tiny_spec: SpecFactory) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = assert_valid_document(run_spec(tiny_spec(device="cuda")))
    assert result.status == "skipped"
    assert result.reason == "CUDA is not available here"
    assert result.series_key.endswith("/cuda/t1/graphs")


class StandInBackend:
    """A deliberately misbehaving backend (stand-in: no real backend fails on demand).

    `mode` picks the failure: raise in compile, report unavailable from compile, return a
    wrong output, or return NaN.
    """

    name = "eager"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        return "stand-in says no" if self.mode == "unavailable" else None

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        if self.mode == "raise":
            raise RuntimeError("converter exploded\nsecond line of detail")
        if self.mode == "unavailable_at_compile":
            raise BackendUnavailable("no engine for this GPU")
        if self.mode == "wrong":
            return Compiled(run=lambda x: model(x) * 1.1)
        if self.mode == "nan":
            return Compiled(run=lambda x: model(x) * float("nan"))
        if self.mode == "bad_shape":
            return Compiled(run=lambda x: model(x)[:, :5])
        raise AssertionError(self.mode)


def with_backend(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setattr(runner, "get_backend", lambda name: StandInBackend(mode))


def test_backend_exception_becomes_failed_with_one_line_reason(
    monkeypatch: pytest.MonkeyPatch, tiny_spec: SpecFactory
) -> None:
    with_backend(monkeypatch, "raise")
    result = assert_valid_document(run_spec(tiny_spec()))
    assert result.status == "failed"
    assert result.reason == "compile: RuntimeError: converter exploded"
    assert result.fingerprint["device_class"] == "cpu"


@pytest.mark.parametrize("mode", ["unavailable", "unavailable_at_compile"])
def test_unavailable_backend_is_skipped_with_its_reason(
    mode: str, monkeypatch: pytest.MonkeyPatch, tiny_spec: SpecFactory
) -> None:
    with_backend(monkeypatch, mode)
    result = assert_valid_document(run_spec(tiny_spec()))
    assert result.status == "skipped"
    assert result.reason in ("stand-in says no", "no engine for this GPU")


def test_wrong_output_is_measured_but_flagged(
    monkeypatch: pytest.MonkeyPatch, tiny_spec: SpecFactory
) -> None:
    with_backend(monkeypatch, "wrong")
    result = assert_valid_document(run_spec(tiny_spec()))
    assert result.status == "ok"
    assert result.accuracy is not None and not result.accuracy.passed
    assert result.accuracy.rel_l2 == pytest.approx(0.1, rel=1e-6)
    assert result.reason is not None and "exceeds the fp32 tolerance" in result.reason


@pytest.mark.parametrize(("mode", "message"), [
    ("nan", "accuracy: AccuracyError: candidate output contains NaN or Inf"),
    ("bad_shape", "accuracy: AccuracyError: candidate output shape (1, 5) != reference (1, 1000)"),
])
def test_unusable_output_fails_the_spec(
    mode: str, message: str, monkeypatch: pytest.MonkeyPatch, tiny_spec: SpecFactory
) -> None:
    with_backend(monkeypatch, mode)
    result = assert_valid_document(run_spec(tiny_spec()))
    assert (result.status, result.reason) == ("failed", message)


def test_backend_never_sees_the_baseline_module(
    monkeypatch: pytest.MonkeyPatch, tiny_spec: SpecFactory
) -> None:
    """A backend that rewrites the module in place must not change what eager measures."""
    seen: dict[str, Any] = {}

    class Vandal(StandInBackend):
        def compile(self, model: torch.nn.Module, example: torch.Tensor,
                    spec: BenchSpec) -> Compiled:
            for p in model.parameters():
                p.data.zero_()
            seen["model"] = model
            return Compiled(run=model)

    built: list[torch.nn.Module] = []
    original_build = build_cache.built_model

    def build_and_keep(spec: BenchSpec, **kwargs: Any) -> tuple[torch.nn.Module, dict[str, Any]]:
        model, info = original_build(spec, **kwargs)
        built.append(model)
        return model, info

    monkeypatch.setattr(runner, "get_backend", lambda name: Vandal("vandal"))
    monkeypatch.setattr(build_cache, "built_model", build_and_keep)
    result = run_spec(tiny_spec())
    assert seen["model"] is not built[0]
    assert all(p.abs().sum() > 0 for p in built[0].parameters())  # baseline untouched
    # ...while the candidate's zeroed copy really ran and was caught by the accuracy check.
    assert result.accuracy is not None and result.accuracy.rel_l2 == 1.0
