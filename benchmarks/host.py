"""The CPU host a measurement shares: which core a benchmark runs on, and how busy the rest was.

A GPU cell is guarded by NVML (workers.exclusivity); this is the CPU's twin. On a CPU a
co-tenant moves wall-clock timings directly: on a shared 2-core virtual machine, with two
busy processes beside it, one-thread eager-vs-ONNX-Runtime speedups timed by wall clock
moved -11% to +16% between runs. Three things hold a measurement still:

- Pinning. A benchmark thread that migrates between cores takes its caches' contents with
  it only partly and lands beside whoever ran there. The timed thread is pinned to one
  core (`pin_cores`), the last the process may use: housekeeping and interrupts favour the
  first ones. Only where the host has a core to spare; a one-core host pins nothing.
- The thread's CPU time (benchmarks.timing) for one-thread cells: a co-tenant that takes
  the core stretches wall time but not the CPU time the thread spent computing.
- The load guard (`LoadMonitor`): a co-tenant sharing caches, memory bandwidth or a
  hyper-threaded sibling still slows each instruction (busy loops on the other core biased
  CPU-time speedups by +5-12% here), and no clock can tell that from a slower build. So
  the CPU time other processes used during timing is read from /proc and recorded with the
  result (`host_load`); the adaptive measurement re-measures a unit measured past the
  threshold and marks the result when the load stays (benchmarks.isolation). A GPU cell
  counts only the cores its worker may use (`load_cores`): on a fleet host the other
  GPUs' workers keep their own shares busy by design.

Reads /proc only; everything degrades to "unknown" (None) off Linux.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Set by the parent (benchmarks.isolation) for each child: the cores its timed thread is
# pinned to, comma-separated; absent or empty: not pinned.
PIN_ENV = "SPEEDWATCH_PIN_CORES"
# A person's override of which cores benchmarks use (comma-separated), e.g. one per worker
# on a host that runs several CPU workers.
CORES_ENV = "SPEEDWATCH_BENCH_CORES"
SAMPLE_INTERVAL_S = 0.25
_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def allowed_cores() -> list[int]:
    """The cores this process may run on, ascending ([] where the OS cannot say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


def pin_cores(device: str, threads: int | None, environ: dict[str, str] | None = None
              ) -> list[int]:
    """The cores a benchmark child's timed thread is pinned to ([]: not pinned).

    CPU cells with a thread count k get the last k cores where more than k are allowed
    (the library's default thread count, None, uses every core: nothing to pin). GPU
    cells get one core for the thread that launches the work, counted from the last by
    the GPU's index, so workers pinned to GPUs 0 and 1 of one host launch from different
    cores. `SPEEDWATCH_BENCH_CORES` names the cores instead (a host running several CPU
    workers gives each its own).
    """
    env = os.environ if environ is None else environ
    named = [int(c) for c in env.get(CORES_ENV, "").replace(" ", "").split(",") if c.isdigit()]
    cores = named or allowed_cores()
    if device == "cuda":
        if len(cores) <= 1 and not named:
            return []
        first = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        index = int(first) if first.isdigit() else 0
        return [cores[-1 - index % len(cores)]]
    if threads is None or threads < 1 or (len(cores) <= threads and not named):
        return []
    return cores[-threads:]


def apply_pin(environ: dict[str, str] | None = None) -> list[int]:
    """Pin the calling thread to the cores the parent chose (PIN_ENV); the cores pinned.

    Linux applies sched_setaffinity(0) to the calling thread alone, and threads it starts
    later inherit it: called by the thread that times, before it starts any pool."""
    env = os.environ if environ is None else environ
    cores = [int(c) for c in env.get(PIN_ENV, "").split(",") if c.strip().isdigit()]
    if not cores:
        return []
    try:
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError, ValueError):
        return []
    return cores


def keep_off(pid: int, cores: Collection[int]) -> None:
    """Keep a process (and the threads and workers it starts) off `cores`: a child that
    prepares while another times must not share the timing thread's core. A child pins its
    own timed thread later (`apply_pin`), which it may, whatever this left it."""
    if not cores:
        return
    rest = [c for c in allowed_cores() if c not in set(cores)]
    if not rest:
        return
    with contextlib.suppress(AttributeError, OSError, ValueError):
        os.sched_setaffinity(pid, rest)


