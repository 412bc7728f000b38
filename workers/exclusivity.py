"""A GPU cell is measured alone on its device, or it is not stored as clean.

A worker pinned to one GPU asks NVML, before and during its cells, which processes hold a
context on that device. Any process outside the worker's own tree (its benchmark children
are inside it) is foreign: a second benchmark, someone's notebook, a training job. Its
kernels share the SMs and the memory bandwidth with ours, and every figure measured beside
it is wrong by an unknown amount. So is a figure measured while the GPU throttled (clock
events for power or heat, read into the result's fingerprint before and after timing).

Such a result is not stored: the cell goes back to its queue with the reason (bounded by
`max_cell_attempts`, like a lost worker) and fails with that reason when every attempt was
contaminated. NVML reports host pids where the worker can see them (checked on an H100 host:
the pid NVML lists is the one `Popen` returned; tests/workers/nvml/h100.json).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.result import BenchResult

log = logging.getLogger(__name__)

# A device this busy before a cell, with none of our processes on it, is in use by someone
# NVML does not list (another container's process): measuring then would be contaminated.
BUSY_UTILIZATION_PCT = 10
SAMPLE_INTERVAL_S = 0.5


def own_pids(root: int | None = None, proc: Path = Path("/proc")) -> set[int]:
    """`root` (default: this process) and every descendant, read from /proc."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def process_name(pid: int, proc: Path = Path("/proc")) -> str:
    try:
        return (proc / str(pid) / "comm").read_text().strip() or "?"
    except OSError:
        return "?"


@dataclass(frozen=True)
class Sample:
    """One look at the device: the compute processes on it and how busy it was."""

    pids: tuple[int, ...]
    utilization_pct: int


