"""How a cell goes on once its first unit's software is known: nothing to decide when it is
the baseline's own software; both environments measured in turns when it is not (CPU); and
the rounds of later units allocated from the cell's own variance components.

Real child processes of a tiny model (eager against eager); the "other environment" is the
same interpreter behind a wrapper that puts a really installed wheel on its path, and, for
a slowdown, the harness's test-only candidate fault (a busy-wait on every candidate call).
"""

from __future__ import annotations

import math
import stat
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.adaptive import AdaptiveMeasurement, run_adaptive
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec
from benchmarks.stats import Reference
from tests.workers.wheels import install_beside

SpecFactory = Callable[..., BenchSpec]


def spec_of(tiny_spec: SpecFactory, processes: int = 2, max_processes: int = 6,
            budget: float = 0.0) -> BenchSpec:
    spec = tiny_spec()
    return replace(spec, timing=replace(spec.timing, processes=processes,
                                        max_processes=max_processes, budget_seconds=budget))


def interpreter(tmp_path: Path, name: str, *, extra_site: Path | None = None,
                slow_candidate: float = 0.0, variables: str = "") -> str:
    """A named interpreter as a worker is configured with one: this Python behind a script."""
    lines = ["#!/bin/sh"]
    if variables:
        lines.append(f"export {variables}")
    if extra_site is not None:
        lines.append(f'export PYTHONPATH="{extra_site}${{PYTHONPATH:+:$PYTHONPATH}}"')
    if slow_candidate:
        lines.append(f"export SPEEDWATCH_ALLOW_FAULTS=1 "
                     f"SPEEDWATCH_FAULT_SLOW_CANDIDATE={slow_candidate}")
    lines.append(f'exec "{sys.executable}" "$@"')
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def unrelated_site(tmp_path: Path) -> Path:
    """A directory holding a really installed package that no benchmark imports."""
    return install_beside(tmp_path, "swunrelated", "1.0")


def first_unit(spec: BenchSpec) -> BenchResult:
    result = run_adaptive(replace(spec, timing=replace(spec.timing, processes=1,
                                                       max_processes=1)),
                          reference_for=lambda _first: None, timeout_s=300)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    return result


@pytest.mark.slow
def test_the_baselines_own_software_measures_its_minimum_and_decides_nothing(
        tiny_spec: SpecFactory) -> None:
    """A reference far away (speedup 5.0, exact) would keep an adaptive cell measuring to its
    limit; with the baseline's very software there is nothing to decide."""
    spec = spec_of(tiny_spec, processes=2, max_processes=6)
    software = first_unit(spec).fingerprint["software"]
    result = run_adaptive(spec, timeout_s=300, reference_for=lambda _first: Reference(
        0.03, 5.0, 0.0, software=software["digest"], environment=software["environment"]))
    assert result.status == "ok", result.reason
    adaptive = result.evidence["adaptive"]
    assert (adaptive["mode"], adaptive["stopped_by"], adaptive["processes"]) == (
        "same_software", "same_software", 2)
    assert result.fingerprint["software"]["digest"] == software["digest"]


@pytest.mark.slow
def test_another_environment_on_the_cpu_is_measured_in_turns_with_the_baselines(
        tiny_spec: SpecFactory, tmp_path: Path) -> None:
    """Same code, an unrelated package added: both environments' units alternate in this
    session, and the comparison of their speedups (about 1) passes at an 80% threshold (a
    tiny model's half-millisecond calls beside another test worker swing by tens of
    percent between processes: the mechanism is under test here, not the precision)."""
    spec = spec_of(tiny_spec, processes=2, max_processes=6)
    base_python = interpreter(tmp_path, "baseline-python")
    cand_python = interpreter(tmp_path, "candidate-python", extra_site=unrelated_site(tmp_path))
    asked: list[Reference] = []

    def baseline_python(reference: Reference) -> str:
        asked.append(reference)
        return base_python

    measurement = AdaptiveMeasurement(
        spec, python=cand_python, timeout_s=300, baseline_python_for=baseline_python,
        reference_for=lambda first: Reference(0.8, 1.0, 0.0, software="000000000000",
                                              environment="111111111111", result_id=41))
    while not measurement.done:
        measurement.step()
    result = measurement.result()
    assert result.status == "ok", (result.reason, result.stderr_tail)
    assert len(asked) == 1 and asked[0].result_id == 41
    adaptive, comparison = result.evidence["adaptive"], result.evidence["comparison"]
    assert adaptive["mode"] == "interleaved" and adaptive["outcome"] == "pass"
    assert comparison["baseline_result_id"] == 41
    assert comparison["baseline_environment"] == "111111111111"
    assert comparison["pairs"] == adaptive["processes"] >= 2
    assert len(comparison["baseline_processes"]) == comparison["pairs"]
    low, high = comparison["ratio_ci"]
    assert low <= comparison["ratio"] <= high and low >= 0.2
    # eager never imports the package: its side ran the same software in both environments,
    # so the candidate sides' own times are compared
    assert comparison["basis"] == "candidate_side"
    sides = result.fingerprint["software"]["sides"]
    assert comparison["shared_baseline_side"] == sides["baseline"] != sides["candidate"]
    # the candidate's own identity names the package the baseline's lacks
    assert "swunrelated" in result.fingerprint["software"]["distributions"]