def busy_seconds(cores: Collection[int] | None = None, proc: Path = _PROC) -> float | None:
    """CPU seconds spent busy since boot (user, nice, system, irq, softirq, steal:
    everything but idle and iowait) by the given cores (their `cpuN` lines of /proc/stat),
    or by the whole host (its first line) where `cores` is None."""
    try:
        with open(proc / "stat", encoding="ascii") as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except OSError:
        return None
    wanted = {"cpu"} if cores is None else {f"cpu{c}" for c in cores}
    picked = [line for line in lines if line and line[0] in wanted]
    if len(picked) != len(wanted):
        return None
    busy = 0.0
    for line in picked:
        values = [int(v) for v in line[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        # guest time is already counted in user and nice (the kernel's own accounting)
        total = sum(values[:8]) if len(values) >= 8 else sum(values)
        busy += (total - idle) / _TICKS
    return busy


def load_cores(device: str) -> list[int] | None:
    """The cores whose load counts against a cell's measurement (None: the whole host).

    A GPU cell: the cores this worker may use. A fleet gives each GPU's worker a share of
    the host's cores (workers.fleet); the next worker's compiles on its own share left
    every cell of a two-H100 run marked "host busy" (1.1-2.9 of 32 cores), yet each cell
    measured on GPU 0 beside them agreed with GPU 0 measured alone within 0.00-0.11%.
    A CPU cell: the whole host, since a co-tenant on another core still shares the
    caches and memory bandwidth that CPU timings depend on (see the module docstring)."""
    if device != "cuda":
        return None
    return allowed_cores() or None


def process_cpu_seconds(pid: int, proc: Path = _PROC) -> float | None:
    """utime + stime of one process (all its threads), None once it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Sample:
    """One look at the host: when, all cores' busy seconds, the measured processes' own."""

    at: float  # time.monotonic(): one clock for every process of the host
    busy: float
    mine: float


@dataclass
class LoadMonitor:
    """Samples the host while benchmark children run; `load(t0, t1)` says how busy the
    other processes kept it between two instants (the children's timing window).

    `pids()` names the processes being measured (their CPU time is not a co-tenant's);
    everything else is other load, this worker's own process included: a dashboard it
    serves meanwhile disturbs the measurement like anyone's."""

    pids: Callable[[], Iterable[int]]
    # the cores whose busy time counts (`load_cores`); None: the whole host
    cores: Collection[int] | None = None
    interval_s: float = SAMPLE_INTERVAL_S
    read_busy: Callable[[], float | None] | None = None  # None: busy_seconds(cores)
    read_process: Callable[[int], float | None] = process_cpu_seconds
    clock: Callable[[], float] = time.monotonic
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last: dict[int, float] = field(default_factory=dict)

    def sample(self) -> None:
        busy = self.read_busy() if self.read_busy is not None else busy_seconds(self.cores)
        if busy is None:
            return
        mine = 0.0
        for pid in self.pids():
            seconds = self.read_process(pid)
            if seconds is None:  # exited: its last reading still counts as ours
                seconds = self._last.get(pid, 0.0)
            self._last[pid] = seconds
            mine += seconds
        self.samples.append(Sample(self.clock(), busy, mine))

    def __enter__(self) -> LoadMonitor:
        self.sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="host-load", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()

    def load(self, t0: float | None = None, t1: float | None = None) -> HostLoad | None:
        """Other processes' busy cores, averaged over the samples inside [t0, t1] (the
        whole monitored stretch where a bound is None or the window holds too few)."""
        inside = [s for s in self.samples
                  if (t0 is None or s.at >= t0 - self.interval_s)
                  and (t1 is None or s.at <= t1 + self.interval_s)]
        if len(inside) < 2 or inside[-1].at - inside[0].at < 2 * self.interval_s:
            inside = self.samples
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        seconds = last.at - first.at
        if seconds <= 0:
            return None
        others = max(0.0, (last.busy - first.busy) - (last.mine - first.mine)) / seconds
        steps = [max(0.0, (b.busy - a.busy) - (b.mine - a.mine)) / (b.at - a.at)
                 for a, b in itertools.pairwise(inside) if b.at > a.at]
        return HostLoad(other_cores=others, peak_cores=max(steps, default=others),
                        seconds=seconds,
                        cores=len(self.cores) if self.cores else os.cpu_count() or 0)


@dataclass(frozen=True)
class HostLoad:
    """How busy other processes kept the host while a unit was timed, in cores (CPU
    seconds per second: 1.0 = one core fully taken)."""

    other_cores: float
    peak_cores: float
    seconds: float
    cores: int

    def to_dict(self) -> dict[str, Any]:
        return {"other_cores": round(self.other_cores, 3), "peak_cores": round(self.peak_cores, 3),
                "seconds": round(self.seconds, 2), "cores": self.cores}


def wait_for_quiet(threshold: float, timeout_s: float, *, interval_s: float = 0.5,
                   read_busy: Callable[[], float | None] = busy_seconds,
                   sleep: Callable[[float], None] = time.sleep) -> float | None:
    """Wait up to `timeout_s` for the host's busy cores (everyone's: nothing of ours runs
    between units) to fall to `threshold`; the last reading, None if it cannot be read."""
    deadline = time.monotonic() + timeout_s
    reading: float | None = None
    previous = read_busy()
    while previous is not None:
        start = time.monotonic()
        sleep(interval_s)
        now = read_busy()
        if now is None:
            return reading
        reading = max(0.0, now - previous) / max(1e-6, time.monotonic() - start)
        previous = now
        if reading <= threshold or time.monotonic() >= deadline:
            return reading
    return reading
