"""run_isolated: a real child process per spec; crashes, hangs and OOM become failed results.

Faults are injected through the test-only hook in benchmarks.child (spec option `_fault`,
honoured only with SPEEDWATCH_ALLOW_FAULTS=1), so every failure here is a real signal,
a real timeout or a real MemoryError in a real child.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.child import FAULT_ENV
from benchmarks.children import explain_exit
from benchmarks.isolation import run_isolated
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec

SpecFactory = Callable[..., BenchSpec]
FAULTS_ON = {FAULT_ENV: "1"}


def faulty(tiny_spec: SpecFactory, fault: str) -> BenchSpec:
    return tiny_spec(options={"threads": 1, "_fault": fault})


def assert_failed(result: BenchResult, spec: BenchSpec) -> None:
    assert result.status == "failed"
    assert result.series_key == spec.series_key("cpu")
    assert result.spec == spec.to_dict()
    BenchResult.from_json(result.to_json())  # a failure is still a valid document


def test_a_successful_child_returns_its_measured_result(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec()
    result = run_isolated(spec, timeout_s=300)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    assert result.speedup is not None and result.baseline_samples_ms
    assert result.series_key == "resnet18-w8-i32/eager/constant/fp32/bs1/static/cpu/t1/nographs"


def test_segfault_is_reported_by_signal_name(tiny_spec: SpecFactory) -> None:
    spec = faulty(tiny_spec, "segfault")
    result = run_isolated(spec, timeout_s=120, env=FAULTS_ON)
    assert_failed(result, spec)
    assert result.reason == "killed by signal SIGSEGV"
    # faulthandler in the child leaves the Python stack of the crash in the tail
    assert result.stderr_tail is not None and "Segmentation fault" in result.stderr_tail


def test_hang_is_killed_at_the_timeout(tiny_spec: SpecFactory) -> None:
    spec = faulty(tiny_spec, "hang")
    t0 = time.monotonic()
    result = run_isolated(spec, timeout_s=2, env=FAULTS_ON)
    assert time.monotonic() - t0 < 30
    assert_failed(result, spec)
    assert result.reason == "timed out after 2s"


def test_exception_in_child_is_reported_with_its_message(tiny_spec: SpecFactory) -> None:
    spec = faulty(tiny_spec, "raise")
    result = run_isolated(spec, timeout_s=120, env=FAULTS_ON)
    assert_failed(result, spec)
    assert result.reason == "child exited with code 1: RuntimeError: injected fault: raise"
    assert result.stderr_tail is not None and "Traceback" in result.stderr_tail


def test_memory_error_is_reported_as_out_of_memory(tiny_spec: SpecFactory) -> None:
    spec = faulty(tiny_spec, "oom")
    result = run_isolated(spec, timeout_s=120, env=FAULTS_ON)
    assert_failed(result, spec)
    assert result.reason is not None and result.reason.startswith("out of memory")


def test_child_that_exits_cleanly_without_a_result_is_a_failure(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec()
    result = run_isolated(spec, timeout_s=60, python="/bin/true")
    assert_failed(result, spec)
    assert result.reason == "child exited without writing a result"


def test_an_interpreter_that_cannot_start_is_a_failure(tiny_spec: SpecFactory) -> None:
    result = run_isolated(tiny_spec(), timeout_s=60, python="/nonexistent/python")
    assert result.status == "failed"
    assert result.reason is not None and result.reason.startswith("cannot start /nonexistent")


def test_sigkill_is_explained_as_a_likely_oom_kill() -> None:
    assert "out of memory" in explain_exit(-9, "")
    assert explain_exit(-6, "") == "killed by signal SIGABRT"
    assert explain_exit(1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate") \
        .startswith("out of memory")


@pytest.mark.slow
def test_fault_option_is_ignored_without_the_environment_switch(tiny_spec: SpecFactory) -> None:
    spec = faulty(tiny_spec, "segfault")
    result = run_isolated(spec, timeout_s=300, env={FAULT_ENV: "0"})
    assert result.status == "ok", (result.reason, result.stderr_tail)



def _env_recorder(tmp_path: Path) -> tuple[str, Path]:
    """An 'interpreter' that writes the inductor cache folder it was started with."""
    record = tmp_path / "seen.txt"
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n"
                      f'echo "$TORCHINDUCTOR_CACHE_DIR" >> {record}\n')
    script.chmod(0o755)
    return str(script), record


def test_each_process_compiles_with_caches_of_its_own(tiny_spec: SpecFactory,
                                                      tmp_path: Path) -> None:
    python, record = _env_recorder(tmp_path)
    for _ in range(2):
        run_isolated(tiny_spec(), timeout_s=60, python=python)
    first, second = (line.split() for line in record.read_text().splitlines())
    assert first[0] != second[0]  # a later process never reuses the kernels an earlier one chose
    for seen in (first, second):
        assert not Path(seen[0]).exists()  # removed with the process's scratch folder


def test_a_compile_cache_the_caller_names_is_shared(tiny_spec: SpecFactory,
                                                    tmp_path: Path) -> None:
    python, record = _env_recorder(tmp_path)
    run_isolated(tiny_spec(), timeout_s=60, python=python,
                 env={"TORCHINDUCTOR_CACHE_DIR": "/srv/inductor-cache"})
    assert record.read_text().split()[0] == "/srv/inductor-cache"


def test_compile_cache_host_lets_the_processes_share_the_workers_cache(
        tiny_spec: SpecFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The option a fixed CI host asks for: a second process reuses the first's kernels
    (runtime variance only), so no process gets a scratch cache of its own."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/var/cache/worker-inductor")
    python, record = _env_recorder(tmp_path)
    spec = tiny_spec()
    shared = replace(spec, timing=replace(spec.timing, compile_cache="host"))
    for _ in range(2):
        run_isolated(shared, timeout_s=60, python=python)
    assert [line.split()[0] for line in record.read_text().splitlines()] == [
        "/var/cache/worker-inductor"] * 2
