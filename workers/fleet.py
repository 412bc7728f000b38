"""One exclusive worker per GPU: which processes `speedwatch worker --gpus` starts, and
keeping them running.

Each GPU gets its own Celery worker process, pinned before anything touches CUDA
(`CUDA_VISIBLE_DEVICES` names its one physical index, `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes
CUDA count as NVML does), with concurrency 1, a node name that names the GPU, and the
queues of its GPU class: the class's own queue when `gpu_queues` routes it (e.g.
`{"nvidia-h100": "gpu-h100"}`) and the generic "any GPU" queue (`gpu_queues["cuda"]`). The
routing stays configuration: a new GPU class needs a settings change, not a release.

Each worker also gets its own share of the host's cores (`cpu_shares`), applied by the
worker itself before it starts (`SPEEDWATCH_WORKER_CORES`, `apply_worker_cores`): a cell's
compile runs on the host's CPUs, and two workers whose compiles each used every core slowed
each other's cells; a share also keeps one worker's compile off the core another worker's
timed thread is pinned to. Shares follow NVML's CPU affinity of each GPU where it says
(cores near the GPU), keep a core's hyperthread siblings together, and are even otherwise.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RESTART_LIMIT = 5  # restarts of one GPU's worker within RESTART_WINDOW_S before giving up
RESTART_WINDOW_S = 600.0
CORES_ENV = "SPEEDWATCH_WORKER_CORES"  # the cores a worker process keeps to (cpu_shares)


class FleetError(ValueError):
    """A `--gpus` selection that cannot be served; the message says why, in flags."""


@dataclass(frozen=True)
class GpuWorkerPlan:
    index: int
    name: str
    device_class: str
    queues: tuple[str, ...]
    hostname: str
    cores: tuple[int, ...] = ()  # () : every core the host allows

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {**base, "CUDA_VISIBLE_DEVICES": str(self.index),
               "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if self.cores:
            env[CORES_ENV] = format_cores(self.cores)
            # inductor sizes its compile pool by the cores it may use; older torch releases
            # count the host's instead
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(min(32, len(self.cores))))
        return env


def parse_selection(selection: str, available: Sequence[int]) -> list[int]:
    """`all` or `0,2`: the physical indices to serve."""
    text = selection.strip().lower()
    if text == "all":
        if not available:
            raise FleetError("--gpus all: NVML sees no GPU on this host")
        return list(available)
    try:
        wanted = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise FleetError(f"--gpus: {selection!r} is not 'all' or indices such as 0,1") from None
    missing = [i for i in wanted if i not in available]
    if missing or not wanted:
        raise FleetError(f"--gpus: no GPU {', '.join(map(str, missing)) or '(none given)'} "
                         f"here (NVML sees {', '.join(map(str, available)) or 'none'})")
    return list(dict.fromkeys(wanted))


def format_cores(cores: Sequence[int]) -> str:
    """0,1,2,3,8 -> "0-3,8" (the form taskset and /sys use)."""
    runs: list[str] = []
    ordered = sorted(set(cores))
    for _, group in itertools.groupby(enumerate(ordered), lambda pair: pair[1] - pair[0]):
        block = [c for _, c in group]
        runs.append(f"{block[0]}-{block[-1]}" if len(block) > 1 else str(block[0]))
    return ",".join(runs)


def parse_cores(text: str) -> list[int]:
    """"0-3,8" -> [0, 1, 2, 3, 8]; ValueError naming the part that is not a core list."""
    cores: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"{part!r} is not a core or a range of cores such as 0-15")
        cores += range(int(low), int(high or low) + 1)
    return sorted(set(cores))


def sibling_order(cores: Sequence[int], sys_cpu: Path = Path("/sys/devices/system/cpu")
                  ) -> list[int]:
    """The cores with each one's hyperthread siblings next to it (where the kernel numbers
    them far apart, as 0 and 32), so a contiguous share holds whole physical cores."""
    def first_sibling(core: int) -> int:
        try:
            text = (sys_cpu / f"cpu{core}" / "topology" / "thread_siblings_list").read_text()
            return min(parse_cores(text.strip()))
        except (OSError, ValueError):
            return core

    return sorted(cores, key=lambda c: (first_sibling(c), c))


def cpu_shares(indices: Sequence[int], allowed: Sequence[int],
               affinity: Mapping[int, Sequence[int]] | None = None,
               order: Callable[[Sequence[int]], list[int]] = sibling_order
               ) -> dict[int, tuple[int, ...]]:
    """Each GPU's cores: the allowed cores near it (NVML's `affinity`, where it names some)
    split evenly among the selected GPUs that share them; every allowed core split evenly
    when the affinities overlap or leave a GPU without a core. {} when there are fewer
    cores than GPUs (nothing sensible to split)."""
    allowed_set = set(allowed)
    if len(allowed_set) < len(indices) or not indices:
        return {}
    groups: dict[tuple[int, ...], list[int]] = {}
    for index in indices:
        near = allowed_set & set((affinity or {}).get(index, ()))
        groups.setdefault(tuple(sorted(near or allowed_set)), []).append(index)
    pairwise_apart = all(not set(a) & set(b) for a, b in itertools.combinations(groups, 2))
    if not pairwise_apart or any(len(c) < len(g) for c, g in groups.items()):
        groups = {tuple(sorted(allowed_set)): list(indices)}
    shares: dict[int, tuple[int, ...]] = {}
    for cores, gpus in groups.items():
        ordered = order(cores)
        size, extra = divmod(len(ordered), len(gpus))
        start = 0
        for k, gpu in enumerate(sorted(gpus)):
            end = start + size + (1 if k < extra else 0)
            shares[gpu] = tuple(sorted(ordered[start:end]))
            start = end
    return shares


def apply_worker_cores(environ: Mapping[str, str] | None = None) -> list[int]:
    """Keep this worker process (and everything it starts) to its share of cores, as
    `speedwatch worker --gpus` planned it; [] when it has none. Called before the worker
    starts any thread: Linux applies the mask to the calling thread, threads and processes
    started later inherit it."""
    env = os.environ if environ is None else environ
    text = env.get(CORES_ENV, "").strip()
    if not text:
        return []
    cores = parse_cores(text)
    usable = [c for c in cores if c in os.sched_getaffinity(0)]
    if not usable:
        raise FleetError(f"{CORES_ENV}={text}: none of these cores is allowed here")
    os.sched_setaffinity(0, usable)
    return usable


def plan(gpus: Sequence[Mapping[str, Any]], selection: str, gpu_queues: Mapping[str, str],
         host: str, allowed: Sequence[int] | None = None,
         affinity: Mapping[int, Sequence[int]] | None = None) -> list[GpuWorkerPlan]:
    """One worker per selected GPU, from NVML's view of the host (`visible_gpus()`), each
    with its share of the `allowed` cores (`cpu_shares`; none when `allowed` is None)."""
    by_index = {int(g["index"]): g for g in gpus}
    selected = parse_selection(selection, sorted(by_index))
    shares = cpu_shares(selected, allowed, affinity) if allowed is not None else {}
    plans = []
    for index in selected:
        gpu = by_index[index]
        device_class = str(gpu["device_class"])
        queues = [q for q in (gpu_queues.get(device_class), gpu_queues.get("cuda")) if q]
        if not queues:
            raise FleetError(
                f"GPU {index} ({gpu['name']}): no queue serves class {device_class!r} or "
                "'cuda'; add one to SPEEDWATCH_GPU_QUEUES")
        plans.append(GpuWorkerPlan(index, str(gpu["name"]), device_class,
                                   tuple(dict.fromkeys(queues)),
                                   f"speedwatch-gpu{index}-{device_class}@{host}",
                                   shares.get(index, ())))
    return plans


def supervise(plans: Sequence[GpuWorkerPlan], argv_for: Callable[[GpuWorkerPlan], list[str]],
              base_env: Mapping[str, str], poll_s: float = 1.0) -> int:
    """Run one process per plan until SIGTERM/SIGINT, restarting a worker that died (at most
    RESTART_LIMIT times in RESTART_WINDOW_S each); stops them all on the way out."""
    procs: dict[int, subprocess.Popen[bytes]] = {}
    restarts: dict[int, list[float]] = {p.index: [] for p in plans}
    stopping = False

    def start(p: GpuWorkerPlan) -> None:
        procs[p.index] = subprocess.Popen(argv_for(p), env=p.env(base_env))
        log.info("GPU %s (%s): worker %s started, pid %s, queues %s, cores %s", p.index,
                 p.name, p.hostname, procs[p.index].pid, ",".join(p.queues),
                 format_cores(p.cores) if p.cores else "all")

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for p in plans:
            start(p)
        while not stopping:
            time.sleep(poll_s)
            for p in plans:
                code = procs[p.index].poll()
                if code is None or stopping:
                    continue
                now = time.monotonic()
                recent = [t for t in restarts[p.index] if now - t < RESTART_WINDOW_S]
                if len(recent) >= RESTART_LIMIT:
                    log.error("GPU %s: worker exited %s times in %.0f s; not restarting",
                              p.index, len(recent), RESTART_WINDOW_S)
                    stopping = True
                    break
                log.warning("GPU %s: worker exited with %s; restarting", p.index, code)
                restarts[p.index] = [*recent, now]
                start(p)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if all(p.returncode in (0, -signal.SIGTERM) for p in procs.values()) else 1


def worker_argv(plan: GpuWorkerPlan, loglevel: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "cli", "worker", "--queues", ",".join(plan.queues),
            "--concurrency", "1", "--loglevel", loglevel, "--hostname", plan.hostname]


def base_environment() -> dict[str, str]:
    return dict(os.environ)