@dataclass
class DeviceGuard:
    """Watches one GPU (a physical NVML index) for processes outside this worker's tree.

    `read` returns a Sample (NVML in production; recorded answers in tests). `start` begins
    sampling in a thread; `reasons()` says what was seen since, in a person's words, and
    `account(since, until)` what was seen while one cell measured: a worker measures its
    cells one after another, and a foreign process that came and went during one cell says
    nothing about the next.
    """

    index: int
    read: Callable[[], Sample]
    mine: Callable[[], set[int]] = own_pids
    name_of: Callable[[int], str] = process_name
    interval_s: float = SAMPLE_INTERVAL_S
    clock: Callable[[], float] = time.time
    # pid -> (name, first seen, last seen), in `clock` seconds
    _foreign: dict[int, tuple[str, float, float]] = field(default_factory=dict)
    _looks: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def look(self) -> Sample:
        """Sample once, remembering any foreign process (pid, name, when)."""
        sample = self.read()
        now = self.clock()
        mine = self.mine() if sample.pids else set()
        with self._lock:
            self._looks.append(now)
            for pid in sample.pids:
                if pid in mine:
                    continue
                known = self._foreign.get(pid)
                name = known[0] if known is not None else self.name_of(pid)
                self._foreign[pid] = (name, known[1] if known is not None else now, now)
        return sample

    def busy_reason(self) -> str | None:
        """Before a cell: a foreign process on the device, or a busy device with none of ours."""
        sample = self.look()
        foreign = self.reasons()
        if foreign:
            return foreign[0]
        if sample.utilization_pct >= BUSY_UTILIZATION_PCT and not sample.pids:
            return (f"GPU {self.index} was {sample.utilization_pct}% busy with no process of "
                    "this worker on it (a process NVML does not list, e.g. another container)")
        return None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"gpu{self.index}-guard",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.look()
            except Exception as exc:  # NVML hiccup: say so once, keep the cell going
                log.warning("GPU %s guard could not sample: %s", self.index, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def forget(self) -> None:
        with self._lock:
            self._foreign.clear()
            self._looks.clear()

    def reasons(self, since: float | None = None, until: float | None = None) -> list[str]:
        """The foreign processes seen (between `since` and `until`, when given; a sighting
        counts one sampling interval either side, since the process was there between
        looks too)."""
        low = -math.inf if since is None else since - self.interval_s
        high = math.inf if until is None else until + self.interval_s
        with self._lock:
            return [f"a foreign process used GPU {self.index} during the cell: pid {pid} "
                    f"({name})" for pid, (name, first, last) in sorted(self._foreign.items())
                    if first <= high and last >= low]

    def account(self, since: float | None = None, until: float | None = None
                ) -> dict[str, Any]:
        """What the guard saw while one cell measured, as its result's evidence keeps it:
        the GPU, how many looks, and the foreign processes ([] when the cell was alone)."""
        low = -math.inf if since is None else since
        high = math.inf if until is None else until
        with self._lock:
            looks = sum(1 for t in self._looks if low <= t <= high)
        return {"gpu_index": self.index, "samples": looks,
                "interval_s": self.interval_s, "foreign": self.reasons(since, until)}


def result_window(result: Any) -> tuple[float | None, float | None]:
    """When a result's processes ran (its started_at and finished_at, ISO 8601), in epoch
    seconds; None where it does not say."""
    from datetime import datetime

    def epoch(text: Any) -> float | None:
        try:
            return datetime.fromisoformat(str(text)).timestamp() if text else None
        except ValueError:
            return None

    return epoch(getattr(result, "started_at", None)), epoch(getattr(result, "finished_at", None))


def throttle_reason(fingerprint: dict[str, Any]) -> str | None:
    """The result's own NVML readings (before and after timing) said the GPU throttled."""
    if not fingerprint.get("throttled"):
        return None
    reasons: list[str] = []
    for key in ("nvml_start", "nvml_end"):
        reading = fingerprint.get(key) or {}
        reasons += [r for r in reading.get("throttle_reasons", []) if r not in reasons]
    return f"the GPU throttled during timing ({', '.join(reasons) or 'clock events'})"


def nvml_reader(index: int) -> Callable[[], Sample]:
    """Samples of one physical GPU from NVML (compute and graphics processes)."""
    import pynvml  # provided by nvidia-ml-py

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def read() -> Sample:
        pids: set[int] = set()
        for getter in ("nvmlDeviceGetComputeRunningProcesses",
                       "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                pids.update(int(p.pid) for p in getattr(pynvml, getter)(handle))
            except Exception:
                continue
        util = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        return Sample(tuple(sorted(pids)), util)

    return read


def pinned_index(environ: dict[str, str] | None = None) -> int | None:
    """The physical GPU this worker is pinned to: `CUDA_VISIBLE_DEVICES` naming exactly one
    device by index (set by `speedwatch worker --gpus`); None when not pinned."""
    env = os.environ if environ is None else environ
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if len(visible) == 1 and visible[0].isdigit():
        return int(visible[0])
    return None


def guard_for_worker(specs: Iterable[Any]) -> DeviceGuard | None:
    """A guard when this worker is pinned to one GPU, NVML answers, and a cell is a GPU cell."""
    if not any(getattr(s, "device", "cpu") == "cuda" for s in specs):
        return None
    index = pinned_index()
    if index is None:
        index = 0 if os.environ.get("SPEEDWATCH_GPU_GUARD") == "1" else None
    if index is None:
        return None
    try:
        return DeviceGuard(index, nvml_reader(index))
    except Exception as exc:
        log.warning("no GPU guard for GPU %s (NVML: %s): cells are not checked for foreign "
                    "processes", index, exc)
        return None


def wait_until_idle(guard: DeviceGuard, timeout_s: float) -> str | None:
    """Give a foreign process that is already leaving a moment; the reason if it stays."""
    deadline = time.monotonic() + timeout_s
    reason = guard.busy_reason()
    while reason is not None and time.monotonic() < deadline:
        time.sleep(guard.interval_s)
        guard.forget()
        reason = guard.busy_reason()
    return reason


def unclean_reason(guard: DeviceGuard | None, cell_id: int, result: BenchResult) -> str | None:
    """Why a GPU result is not clean (a foreign process while it measured, a throttled
    GPU), or None; a clean result keeps what the guard saw in its evidence, so a fleet's
    stored results show each cell alone on its device."""
    if guard is not None:
        since, until = result_window(result)
        seen = guard.account(since, until)
        if seen["foreign"]:
            return str(seen["foreign"][0])
        if isinstance(result.evidence, dict):
            result.evidence["exclusivity"] = seen
        log.info("GPU %s: cell %s measured alone on its device (%d looks in %.0f s, no "
                 "foreign process)", guard.index, cell_id, seen["samples"],
                 (until or 0.0) - (since or 0.0))
    return throttle_reason(result.fingerprint)
