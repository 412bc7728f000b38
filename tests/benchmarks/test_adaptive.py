"""Adaptive measurement: processes are added until the comparison is decided, never past the
process limit or the timing budget, and the result says how long deciding took.

The rule itself (`stats.decide`) is tested on literal intervals; `run_adaptive` on real child
processes of a tiny model (eager against eager, so the speedup is about 1).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks.adaptive import AdaptiveMeasurement, run_adaptive
from benchmarks.isolation import run_adaptive_interleaved, run_interleaved
from benchmarks.result import BenchResult, Speedup
from benchmarks.spec import BenchSpec, SpecError
from benchmarks.stats import PROCESSES_METHOD, Reference, StatsError, decide, ratio_interval
from benchmarks.timing_policy import default_timing

SpecFactory = Callable[..., BenchSpec]


def test_a_ratio_interval_wholly_above_the_threshold_is_a_decided_pass() -> None:
    d = decide(Speedup(1.99, 1.98, 2.00), Reference(0.03, 2.00, 0.005))
    assert (d.outcome, d.decided) == ("pass", True)
    assert d.ratio_low is not None and d.ratio_low >= 0.97


def test_a_ratio_interval_wholly_below_the_threshold_is_a_decided_regression() -> None:
    d = decide(Speedup(1.80, 1.79, 1.81), Reference(0.03, 2.00, 0.005))
    assert d.outcome == "regression" and d.decided
    assert d.ratio_high is not None and d.ratio_high < 0.97


def test_an_interval_across_the_threshold_is_undecided() -> None:
    d = decide(Speedup(1.96, 1.90, 2.02), Reference(0.03, 2.00, 0.0))
    assert d.outcome == "undecided" and not d.decided


def test_the_baselines_own_uncertainty_counts() -> None:
    """The same new interval is decided against an exact reference and not against a
    loose one: a baseline known to +-3% cannot rule out a 3% drop."""
    new = Speedup(1.99, 1.985, 1.995)
    assert decide(new, Reference(0.03, 2.0, 0.0)).decided
    assert not decide(new, Reference(0.03, 2.0, math.log(1.03))).decided
    ratio, low, high = ratio_interval(new, Reference(0.03, 2.0, 0.01))
    assert low < ratio < high and ratio == pytest.approx(0.995)


def test_without_a_baseline_it_is_decided_once_precise_enough_to_judge_the_next_run() -> None:
    assert decide(Speedup(2.0, 1.99, 2.01), Reference(0.03)).outcome == "precise"
    assert decide(Speedup(2.0, 1.90, 2.10), Reference(0.03)).outcome == "undecided"


def test_a_threshold_outside_0_to_1_is_refused() -> None:
    with pytest.raises(StatsError, match="threshold"):
        decide(Speedup(2.0, 1.99, 2.01), Reference(1.5, 2.0))


def test_defaults_are_adaptive_over_processes_and_graphs_on_a_gpu() -> None:
    gpu, cpu = default_timing("cuda"), default_timing("cpu")
    assert gpu.cuda_graphs and gpu.processes >= 3 and gpu.max_processes > gpu.processes
    assert cpu.processes >= 3 and cpu.max_processes > cpu.processes
    assert gpu.budget_seconds > 0 and cpu.budget_seconds > 0


def test_a_decided_cell_is_also_asked_for_an_interval_narrow_enough_to_be_a_baseline() -> None:
    """GPU: 0.3%; CPU: half the default 3% threshold, what a series' first result needs."""
    assert 0 < default_timing("cuda").target_half_width <= 0.003
    assert default_timing("cpu").target_half_width == 0.015


def test_a_width_target_outside_0_to_half_is_refused() -> None:
    spec = BenchSpec(timing=replace(default_timing("cpu"), target_half_width=0.7))
    with pytest.raises(SpecError, match=r"timing\.target_half_width"):
        spec.validate()


def adaptive_spec(tiny_spec: SpecFactory, processes: int, max_processes: int,
                  budget: float = 0.0, target: float = 0.0) -> BenchSpec:
    spec = tiny_spec()
    return replace(spec, timing=replace(spec.timing, processes=processes,
                                        max_processes=max_processes, budget_seconds=budget,
                                        target_half_width=target))