@pytest.mark.slow
def test_a_slower_environment_is_a_regression_decided_in_turns(
        tiny_spec: SpecFactory, tmp_path: Path) -> None:
    """The candidate's environment makes every candidate call twice as long: the in-session
    comparison finds the ratio near 0.5, a regression at a 20% threshold. Up to 8 pairs:
    beside the rest of the suite a tiny call's level moved 2x between units and 4 pairs
    left the interval at [0.32, 0.96]."""
    spec = spec_of(tiny_spec, processes=2, max_processes=8)
    measurement = AdaptiveMeasurement(
        spec, python=interpreter(tmp_path, "slow-python", slow_candidate=1.0), timeout_s=300,
        baseline_python_for=lambda _ref: interpreter(tmp_path, "plain-python"),
        reference_for=lambda first: Reference(0.2, 1.0, 0.0, software="000000000000",
                                              environment="111111111111", result_id=7))
    while not measurement.done:
        measurement.step()
    result = measurement.result()
    assert result.status == "ok", (result.reason, result.stderr_tail)
    comparison = result.evidence["comparison"]
    assert result.evidence["adaptive"]["outcome"] == "regression"
    # real (the interval excludes no change) and past the 20% threshold: the decision rule;
    # beside the suite a tiny call's level moves enough that the upper end reached 0.999
    low, ratio, high = comparison["ratio_ci"][0], comparison["ratio"], comparison["ratio_ci"][1]
    assert high < 1.0 and ratio < 0.8
    # The fault doubles every candidate call: the true ratio is 0.5. Beside another test
    # worker a tiny call's estimate strays (0.3-0.72 seen), but never further than its own
    # interval allows: 0.5 lies within twice the half-width (an honest 95% interval misses
    # that about once in 10,000 runs), where a ratio computed wrong (0.7 with +-5%) would not.
    log_half = math.log(high / low) / 2
    assert abs(math.log(ratio / 0.5)) <= 2 * log_half, (low, ratio, high)
    assert comparison["basis"] == "candidate_side"  # the knob acts on the candidate alone


@pytest.mark.slow
def test_a_variable_acting_on_both_sides_compares_the_whole_speedups(
        tiny_spec: SpecFactory, tmp_path: Path) -> None:
    """Another thread setting reaches eager too: its side is other software, and the
    comparison is of the two environments' speedups."""
    spec = spec_of(tiny_spec, processes=2, max_processes=2)
    measurement = AdaptiveMeasurement(
        spec, python=interpreter(tmp_path, "omp-python", variables="OMP_NUM_THREADS=1"),
        timeout_s=300, baseline_python_for=lambda _ref: interpreter(tmp_path, "plain"),
        reference_for=lambda first: Reference(0.5, 1.0, 0.0, software="000000000000",
                                              environment="111111111111", result_id=7))
    while not measurement.done:
        measurement.step()
    result = measurement.result()
    assert result.status == "ok", (result.reason, result.stderr_tail)
    comparison = result.evidence["comparison"]
    assert comparison["basis"] == "speedups" and "shared_baseline_side" not in comparison
    assert comparison["baseline_speedup"] == comparison["baseline_measured_speedup"]


@pytest.mark.slow
def test_later_units_get_the_rounds_the_cells_variance_components_ask_for(
        tiny_spec: SpecFactory) -> None:
    spec = spec_of(tiny_spec, processes=2, max_processes=3, budget=60.0)
    result = run_adaptive(spec, timeout_s=300,
                          reference_for=lambda _first: Reference(0.001, 1.0, 0.0))
    assert result.status == "ok", result.reason
    allocation = result.evidence["allocation"]
    assert allocation["after_units"] == 2
    assert 3 <= allocation["rounds_per_unit"] <= spec.timing.rounds
    assert allocation["unit_seconds"] > 0 and allocation["round_seconds"] > 0
    third = result.evidence["processes"][2]
    assert third["rounds"] <= allocation["rounds_per_unit"]
    # what a comparison of two such measurements resolves at the budget, from the same data
    resolvable = result.evidence["adaptive"]["resolvable"]
    assert resolvable["budget_seconds"] == 60.0 and resolvable["half_width"] > 0
