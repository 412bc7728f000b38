"""The GPU fleet without a GPU: pinning and routing planned from NVML answers recorded on a
real H100 host (tests/workers/nvml/h100.json, `scripts/nvml_probe.py`), the supervisor with
real processes, the exclusivity guard on recorded samples, and contaminated cells measured
again or failed with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Cell
from app.services.runs import requeue_contaminated
from benchmarks.fingerprint import device_class_from_gpu_name
from tests.workers.helpers import new_run, reload_run
from workers.dispatch import cell_groups
from workers.exclusivity import DeviceGuard, Sample, own_pids, pinned_index, throttle_reason
from workers.fleet import (
    CORES_ENV,
    FleetError,
    apply_worker_cores,
    cpu_shares,
    format_cores,
    parse_cores,
    plan,
    sibling_order,
)

RECORDED = json.loads((Path(__file__).parent / "nvml" / "h100.json").read_text())


def _gpus(count: int = 1) -> list[dict[str, object]]:
    """The recorded host's GPUs as `visible_gpus()` gives them; a second one, for a
    two-GPU host, is the same recorded device under index 1."""
    idle = RECORDED["idle"][0]
    return [{"index": i, "name": idle["name"],
             "device_class": device_class_from_gpu_name(idle["name"]),
             "memory_total_bytes": idle["memory_total"]} for i in range(count)]


# ---- planning --------------------------------------------------------------------------------

def test_each_gpu_gets_a_pinned_worker_on_its_class_queue_and_the_generic_one() -> None:
    plans = plan(_gpus(2), "all", {"cuda": "gpu", "nvidia-h100": "gpu-h100"}, "host-a")
    assert [(p.index, p.device_class, p.queues, p.hostname) for p in plans] == [
        (0, "nvidia-h100", ("gpu-h100", "gpu"), "speedwatch-gpu0-nvidia-h100@host-a"),
        (1, "nvidia-h100", ("gpu-h100", "gpu"), "speedwatch-gpu1-nvidia-h100@host-a")]
    env = plans[1].env({"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_class_without_its_own_queue_serves_the_generic_gpu_queue() -> None:
    [only] = plan(_gpus(1), "0", {"cuda": "gpu"}, "h")
    assert only.queues == ("gpu",)


@pytest.mark.parametrize(("selection", "routes", "says"), [
    ("2", {"cuda": "gpu"}, "--gpus: no GPU 2 here (NVML sees 0, 1)"),
    ("zero", {"cuda": "gpu"}, "--gpus: 'zero' is not 'all' or indices such as 0,1"),
    ("all", {"nvidia-a100": "gpu-a100"}, "no queue serves class 'nvidia-h100' or 'cuda'"),
])
def test_a_selection_that_cannot_be_served_is_refused_in_words(
        selection: str, routes: dict[str, str], says: str) -> None:
    with pytest.raises(FleetError, match=says.replace("(", r"\(").replace(")", r"\)")):
        plan(_gpus(2), selection, routes, "h")


def test_a_worker_is_pinned_only_when_one_device_is_visible_by_index() -> None:
    assert pinned_index({"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert pinned_index({"CUDA_VISIBLE_DEVICES": "0,1"}) is None
    assert pinned_index({}) is None


def test_a_run_spreads_over_the_live_workers_of_its_queue() -> None:
    cells = [(i, "gpu-h100") for i in range(16)]
    assert [len(g) for g in cell_groups(cells, 16, {"gpu-h100": 2})] == [8, 8]
    assert [len(g) for g in cell_groups(cells, 16, {})] == [16]
    assert [len(g) for g in cell_groups(cells, 4, {"gpu-h100": 2})] == [4, 4, 4, 4]


def test_over_several_workers_a_runs_cells_are_dealt_round_so_none_gets_only_large_batches(
) -> None:
    # a run's cells come batch by batch: 1, 2, 4, ... 128 for constant, then for tensor
    cells = [(i, "gpu") for i in range(16)]
    groups = cell_groups(cells, 16, {"gpu": 4})
    assert groups == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
    assert sorted(c for g in groups for c in g) == list(range(16))
    # one worker: runs of at most `size`, in order (measured together, one after another)
    assert cell_groups(cells[:5], 3, {"gpu": 1}) == [[0, 1, 2], [3, 4]]


# ---- each worker's share of the host's cores ---------------------------------------------------

def test_cores_are_split_evenly_among_the_selected_gpus_when_nvml_says_nothing() -> None:
    shares = cpu_shares([0, 1, 2, 3], list(range(64)), order=sorted)
    assert shares == {i: tuple(range(16 * i, 16 * i + 16)) for i in range(4)}
    assert cpu_shares([0], list(range(64)), order=sorted) == {0: tuple(range(64))}
    assert cpu_shares([0, 1, 2], list(range(8)), order=sorted) == {
        0: (0, 1, 2), 1: (3, 4, 5), 2: (6, 7)}


def test_each_gpu_keeps_to_the_cores_near_it_split_among_the_gpus_that_share_them() -> None:
    near = {0: range(0, 32), 1: range(0, 32), 2: range(32, 64), 3: range(32, 64)}
    shares = cpu_shares([0, 1, 2, 3], list(range(64)), near, order=sorted)
    assert shares == {0: tuple(range(0, 16)), 1: tuple(range(16, 32)),
                      2: tuple(range(32, 48)), 3: tuple(range(48, 64))}
    # one GPU of the node selected: all the node's cores, none of the far node's
    assert cpu_shares([2], list(range(64)), near, order=sorted) == {2: tuple(range(32, 64))}
    # a worker confined to half the host: the near cores it may use
    assert cpu_shares([0, 1], list(range(16)), near, order=sorted) == {
        0: tuple(range(8)), 1: tuple(range(8, 16))}


def test_overlapping_or_too_small_affinities_fall_back_to_an_even_split() -> None:
    overlapping = {0: range(0, 40), 1: range(24, 64)}
    assert cpu_shares([0, 1], list(range(64)), overlapping, order=sorted) == {
        0: tuple(range(32)), 1: tuple(range(32, 64))}
    assert cpu_shares([0, 1, 2], [0, 1], order=sorted) == {}  # fewer cores than GPUs


def test_hyperthread_siblings_stay_in_one_share(tmp_path: Path) -> None:
    for core in range(8):  # siblings numbered 4 apart: (0, 4), (1, 5), (2, 6), (3, 7)
        topo = tmp_path / f"cpu{core}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(f"{core % 4},{core % 4 + 4}\n")
    ordered = sibling_order(list(range(8)), tmp_path)
    assert ordered == [0, 4, 1, 5, 2, 6, 3, 7]
    shares = cpu_shares([0, 1], list(range(8)), order=lambda c: sibling_order(c, tmp_path))
    assert shares == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}


def test_a_plan_carries_each_workers_cores_to_its_environment() -> None:
    plans = plan(_gpus(2), "all", {"cuda": "gpu"}, "h", allowed=list(range(32)))
    env = plans[1].env({})
    assert parse_cores(env[CORES_ENV]) == list(plans[1].cores) and len(plans[1].cores) == 16
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "16"
    assert "SPEEDWATCH_WORKER_CORES" not in plan(_gpus(1), "0", {"cuda": "gpu"}, "h")[0].env({})


def test_core_lists_read_and_write_as_taskset_does() -> None:
    assert format_cores([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert parse_cores("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    with pytest.raises(ValueError, match="'a-b' is not a core or a range of cores"):
        parse_cores("0,a-b")


def test_a_worker_keeps_to_its_cores_and_refuses_cores_it_may_not_use() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    try:
        assert apply_worker_cores({CORES_ENV: str(allowed[-1])}) == [allowed[-1]]
        assert sorted(os.sched_getaffinity(0)) == [allowed[-1]]
    finally:
        os.sched_setaffinity(0, allowed)
    assert apply_worker_cores({}) == []
    with pytest.raises(FleetError, match="none of these cores is allowed here"):
        apply_worker_cores({CORES_ENV: "100000"})


# ---- the supervisor, with real processes ------------------------------------------------------

SUPERVISE = """
import sys, time
from workers.fleet import plan, supervise
gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "device_class": "nvidia-h100"}
        for i in (0, 1)]
