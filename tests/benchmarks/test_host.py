"""The CPU host a measurement shares: the timed thread pinned to a core of its own, its CPU
time as the clock of one-thread cells, and the load guard that reads from /proc how busy
other processes kept the host, re-measures a unit timed beside a busy co-tenant and marks
a result whose load stayed.

Real processes throughout: busy co-tenants started by the tests, real /proc readings,
children of a tiny model."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import host
from benchmarks.adaptive import AdaptiveMeasurement
from benchmarks.children import LOAD_REMEASURES
from benchmarks.clocks import THREAD_CLOCK, WALL_CLOCK
from benchmarks.spec import BenchSpec
from benchmarks.stats import Reference
from benchmarks.timing import time_paired
from benchmarks.timing_policy import TimingPolicy

SpecFactory = Callable[..., BenchSpec]
BUSY = "while True: pass"


@pytest.fixture
def co_tenant() -> Iterator[subprocess.Popen[bytes]]:
    """A process that keeps one core busy, as another job on a CI runner would."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


# ---- pinning ---------------------------------------------------------------------------------

def test_a_one_thread_cpu_cell_is_pinned_to_the_last_core_where_there_is_a_spare(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "allowed_cores", lambda: [0, 1, 2, 3])
    assert host.pin_cores("cpu", 1, {}) == [3]
    assert host.pin_cores("cpu", 2, {}) == [2, 3]
    assert host.pin_cores("cpu", None, {}) == []  # the library's threads: every core
    assert host.pin_cores("cpu", 4, {}) == []  # no core to spare
    # GPU workers of one host launch from different cores
    assert host.pin_cores("cuda", None, {"CUDA_VISIBLE_DEVICES": "1"}) == [2]
    assert host.pin_cores("cuda", None, {}) == [3]
    monkeypatch.setattr(host, "allowed_cores", lambda: [0])
    assert host.pin_cores("cpu", 1, {}) == []  # a one-core host pins nothing
    # a person may name the cores (a host running several CPU workers)
    assert host.pin_cores("cpu", 1, {host.CORES_ENV: "5, 6"}) == [6]


def test_the_timed_thread_pins_itself_to_the_cores_its_parent_chose() -> None:
    core = sorted(host.allowed_cores())[-1]
    seen: list[set[int]] = []

    def timed_thread() -> None:
        host.apply_pin({host.PIN_ENV: str(core)})
        import os
        seen.append(os.sched_getaffinity(0))

    worker = threading.Thread(target=timed_thread)
    worker.start()
    worker.join()
    assert seen == [{core}]
    assert host.apply_pin({}) == []  # nothing chosen: nothing pinned


# ---- the thread's CPU time --------------------------------------------------------------------

def test_one_thread_cells_are_timed_by_the_threads_cpu_time_with_the_wall_clock_beside(
) -> None:
    def work() -> None:
        sum(i * i for i in range(20_000))

    policy = TimingPolicy(warmup_iters=1, rounds=4, iters_per_round=3, min_rounds=1,
                          warmup_seconds=0.0)
    samples = time_paired(work, work, policy, device="cpu", cpu_clock=THREAD_CLOCK)
    assert samples.clock == THREAD_CLOCK and samples.clock_fallback is None
    assert len(samples.wall_baseline_ms) == 4 and len(samples.wall_candidate_ms) == 4
    record = samples.wall_record()
    assert record is not None and 0.5 < record["baseline_cpu_share"] <= 1.05


def test_work_done_by_other_threads_sends_the_cell_back_to_the_wall_clock() -> None:
    """A library that ignored the one-thread setting would do part of the work where the
    timed thread's CPU time cannot see it: the wall clock is then the honest one."""
    def helped() -> None:
        helper = threading.Thread(target=lambda: sum(i * i for i in range(200_000)))
        helper.start()
        helper.join()

    policy = TimingPolicy(warmup_iters=1, rounds=3, iters_per_round=2, min_rounds=1,
                          warmup_seconds=0.0)
    samples = time_paired(helped, helped, policy, device="cpu", cpu_clock=THREAD_CLOCK)
    assert samples.clock == WALL_CLOCK
    assert "other threads of the process" in (samples.clock_fallback or "")


# ---- the load monitor -----------------------------------------------------------------------

def test_the_load_is_everyone_elses_cpu_time_over_the_window() -> None:
    """Busy seconds of all cores minus the measured processes' own, per second of window."""
    busy = iter([100.0, 101.5, 103.0, 104.5])
    mine = iter([10.0, 10.5, 11.0, 11.5])
    clock = iter([0.0, 1.0, 2.0, 3.0])
    monitor = host.LoadMonitor(pids=lambda: [42], read_busy=lambda: next(busy),
                               read_process=lambda _pid: next(mine), clock=lambda: next(clock))
    for _ in range(4):
        monitor.sample()
    load = monitor.load()
    assert load is not None
    assert load.other_cores == pytest.approx(1.0)  # 1.5 busy - 0.5 ours per second
    assert load.seconds == pytest.approx(3.0)