@pytest.mark.slow
def test_a_decided_comparison_stops_at_the_minimum_processes(tiny_spec: SpecFactory) -> None:
    asked: list[str] = []

    def reference(first: BenchResult) -> Reference:
        asked.append(first.series_key)
        # A/A against 1.0 at a 99% threshold: decided unless two tiny processes differ by
        # more than 2.7x (at 90%, one CI run beside a busy neighbour went on to a third)
        return Reference(0.99, 1.0, 0.0)

    result = run_adaptive(adaptive_spec(tiny_spec, 2, 4), reference_for=reference,
                          timeout_s=300)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    adaptive = result.evidence["adaptive"]
    assert (adaptive["outcome"], adaptive["stopped_by"], adaptive["processes"]) == (
        "pass", "decided", 2)
    assert asked == [result.series_key]  # asked once, with the first process's key
    assert result.speedup is not None and result.speedup.method == PROCESSES_METHOD
    assert adaptive["timing_seconds"] == pytest.approx(
        sum(p["timing_seconds"] for p in result.evidence["processes"]))


@pytest.mark.slow
def test_a_decided_comparison_wider_than_the_target_goes_on(tiny_spec: SpecFactory) -> None:
    """Decided after 2 processes (as above), but a target width no interval of tiny
    processes reaches keeps it measuring to the process limit; the verdict's note says it
    was decided, and by how much the width missed."""
    from app.detection.notes import measurement_notes

    result = run_adaptive(adaptive_spec(tiny_spec, 2, 3, target=1e-9),
                          reference_for=lambda _: Reference(0.9, 1.0, 0.0), timeout_s=300)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    adaptive = result.evidence["adaptive"]
    assert (adaptive["outcome"], adaptive["stopped_by"], adaptive["processes"]) == (
        "pass", "max_processes", 3)
    assert adaptive["target_half_width"] == 1e-9
    note = " ".join(measurement_notes(result))
    assert "decided, but the CI half-width" in note and "process limit" in note


@pytest.mark.slow
def test_an_undecided_comparison_adds_processes_up_to_the_limit(
    tiny_spec: SpecFactory,
) -> None:
    # threshold 0 without a baseline: "precise" needs a zero-width interval, never reached
    result = run_adaptive(adaptive_spec(tiny_spec, 2, 3), reference_for=lambda _: Reference(0.0),
                          timeout_s=300)
    assert result.status == "ok", result.reason
    adaptive = result.evidence["adaptive"]
    assert (adaptive["outcome"], adaptive["stopped_by"], adaptive["processes"]) == (
        "undecided", "max_processes", 3)
    assert len(result.evidence["processes"]) == 3


@pytest.mark.slow
def test_the_timing_budget_stops_an_undecided_comparison(tiny_spec: SpecFactory) -> None:
    result = run_adaptive(adaptive_spec(tiny_spec, 2, 8, budget=0.001),
                          reference_for=lambda _: Reference(0.0), timeout_s=300)
    assert result.evidence["adaptive"]["stopped_by"] == "budget"
    assert result.evidence["adaptive"]["processes"] == 2


@pytest.mark.slow
def test_no_reference_means_the_fixed_number_of_processes(tiny_spec: SpecFactory) -> None:
    def broken(_first: BenchResult) -> Reference:
        raise RuntimeError("store unreachable")

    result = run_adaptive(adaptive_spec(tiny_spec, 2, 6), reference_for=broken, timeout_s=300)
    assert result.status == "ok"
    adaptive = result.evidence["adaptive"]
    assert adaptive["processes"] == 2 and adaptive["stopped_by"] == "fixed_processes"
    assert "store unreachable" in adaptive["reference_error"]


@pytest.mark.slow
def test_a_single_process_result_carries_the_cells_own_spec(tiny_spec: SpecFactory) -> None:
    """The store files a result under its cell by the spec's hash: the child's spec (its
    own seed, no adaptive limits) must not leak into the result."""
    spec = adaptive_spec(tiny_spec, 1, 1)
    result = run_adaptive(spec, reference_for=lambda _: Reference(0.03), timeout_s=300)
    assert result.status == "ok"
    assert result.spec == spec.to_dict()
    assert result.evidence["adaptive"]["processes"] == 1


