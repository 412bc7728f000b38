"""timing.processes = K: K real child processes, one after another, merged into one result.

The children are real (`python -m benchmarks.child`), and failures are injected with the
test-only `_fault` hook (SPEEDWATCH_ALLOW_FAULTS=1); `_fault_process` aims it at one process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import typer
from typer.testing import CliRunner

from benchmarks.child import FAULT_ENV
from benchmarks.children import process_spec
from benchmarks.isolation import run_isolated
from benchmarks.result import BenchResult
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec, SpecError
from benchmarks.stats import PROCESSES_METHOD, summary
from cli.bench import register

SpecFactory = Callable[..., BenchSpec]


def with_processes(spec: BenchSpec, k: int) -> BenchSpec:
    return replace(spec, timing=replace(spec.timing, processes=k))


def test_two_processes_merge_into_one_result_with_a_between_process_ci(
    tiny_spec: SpecFactory,
) -> None:
    spec = with_processes(tiny_spec(), 2)
    result = run_isolated(spec, timeout_s=300)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    BenchResult.from_json(result.to_json())  # a valid schema-1 document
    assert result.spec == spec.to_dict() and result.spec["timing"]["processes"] == 2
    assert result.series_key == "resnet18-w8-i32/eager/constant/fp32/bs1/static/cpu/t1/nographs"

    procs = result.evidence["processes"]
    assert len(procs) == 2
    assert result.evidence["ci_method"] == PROCESSES_METHOD == result.speedup.method  # type: ignore[union-attr]
    # Rounds of process 1, then process 2, still paired; summaries are of the pooled rounds.
    assert len(result.baseline_samples_ms) == len(result.candidate_samples_ms) \
        == sum(p["rounds"] for p in procs) == result.evidence["timing"]["rounds"]
    assert result.baseline == summary(result.baseline_samples_ms)
    assert result.candidate == summary(result.candidate_samples_ms)
    s = result.speedup
    assert s is not None
    assert s.value == result.baseline.median_ms / result.candidate.median_ms
    for p in procs:
        assert p["ci_low"] <= p["speedup"] <= p["ci_high"]
        assert s.ci_low <= p["speedup"] <= s.ci_high
    assert result.compile_seconds == procs[0]["compile_seconds"]


def test_a_failing_second_process_fails_the_cell_and_names_it(tiny_spec: SpecFactory) -> None:
    spec = with_processes(tiny_spec(options={"threads": 1, "_fault": "raise",
                                             "_fault_process": 2}), 2)
    result = run_isolated(spec, timeout_s=300, env={FAULT_ENV: "1"})
    assert result.status == "failed"
    assert result.reason == ("process 2 of 2: child exited with code 1: "
                             "RuntimeError: injected fault: raise")
    assert result.spec == spec.to_dict()
    assert result.speedup is None
    BenchResult.from_json(result.to_json())


def test_a_failing_first_process_ends_the_cell_without_running_the_rest(
    tiny_spec: SpecFactory,
) -> None:
    # Process 1 hangs to its timeout; were processes 2 and 3 run, they would hang too.
    spec = with_processes(tiny_spec(options={"threads": 1, "_fault": "hang"}), 3)
    result = run_isolated(spec, timeout_s=2, env={FAULT_ENV: "1"})
    assert result.status == "failed"
    assert result.reason == "process 1 of 3: timed out after 2s"
    assert result.duration_seconds is not None and result.duration_seconds < 15


def test_each_child_measures_one_process_with_its_own_bootstrap_seed(
    tiny_spec: SpecFactory,
) -> None:
    spec = with_processes(tiny_spec(options={"threads": 1, "_fault": "raise",
                                             "_fault_process": 2}), 3)
    children = [process_spec(spec, j) for j in range(3)]
    assert [c.timing.processes for c in children] == [1, 1, 1]
    assert [c.timing.seed for c in children] == [0, 1, 2]
    assert all(c.seed == spec.seed for c in children)  # same weights and input
    assert ["_fault" in c.options for c in children] == [False, True, False]
    assert all("_fault_process" not in c.options for c in children)


def test_in_process_run_refuses_several_processes(tiny_spec: SpecFactory) -> None:
    result = run_spec(with_processes(tiny_spec(), 3))
    assert result.status == "failed"
    assert result.reason is not None and "processes > 1 needs isolation" in result.reason


@pytest.mark.parametrize("k", [0, 17])
def test_process_count_outside_1_to_16_is_an_invalid_spec(tiny_spec: SpecFactory, k: int) -> None:
    with pytest.raises(SpecError, match=r"timing\.processes"):
        with_processes(tiny_spec(), k).validate()


def test_specs_written_before_processes_existed_still_load_as_one_process(
    tiny_spec: SpecFactory,
) -> None:
    old = tiny_spec().to_dict()
    del old["timing"]["processes"]
    assert BenchSpec.from_dict(old).timing.processes == 1


def test_cli_refuses_processes_without_isolation() -> None:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """A group, as in the real `speedwatch` command."""

    register(app)
    res = CliRunner().invoke(app, ["bench", "--backend", "eager", "--processes", "3",
                                   "--no-isolate"])
    assert res.exit_code == 2
    assert "--processes > 1 needs --isolate" in res.output


def test_an_isolated_run_with_too_many_processes_fails_before_starting_any(
    tiny_spec: SpecFactory,
) -> None:
    spec = with_processes(tiny_spec(), 17)
    result = run_isolated(spec, timeout_s=60, python="/nonexistent/python")
    assert result.status == "failed"
    assert result.reason is not None and result.reason.startswith("invalid spec: timing.processes")


def test_a_rest_before_each_process_is_waited_out_and_kept_in_the_spec(
    tiny_spec: SpecFactory,
) -> None:
    """timing.rest_seconds: the host rests before each process of a cell (a new timing
    option added as docs/ARCHITECTURE.md's worked example). A lower bound only: a loaded
    host may take longer, never shorter."""
    spec = with_processes(tiny_spec(options={"threads": 1, "_fault": "raise"}), 2)
    rested = replace(spec, timing=replace(spec.timing, rest_seconds=3.0))
    started = time.monotonic()
    result = run_isolated(rested, timeout_s=300, env={FAULT_ENV: "1"})
    assert time.monotonic() - started >= 3.0
    assert result.status == "failed"  # the first process's fault ends the cell
    assert result.spec["timing"]["rest_seconds"] == 3.0
    assert "rest_seconds" not in spec.to_dict()["timing"]  # a spec without a rest as before
