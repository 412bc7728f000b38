"""What a verdict says about how a result was measured: a busy host is named, a changed build
is named, and a comparison that stayed undecided says in one line why and what to change."""

from __future__ import annotations

from typing import Any

from app.detection.evidence import BUILD_CHANGED, evidence_changes, evidence_sentence
from app.detection.notes import measurement_notes
from app.detection.verdict import judge_cell
from app.detection.verdict_types import Baseline
from benchmarks.result import BenchResult, Speedup
from benchmarks.stats import PROCESSES_METHOD

ROUNDS = [[10.0, 10.1, 9.9]] * 6


def measured(speedup: float, half: float, *, evidence: dict[str, Any] | None = None,
             fingerprint: dict[str, Any] | None = None,
             timing: dict[str, Any] | None = None) -> BenchResult:
    return BenchResult(
        series_key="resnet50/onnxruntime/constant/fp32/bs1/static/cpu/t1/nographs/sides=split",
        spec={"timing": timing or {"budget_seconds": 30.0}, "options": {"threads": 1}},
        status="ok",
        baseline_samples_ms=ROUNDS, candidate_samples_ms=[[x / speedup for x in r]
                                                          for r in ROUNDS],
        speedup=Speedup(speedup, speedup / (1 + half), speedup * (1 + half),
                        method=PROCESSES_METHOD),
        evidence=evidence or {}, fingerprint=fingerprint or {})


def baseline_of(result: BenchResult) -> Baseline:
    assert result.speedup is not None
    return Baseline("previous", "the previous run", result.speedup.value, result)


LOADED = {"host_load": {"other_cores": 1.9, "peak_cores": 2.0, "cores": 2, "threshold": 0.5,
                        "units": 5, "units_loaded": 5, "loaded": True,
                        "remeasured": [{"unit": 1, "other_cores": 1.8},
                                       {"unit": 1, "other_cores": 1.9}]}}


def test_a_result_timed_beside_busy_co_tenants_says_so_in_its_verdict() -> None:
    notes = measurement_notes(measured(1.6, 0.01, fingerprint=LOADED))
    assert notes == ["host busy: other processes kept 1.9 of 2 cores busy while timing (5 of "
                     "5 units past the 0.5-core guard, 2 re-measured); a co-tenant sharing "
                     "caches and memory bandwidth can bias a CPU speedup by several percent"]
    quiet = {"host_load": {**LOADED["host_load"], "loaded": False, "units_loaded": 0}}
    assert measurement_notes(measured(1.6, 0.01, fingerprint=quiet)) == []


def test_a_gpu_result_timed_beside_a_busy_cpu_names_what_a_gpu_side_loses() -> None:
    gpu = measured(2.7, 0.001, fingerprint={"host_load": {**LOADED["host_load"], "cores": 16}})
    gpu.spec = {**gpu.spec, "device": "cuda"}
    (note,) = measurement_notes(gpu)
    assert "1.9 of 16 cores" in note
    assert note.endswith("a busy CPU can delay the work a GPU side launches from it")


def _why(new: BenchResult, base: BenchResult) -> str:
    verdict = judge_cell(new, baseline_of(base))
    assert verdict.verdict == "inconclusive", verdict.reasons
    lines = [r for r in verdict.reasons if r.startswith("why inconclusive: ")]
    assert len(lines) == 1, verdict.reasons
    return lines[0]


def test_an_undecided_comparison_names_the_budget_that_ran_out_and_the_timing_field() -> None:
    new = measured(1.58, 0.03, evidence={"adaptive": {"stopped_by": "budget", "processes": 6}})
    line = _why(new, measured(1.6, 0.005))
    assert line == ("why inconclusive: the interval (+-3.0%) is too wide for a 3% threshold when "
                    "the timing budget (30 s) ran out at 6 processes: raise timing.budget_seconds "
                    "(or timing.max_seconds), or the threshold")


def test_an_undecided_comparison_names_the_process_limit() -> None:
    new = measured(1.58, 0.03, evidence={"adaptive": {"stopped_by": "max_processes",
                                                       "processes": 8}})
    assert "at the process limit (8): raise timing.max_processes" in _why(new, measured(1.6, 0.005))


def test_builds_that_chose_differently_are_named_before_the_budget() -> None:
    new = measured(1.58, 0.03, evidence={
        "adaptive": {"stopped_by": "budget", "processes": 8},
        "build": {"mode": "as-shipped", "distinct": 3, "spread": 0.031}})
    assert _why(new, measured(1.6, 0.005)) == (
        "why inconclusive: its 3 builds chose differently, their speedups 3.1% apart (builds "
        "as shipped): measure with timing.builds pinned, or allow more processes "
        "(timing.max_processes) to average over builds")


def test_a_busy_host_is_named_with_what_to_do_about_it() -> None:
    new = measured(1.58, 0.03, evidence={"adaptive": {"stopped_by": "budget", "processes": 6}},
                   fingerprint=LOADED)
    assert _why(new, measured(1.6, 0.005)).startswith(
        "why inconclusive: the host was busy (1.9 other cores): re-run on a quiet runner")


def test_a_wide_baseline_is_named_when_it_is_the_wider_of_the_two() -> None:
    new = measured(1.58, 0.01, evidence={"adaptive": {"stopped_by": "decided", "processes": 3}})
    assert _why(new, measured(1.6, 0.04)).startswith(
        "why inconclusive: the baseline's own interval (+-4.0%) is the wider one")


def test_a_decided_comparison_has_no_why() -> None:
    verdict = judge_cell(measured(1.6, 0.005), baseline_of(measured(1.6, 0.005)))
    assert verdict.verdict == "pass"
    assert not [r for r in verdict.reasons if r.startswith("why inconclusive")]