def test_a_busy_co_tenant_shows_and_our_own_busy_process_does_not(
        co_tenant: subprocess.Popen[bytes]) -> None:
    """Two monitors of one stretch, one counting the busy process as ours: they differ by
    about the core it kept busy (another test worker may add load to both alike)."""
    others = host.LoadMonitor(pids=lambda: [])
    ours = host.LoadMonitor(pids=lambda: [co_tenant.pid])
    with others, ours:
        time.sleep(1.5)
    seen, mine = others.load(), ours.load()
    assert seen is not None and mine is not None
    assert seen.other_cores > 0.7
    assert 0.6 < seen.other_cores - mine.other_cores < 1.2


def test_busy_seconds_are_read_for_the_cores_asked_or_the_whole_host(tmp_path: Path) -> None:
    """/proc/stat's first line is the host; cpuN lines are its cores (idle and iowait are
    the 4th and 5th values, guest already inside user)."""
    ticks = host._TICKS
    (tmp_path / "stat").write_text(
        f"cpu  {6 * ticks} 0 {3 * ticks} {90 * ticks} {ticks} 0 0 0 0 0\n"
        f"cpu0 {5 * ticks} 0 {2 * ticks} {40 * ticks} 0 0 0 0 0 0\n"
        f"cpu1 {ticks} 0 {ticks} {50 * ticks} {ticks} 0 0 0 0 0\n"
        "intr 12345\n")
    assert host.busy_seconds(proc=tmp_path) == pytest.approx(9.0)
    assert host.busy_seconds([0], proc=tmp_path) == pytest.approx(7.0)
    assert host.busy_seconds([1], proc=tmp_path) == pytest.approx(2.0)
    assert host.busy_seconds([0, 1], proc=tmp_path) == pytest.approx(9.0)
    assert host.busy_seconds([7], proc=tmp_path) is None  # a core the host does not have


def test_a_gpu_cell_counts_its_workers_cores_and_a_cpu_cell_the_whole_host() -> None:
    assert host.load_cores("cpu") is None
    assert host.load_cores("cuda") == host.allowed_cores()


@pytest.mark.skipif(len(host.allowed_cores()) < 2, reason="needs two cores")
def test_a_busy_process_on_another_core_is_not_load_on_ours() -> None:
    """A fleet worker's share: a co-tenant pinned to the last core shows in a monitor of
    that core, and the two cores' monitors add up to the host's (real /proc readings;
    another test worker may add load anywhere, which the sum still holds)."""
    first, last = host.allowed_cores()[0], host.allowed_cores()[-1]
    proc = subprocess.Popen(["taskset", "-c", str(last), sys.executable, "-c", BUSY])
    try:
        time.sleep(0.3)
        mine = host.LoadMonitor(pids=lambda: [], cores=[first])
        theirs = host.LoadMonitor(pids=lambda: [], cores=[last])
        whole = host.LoadMonitor(pids=lambda: [], cores=[first, last])
        with mine, theirs, whole:
            time.sleep(1.5)
    finally:
        proc.kill()
        proc.wait()
    a, b, both = mine.load(), theirs.load(), whole.load()
    assert a is not None and b is not None and both is not None
    assert (a.cores, b.cores, both.cores) == (1, 1, 2)
    assert b.other_cores > 0.7  # the pinned busy loop fills its core
    assert a.other_cores + b.other_cores == pytest.approx(both.other_cores, abs=0.25)


# ---- the guard --------------------------------------------------------------------------------

def _cells(tiny_spec: SpecFactory, threshold: float) -> BenchSpec:
    spec = tiny_spec()
    return replace(spec, options={**spec.options, "sides": "split"},
                   timing=replace(spec.timing, processes=2, max_processes=2,
                                  max_host_load=threshold))


@pytest.mark.slow
def test_a_unit_timed_beside_a_busy_co_tenant_is_measured_again_then_marked(
        tiny_spec: SpecFactory, co_tenant: subprocess.Popen[bytes]) -> None:
    m = AdaptiveMeasurement(_cells(tiny_spec, 0.3), reference_for=lambda _r: Reference(0.0),
                            timeout_s=300)
    while not m.done:
        m.step()
    result = m.result()
    assert result.status == "ok", result.reason
    load = result.fingerprint["host_load"]
    # the co-tenant never left: the guard re-measured as often as it may, then kept and
    # marked what it had, never as a quiet measurement
    assert len(load["remeasured"]) == LOAD_REMEASURES
    assert all(r["other_cores"] > 0.3 for r in load["remeasured"])
    assert load["loaded"] is True and load["units"] == 2 and load["units_loaded"] == 2
    assert load["other_cores"] > 0.3 and load["threshold"] == 0.3
    assert result.evidence["adaptive"]["processes"] == 2


@pytest.mark.slow
def test_below_its_threshold_the_guard_only_records_the_load(
        tiny_spec: SpecFactory, co_tenant: subprocess.Popen[bytes]) -> None:
    m = AdaptiveMeasurement(_cells(tiny_spec, 4096.0), reference_for=lambda _r: Reference(0.0),
                            timeout_s=300)
    while not m.done:
        m.step()
    load = m.result().fingerprint["host_load"]
    assert "remeasured" not in load and load["loaded"] is False
    assert load["other_cores"] > 0.5  # recorded all the same
