"""Another process that makes a CUDA context on the measuring GPU changes what the measuring
process times (on an H200, eager ResNet50's CUDA-graph replays 12% faster at batch 1, and
for the rest of its life): a GPU process records the processes NVML lists on its GPU, and
a unit that saw a newer one is measured again.

No GPU or NVML here: NVML's process list is a stand-in module, and the guard's test runs
real CPU children whose results carry the record as a GPU child writes it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks import adaptive, fingerprint, prepared
from benchmarks.adaptive import LOAD_REMEASURES, run_adaptive
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec

SpecFactory = Callable[..., BenchSpec]


def test_only_processes_newer_than_the_measuring_ones_context_count() -> None:
    first = {100, 200}  # this process (100) and an older one
    assert fingerprint.newer_gpu_processes(first, {100, 200}, {100}) == 0  # the older left
    assert fingerprint.newer_gpu_processes(first, {100, 200, 300}, {100, 200}) == 1
    assert fingerprint.newer_gpu_processes(first, {100}, {100, 300, 400}) == 2
    assert fingerprint.newer_gpu_processes(first, None, {100, 300}) == 1
    assert fingerprint.newer_gpu_processes(None, {100, 300}) is None  # nothing to compare
    assert fingerprint.newer_gpu_processes(first, None, None) is None


class _FakeNvml(SimpleNamespace):
    """A stand-in for pynvml (no NVML here): a GPU whose process list is `pids`."""

    def __init__(self, pids: list[int] | None) -> None:
        super().__init__(pids=pids)

    def nvmlInit(self) -> None:  # pynvml's names
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        if self.pids is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 20) for p in self.pids]


def test_the_processes_on_the_gpu_are_nvmls_list_or_none_where_it_cannot_tell(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml([4242, 17]))
    assert fingerprint.gpu_processes() == {4242, 17}
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(None))
    assert fingerprint.gpu_processes() is None


def _shared_gpu_units(real: Callable[..., BenchResult], newer: list[int]) -> Callable[..., Any]:
    """run_unit, with the record a GPU child writes: unit i saw `newer[i]` newer processes."""
    calls = iter(newer)

    def run(*args: Any, **kwargs: Any) -> BenchResult:
        one = real(*args, **kwargs)
        one.evidence["gpu_processes"] = {"present": 1, "newer": next(calls, 0)}
        return one
    return run


def _two_units(tiny_spec: SpecFactory) -> BenchSpec:
    spec = tiny_spec()
    return replace(spec, timing=replace(spec.timing, processes=2, max_processes=2))


@pytest.mark.slow
def test_a_unit_that_saw_a_newer_gpu_process_is_measured_again(
        tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _two_units(tiny_spec)
    # the first unit shared its GPU, its re-measure did not, then the second unit did not
    monkeypatch.setattr(adaptive, "run_unit", _shared_gpu_units(adaptive.run_unit, [1, 0, 0]))
    result = run_adaptive(spec, reference_for=lambda _r: None, timeout_s=300)
    assert result.status == "ok", result.reason
    assert result.evidence["adaptive"]["gpu_remeasured"] == [1]
    assert [p["gpu_processes"]["newer"] for p in result.evidence["processes"]] == [0, 0]


@pytest.mark.slow
def test_a_gpu_shared_for_good_is_measured_again_as_often_as_allowed_then_kept(
        tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _two_units(tiny_spec)
    monkeypatch.setattr(adaptive, "run_unit", _shared_gpu_units(adaptive.run_unit, [1] * 9))
    result = run_adaptive(spec, reference_for=lambda _r: None, timeout_s=300)
    assert result.status == "ok", result.reason
    assert len(result.evidence["adaptive"]["gpu_remeasured"]) == LOAD_REMEASURES
    assert [p["gpu_processes"]["newer"] for p in result.evidence["processes"]] == [1, 1]


@pytest.mark.slow
def test_with_children_prepared_ahead_a_shared_unit_is_marked_not_measured_again(
        tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's own children make contexts beside every unit: measuring again cannot help."""
    spec = _two_units(tiny_spec)
    monkeypatch.setattr(adaptive, "run_unit", _shared_gpu_units(adaptive.run_unit, [1] * 9))
    with prepared.preparing(2):
        result = run_adaptive(spec, reference_for=lambda _r: None, timeout_s=300)
    assert result.status == "ok", result.reason
    assert "gpu_remeasured" not in result.evidence["adaptive"]
    assert [p["gpu_processes"]["newer"] for p in result.evidence["processes"]] == [1, 1]



def _pinned(real: Callable[..., Any], pins: list[dict[str, Any]]) -> Callable[..., Any]:
    """run_unit whose unit i recorded `pins[i]` (benchmarks.launch_pin): graphs pinned into
    the faster launch state, or a pin that failed."""
    calls = iter(pins)

    def run(*args: Any, **kwargs: Any) -> BenchResult:
        one: BenchResult = real(*args, **kwargs)
        one.evidence["launch_pin"] = dict(next(calls))
        return one
    return run


@pytest.mark.slow
def test_a_pinned_unit_is_not_measured_again_for_a_newer_gpu_process_but_an_unpinned_one_is(
        tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned graphs stay in the faster launch state: a newer context cannot move them. A
    unit whose pin failed is guarded as before."""
    spec = _two_units(tiny_spec)
    moved = {"before_us": 1.04, "after_us": 0.86, "moved": True, "seconds": 0.9}
    failed = {"error": "the context helper failed (exit 2): cuInit failed: CUDA error 100"}
    # unit 1 pinned and shared; unit 2 unpinned and shared, then measured again unshared
    shared = _shared_gpu_units(adaptive.run_unit, [1, 1, 0])
    monkeypatch.setattr(adaptive, "run_unit", _pinned(shared, [moved, failed, failed]))
    result = run_adaptive(spec, reference_for=lambda _r: None, timeout_s=300)
    assert result.status == "ok", result.reason
    assert result.evidence["adaptive"]["gpu_remeasured"] == [2]
    pins = [p["launch_pin"] for p in result.evidence["processes"]]
    assert pins[0]["moved"] is True and "error" in pins[1]