plans = plan(gpus, "all", {"cuda": "gpu"}, "h")
child = "import os, time; print('gpu', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); " \\
        "time.sleep(120)"
sys.exit(supervise(plans, lambda p: [sys.executable, "-c", child], {"PATH": "/usr/bin"},
                   poll_s=0.2))
"""


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


def test_the_supervisor_restarts_a_worker_that_died_and_stops_all_on_sigterm() -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISE], stdout=subprocess.PIPE,
                            text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert proc.stdout is not None
        seen = sorted(proc.stdout.readline().strip() for _ in range(2))
        assert seen == ["gpu 0", "gpu 1"]  # each child sees only its own GPU
        first = _children(proc.pid)
        assert len(first) == 2
        os.kill(first[0], signal.SIGKILL)
        assert proc.stdout.readline().strip() in ("gpu 0", "gpu 1")  # started again
        deadline = time.monotonic() + 10
        while len(_children(proc.pid)) != 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        again = _children(proc.pid)
        assert len(again) == 2 and first[0] not in again
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert _children(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- the exclusivity guard --------------------------------------------------------------------

def _recorded(state: str) -> Sample:
    device = RECORDED[state][0]
    return Sample(tuple(p["pid"] for p in device["processes"]), device["utilization_gpu"])


def test_a_benchmark_child_of_the_worker_is_its_own_process() -> None:
    probe, child = RECORDED["probe_pid"], RECORDED["child_pid"]
    guard = DeviceGuard(0, lambda: _recorded("child_running"), mine=lambda: {probe, child})
    assert guard.busy_reason() is None and guard.reasons() == []


def test_a_process_outside_the_worker_is_foreign_and_named() -> None:
    guard = DeviceGuard(0, lambda: _recorded("child_running"), mine=lambda: {1},
                        name_of=lambda pid: "python3")
    assert guard.busy_reason() == (
        f"a foreign process used GPU 0 during the cell: pid {RECORDED['child_pid']} (python3)")


def test_a_busy_device_with_no_process_listed_is_not_idle() -> None:
    guard = DeviceGuard(0, lambda: Sample((), 100), mine=lambda: {1})
    assert "was 100% busy with no process of this worker on it" in (guard.busy_reason() or "")
    assert DeviceGuard(0, lambda: _recorded("idle"), mine=lambda: {1}).busy_reason() is None


def test_the_guard_samples_while_a_cell_runs() -> None:
    samples = iter([Sample((), 0)] * 3 + [Sample((4242,), 90)] * 1000)
    guard = DeviceGuard(0, lambda: next(samples), mine=lambda: {1}, name_of=lambda _: "train",
                        interval_s=0.01)
    guard.start()
    time.sleep(0.3)
    guard.stop()
    assert guard.reasons() == ["a foreign process used GPU 0 during the cell: pid 4242 (train)"]


def test_a_foreign_process_taints_the_cell_it_overlapped_and_not_the_next_one() -> None:
    now = [100.0]
    samples = iter([Sample((7,), 90), Sample((7,), 90), Sample((), 0), Sample((), 0)])
    guard = DeviceGuard(1, lambda: next(samples), mine=lambda: {1}, name_of=lambda _: "train",
                        clock=lambda: now[0])
    for t in (100.0, 101.0, 120.0, 121.0):  # seen at 100 and 101, gone by 120
        now[0] = t
        guard.look()
    first = guard.account(99.0, 110.0)
    assert first["foreign"] == ["a foreign process used GPU 1 during the cell: pid 7 (train)"]
    second = guard.account(115.0, 125.0)
    assert second == {"gpu_index": 1, "samples": 2, "interval_s": 0.5, "foreign": []}


def test_own_pids_are_this_process_and_its_descendants() -> None:
    grandchild = subprocess.Popen([sys.executable, "-c",
                                   "import subprocess, sys; subprocess.run([sys.executable, "
                                   "'-c', 'import time; time.sleep(5)'])"])
    try:
        deadline = time.monotonic() + 5
        while not _children(grandchild.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        mine = own_pids()
        assert os.getpid() in mine and grandchild.pid in mine
        assert set(_children(grandchild.pid)) <= mine
        assert 1 not in mine
    finally:
        grandchild.kill()
        grandchild.wait()


def test_a_throttled_gpu_reads_as_contamination() -> None:
    clean = {"throttled": False, "nvml_start": {"throttle_reasons": []}}
    hot = {"throttled": True, "nvml_start": {"throttle_reasons": []},
           "nvml_end": {"throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown"]}}
    assert throttle_reason(clean) is None
    assert throttle_reason(hot) == ("the GPU throttled during timing (sw_power_cap, "
                                    "hw_thermal_slowdown)")


# ---- contaminated cells -----------------------------------------------------------------------

@pytest.mark.usefixtures("clean_db")
def test_a_contaminated_cell_is_measured_again_then_fails_with_the_reason(
        session: Session, settings: Settings) -> None:
    run_id, [cell_id] = new_run(session, settings)
    reason = "a foreign process used GPU 0 during the cell: pid 4242 (train)"
    for attempt in range(1, settings.max_cell_attempts + 1):
        cell = session.get(Cell, cell_id)
        assert cell is not None
        cell.status, cell.attempts = "running", attempt
        session.commit()
        again = requeue_contaminated(session, cell_id, reason, settings)
        session.commit()
        session.expire_all()
        cell = session.get(Cell, cell_id)
        assert cell is not None
        if attempt < settings.max_cell_attempts:
            assert again == (cell_id, settings.cpu_queue)
            assert (cell.status, cell.enqueued_at) == ("queued", None)
            assert cell.error == f"attempt {attempt} contaminated, measured again: {reason}"
    assert again is None
    run = reload_run(session, run_id)
    assert run.cells[0].status == "failed"
    assert run.cells[0].error == (
        f"contaminated on all {settings.max_cell_attempts} attempts, the last: {reason}")


# ---- what a worker announces -------------------------------------------------------------------

def test_a_worker_of_webhooks_and_maintenance_alone_lists_no_gpus(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only a worker that measures shows the host's GPUs on the workers page; the webhook
    worker of a GPU host listed both H100s beside the GPU workers' own."""
    from benchmarks import fingerprint
    from workers.registry import announcement

    monkeypatch.setattr(fingerprint, "visible_gpus", lambda state=False: _gpus(2))
    settings = Settings(database_url=f"sqlite:///{tmp_path}/a.db")
    hooks = announcement("hooks@h", [settings.webhook_queue, settings.maintenance_queue,
                                     "direct-0123456789abcdef0123"], settings)
    gpu = announcement("speedwatch-gpu0@h", ["gpu", "direct-0123456789abcdef0123"], settings)
    assert hooks.gpus == []
    assert [g["index"] for g in gpu.gpus] == [0, 1]