# ---- the evidence sentence ---------------------------------------------------------------------

def _built(fingerprint: str | None, configs: dict[str, Any], kernels: list[str]) -> BenchResult:
    evidence: dict[str, Any] = {"build": {"mode": "pinned"}}
    if fingerprint:
        evidence.update(build_fingerprint=fingerprint, build_choices={
            "kernels": kernels, "extern_calls": {}, "triton_configs": configs})
    return measured(1.6, 0.01, evidence=evidence)


def test_a_changed_build_is_told_first_with_what_changed_in_it() -> None:
    before = _built("aaaaaaaaaaaa", {"k0": {"XBLOCK": 256}, "k1": {"XBLOCK": 64}}, ["k0", "k1"])
    after = _built("bbbbbbbbbbbb", {"k0": {"XBLOCK": 512}, "k1": {"XBLOCK": 64}}, ["k0", "k1"])
    changes = evidence_changes(before, after)
    assert str(changes[0]) == (f"{BUILD_CHANGED}: fingerprint aaaaaaaaaaaa -> bbbbbbbbbbbb "
                               "(1 kernel launch configs differ)")
    assert evidence_sentence(before, before).startswith("no change in build choices")
    unrecorded = _built(None, {}, [])
    assert str(evidence_changes(unrecorded, after)[0]).startswith(
        f"{BUILD_CHANGED}: fingerprint unrecorded -> bbbbbbbbbbbb")


def test_a_graph_or_engine_that_changed_counts_its_differing_layers() -> None:
    before = measured(1.6, 0.01, evidence={"build_fingerprint": "a1", "build_choices": [
        ["ai.onnx", "Conv", 3, {}], ["ai.onnx", "Relu", 1, {}]]})
    after = measured(1.6, 0.01, evidence={"build_fingerprint": "b2", "build_choices": [
        ["ai.onnx", "Conv", 3, {}], ["ai.onnx", "BatchNormalization", 5, {}],
        ["ai.onnx", "Relu", 1, {}]]})
    assert str(evidence_changes(before, after)[0]).endswith("(2 of 3 layers or nodes differ)")


def test_a_busier_host_and_another_clock_are_conditions_worth_telling() -> None:
    quiet = measured(1.6, 0.01, evidence={"timing": {"clock": "perf_counter_ns"}},
                     fingerprint={"host_load": {"other_cores": 0.05}})
    busy = measured(1.6, 0.01, evidence={"timing": {"clock": "thread_time_ns"}},
                    fingerprint=LOADED)
    sentence = evidence_sentence(quiet, busy)
    assert "host load 0.1 -> 1.9 (other processes' busy cores while timing)" in sentence
    assert "timing clock perf_counter_ns -> thread_time_ns" in sentence
    a_little = measured(1.6, 0.01, fingerprint={"host_load": {"other_cores": 0.3}})
    assert not [c for c in evidence_changes(quiet, a_little) if c.what == "host load"]


def test_a_threshold_below_one_percent_is_named_as_set() -> None:
    """A 0.5% threshold (a GPU series measured to +-0.1%) must not read as 0%."""
    verdict = judge_cell(measured(1.58, 0.001), baseline_of(measured(1.6, 0.001)),
                         threshold=0.005)
    assert verdict.verdict == "regression"
    assert "slower, past the 0.5% threshold" in verdict.reasons[0]


# eager's and ONNX Runtime's median ms a call in each of 11 processes of one demo cell on
# this project's 2-core machine (2026-11-26): process 2's eager ran slow throughout
DEMO_EAGER = [102.415, 123.17, 102.872, 101.159, 100.866, 101.33, 104.141, 103.587, 101.439,
              105.285, 103.278]
DEMO_ORT = [75.104, 75.037, 74.978, 74.658, 74.976, 74.749, 74.943, 75.295, 75.069, 74.883,
            74.832]


def _units(eager: list[float], ort: list[float]) -> list[dict[str, float]]:
    return [{"baseline_median_ms": b, "candidate_median_ms": c} for b, c in zip(eager, ort,
                                                                               strict=True)]


def test_an_undecided_verdict_names_the_process_whose_eager_ran_slow_throughout() -> None:
    new = measured(1.37, 0.04, evidence={
        "adaptive": {"stopped_by": "budget", "processes": 11},
        "processes": _units(DEMO_EAGER, DEMO_ORT)})
    new.spec = {**new.spec, "backend": "onnxruntime"}
    verdict = judge_cell(new, baseline_of(measured(1.39, 0.035)))
    assert verdict.verdict == "inconclusive"
    (line,) = [r for r in verdict.reasons if r.startswith("uneven processes: ")]
    assert line.startswith("uneven processes: eager 20% slow in process 2 (123.2 ms a call "
                           "against a median of 102.9), of 11 processes;")


def test_even_processes_or_too_few_to_tell_add_no_such_line() -> None:
    even = measured(1.37, 0.04, evidence={"adaptive": {"stopped_by": "budget", "processes": 11},
                                          "processes": _units(DEMO_EAGER[:1] + DEMO_EAGER[2:],
                                                              DEMO_ORT[:10])})
    three = measured(1.37, 0.04, evidence={"adaptive": {"stopped_by": "budget", "processes": 3},
                                           "processes": _units(DEMO_EAGER[:3], DEMO_ORT[:3])})
    for new in (even, three):
        verdict = judge_cell(new, baseline_of(measured(1.39, 0.035)))
        assert verdict.verdict == "inconclusive"
        assert not [r for r in verdict.reasons if r.startswith("uneven processes")]
