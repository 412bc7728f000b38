"""A GPU cell whose every process timed in the other kernel-launch state than its baseline's
shows it only against that baseline: eager, the same software in both runs, ran every kernel
a fixed time shorter. Such a change is the runs' states, not the code: the verdict says so
and turns inconclusive, unless it holds in the baseline's state too.

The figures are one cell measured on an H200 (results/nvidia-h200x2-2026-11-29-fleet-16cells/,
tensor weights, bf16, batch 8, GPU 0): its one-worker run (every process in the slower
state) and the four processes of its two-worker run that timed in the faster state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.detection.verdict import judge_cell
from app.detection.verdict_types import Baseline
from benchmarks.result import BenchResult, LatencySummary, Speedup
from benchmarks.stats import PROCESSES_METHOD
from tests.detection.test_verdict import previous

KERNELS = {"baseline": 347.0, "candidate": 124.0}
EAGER = "eager-side-digest"


def _summary(median_ms: float) -> LatencySummary:
    return LatencySummary(n=3, median_ms=median_ms, iqr_ms=0.0, p05_ms=median_ms,
                          p95_ms=median_ms, mean_ms=median_ms)


def cell(eager_ms: float, candidate_ms: float, speedup: tuple[float, float, float], *,
         device: str = "cuda", eager: str = EAGER, **evidence: Any) -> BenchResult:
    value, low, high = speedup
    return BenchResult(
        series_key="resnet50/inductor/tensor/bf16/bs8/static/nvidia-h200/tauto/graphs",
        spec={"device": device}, status="ok", reason=None,
        baseline_samples_ms=[[eager_ms] * 3], candidate_samples_ms=[[candidate_ms] * 3],
        baseline=_summary(eager_ms), candidate=_summary(candidate_ms),
        speedup=Speedup(value, low, high, method=PROCESSES_METHOD),
        evidence={"kernels_per_inference": KERNELS, **evidence},
        fingerprint={"software": {"digest": f"run-{value}", "sides": {"baseline": eager}}})


SLOWER_STATE = cell(1.58411, 0.70413, (2.2497, 2.2466, 2.2529))  # one worker
FASTER_STATE = cell(1.46544, 0.65978, (2.2211, 2.2204, 2.2219))  # 4 of the two-worker run's


def _baseline() -> Baseline:
    return previous(SLOWER_STATE)


def test_a_run_in_the_other_launch_state_is_not_called_a_regression() -> None:
    verdict = judge_cell(FASTER_STATE, _baseline(), threshold=0.01)
    assert verdict.verdict == "inconclusive"
    assert "-1.3%" in verdict.reasons[0]  # the measured change stays in the verdict
    state = next(r for r in verdict.reasons if r.startswith("launch state:"))
    assert "ran every kernel 0.34 us faster" in state
    assert "would be 2.26x (+0.3%" in state
    assert state.endswith("not different code; run it again")


def test_without_the_launch_state_the_same_change_is_a_regression() -> None:
    """What the rule keeps from happening: eager's software differs, so its time is not a
    state's measure, and the drop stands."""
    other_eager = replace(FASTER_STATE, fingerprint={"software": {
        "digest": "new", "sides": {"baseline": "another-eager"}}})
    assert judge_cell(other_eager, _baseline(), threshold=0.01).verdict == "regression"


def test_a_regression_in_the_other_launch_state_is_still_one_when_it_holds_in_the_baselines(
        ) -> None:
    """The compiled side 5% slower on top of the state: the code's."""
    slower = cell(1.46544, 0.65978 * 1.05, (2.2211 / 1.05, 2.2204 / 1.05, 2.2219 / 1.05))
    verdict = judge_cell(slower, _baseline(), threshold=0.01)
    assert verdict.verdict == "regression"
    assert any(r.startswith("launch state:") and r.endswith("still a regression")
               for r in verdict.reasons)


@pytest.mark.parametrize("change", [
    {"device": "cpu"},  # no launch states on a CPU
    {"kernels": None},  # no count to turn eager's change into a time per kernel
])
def test_the_rule_needs_a_gpu_and_kernel_counts(change: dict[str, Any]) -> None:
    new = cell(1.46544, 0.65978, (2.2211, 2.2204, 2.2219), device=change.get("device", "cuda"))
    if "kernels" in change:
        new = replace(new, evidence={})
    assert judge_cell(new, _baseline(), threshold=0.01).verdict == "regression"


def test_a_shift_too_small_for_a_launch_state_is_left_to_the_interval() -> None:
    """Eager 0.05 us a kernel faster: noise or drift, not a state."""
    eager = 1.58411 - 0.05 * 347 / 1000
    new = cell(eager, 0.65978, (eager / 0.65978, eager / 0.65978 * 0.9997,
                                eager / 0.65978 * 1.0003))
    verdict = judge_cell(new, _baseline(), threshold=0.01)
    assert not any(r.startswith("launch state:") for r in verdict.reasons)


def test_the_same_software_in_the_other_launch_state_is_the_state_not_the_hosts_drift() -> None:
    same = replace(FASTER_STATE, fingerprint=SLOWER_STATE.fingerprint)
    verdict = judge_cell(same, _baseline(), threshold=0.01)
    assert verdict.verdict == "pass" and not verdict.host_drift
    assert any(r.startswith("launch state:") for r in verdict.reasons)
    assert any(r.startswith("same software as") and "the host's, not the code's" in r
               for r in verdict.reasons)