@pytest.mark.slow
def test_cells_measured_together_take_turns_one_process_each(tiny_spec: SpecFactory) -> None:
    """Each cell's processes spread over the whole stretch (A1 B1, B2 A2): a drift of the
    machine reaches both cells alike and shows in each one's interval. A cell that is
    decided drops out and is reported at once; the other goes on."""
    a = adaptive_spec(tiny_spec, 2, 2)
    b = replace(adaptive_spec(tiny_spec, 2, 3), batch_size=2)
    finished: list[int] = []
    ran: list[int] = []
    results = run_adaptive_interleaved(
        [AdaptiveMeasurement(spec, reference_for=lambda _f: Reference(0.0), timeout_s=300)
         for spec in (a, b)],
        after_each=ran.append, on_done=lambda i, _r: finished.append(i))
    assert ran == [0, 1, 1, 0, 1]  # turn 1 forward, turn 2 reversed, then only b is left
    assert finished == [0, 1]
    assert [r.status for r in results] == ["ok", "ok"], [r.reason for r in results]
    assert [r.evidence["adaptive"]["processes"] for r in results] == [2, 3]
    pa, pb = (r.evidence["processes"] for r in results)
    assert pa[0]["finished_at"] <= pb[0]["started_at"]
    assert pb[1]["finished_at"] <= pa[1]["started_at"]  # a's second process came after b's


def test_a_measurement_of_an_invalid_spec_is_done_before_it_starts() -> None:
    spec = BenchSpec(batch_size=0)
    m = AdaptiveMeasurement(spec, reference_for=lambda _f: None, timeout_s=1)
    assert m.done and m.result().status == "failed"
    assert "batch_size" in (m.result().reason or "")


# ---- a confirmation's pair: candidate and baseline interleaved, adaptive over pairs --------

@pytest.mark.slow
def test_a_pair_decided_at_its_minimum_stops_there(tiny_spec: SpecFactory) -> None:
    """Eager against eager on both sides: the two speedups agree, and at a 90% threshold
    two pairs settle it (a pass), as a confirmation that finds nothing should stop."""
    results = run_interleaved(adaptive_spec(tiny_spec, 2, 5), [sys.executable] * 2,
                              timeout_s=300, threshold=0.9)
    assert [r.status for r in results] == ["ok", "ok"], [r.reason for r in results]
    for r in results:
        adaptive = r.evidence["adaptive"]
        # two pairs decide it on a quiet host; on a saturated one (the suite beside other
        # work) the t(1) interval of two pairs may need a third: never the limit of five
        assert (adaptive["outcome"], adaptive["stopped_by"]) == ("pass", "decided")
        assert adaptive["processes"] in (2, 3)
        assert adaptive["interleaved_pair"] is True and adaptive["threshold"] == 0.9
        assert len(r.evidence["processes"]) == adaptive["processes"]


@pytest.mark.slow
def test_an_undecided_pair_adds_pairs_up_to_the_process_limit(tiny_spec: SpecFactory) -> None:
    """At threshold 0 no interval of the ratio can clear 1 - 0: the pair keeps adding one
    process a side, alternating, until the limit; both sides took as many."""
    results = run_interleaved(adaptive_spec(tiny_spec, 2, 3), [sys.executable] * 2,
                              timeout_s=300, threshold=0.0)
    assert [r.status for r in results] == ["ok", "ok"], [r.reason for r in results]
    for r in results:
        adaptive = r.evidence["adaptive"]
        assert (adaptive["stopped_by"], adaptive["processes"]) == ("max_processes", 3)
        assert len(r.evidence["processes"]) == 3
    cand, base = results
    assert cand.started_at is not None and base.started_at is not None
    assert cand.finished_at is not None and base.finished_at is not None
    assert cand.started_at < base.started_at < cand.finished_at < base.finished_at


@pytest.mark.slow
def test_the_timing_budget_stops_an_undecided_pair(tiny_spec: SpecFactory) -> None:
    results = run_interleaved(adaptive_spec(tiny_spec, 2, 8, budget=0.001),
                              [sys.executable] * 2, timeout_s=300, threshold=0.0)
    assert [r.evidence["adaptive"]["stopped_by"] for r in results] == ["budget", "budget"]
    assert [r.evidence["adaptive"]["processes"] for r in results] == [2, 2]


@pytest.mark.slow
def test_without_a_threshold_a_pair_is_the_fixed_number_of_processes(
    tiny_spec: SpecFactory,
) -> None:
    results = run_interleaved(adaptive_spec(tiny_spec, 2, 6), [sys.executable] * 2,
                              timeout_s=300)
    assert [len(r.evidence["processes"]) for r in results] == [2, 2]
    assert all("adaptive" not in r.evidence for r in results)
