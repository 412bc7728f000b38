"""One exclusive worker per GPU: which processes `speedwatch worker --gpus` starts, and
keeping them running.

Each GPU gets its own Celery worker process, pinned before anything touches CUDA
(`CUDA_VISIBLE_DEVICES` names its one physical index, `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes
CUDA count as NVML does), with concurrency 1, a node name that names the GPU, and the
queues of its GPU class: the class's own queue when `gpu_queues` routes it (e.g.
`{"nvidia-h100": "gpu-h100"}`) and the generic "any GPU" queue (`gpu_queues["cuda"]`). The
routing stays configuration: a new GPU class needs a settings change, not a release.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

RESTART_LIMIT = 5  # restarts of one GPU's worker within RESTART_WINDOW_S before giving up
RESTART_WINDOW_S = 600.0


class FleetError(ValueError):
    """A `--gpus` selection that cannot be served; the message says why, in flags."""


@dataclass(frozen=True)
class GpuWorkerPlan:
    index: int
    name: str
    device_class: str
    queues: tuple[str, ...]
    hostname: str

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        return {**base, "CUDA_VISIBLE_DEVICES": str(self.index),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


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


def plan(gpus: Sequence[Mapping[str, Any]], selection: str, gpu_queues: Mapping[str, str],
         host: str) -> list[GpuWorkerPlan]:
    """One worker per selected GPU, from NVML's view of the host (`visible_gpus()`)."""
    by_index = {int(g["index"]): g for g in gpus}
    plans = []
    for index in parse_selection(selection, sorted(by_index)):
        gpu = by_index[index]
        device_class = str(gpu["device_class"])
        queues = [q for q in (gpu_queues.get(device_class), gpu_queues.get("cuda")) if q]
        if not queues:
            raise FleetError(
                f"GPU {index} ({gpu['name']}): no queue serves class {device_class!r} or "
                "'cuda'; add one to SPEEDWATCH_GPU_QUEUES")
        plans.append(GpuWorkerPlan(index, str(gpu["name"]), device_class,
                                   tuple(dict.fromkeys(queues)),
                                   f"speedwatch-gpu{index}-{device_class}@{host}"))
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
        log.info("GPU %s (%s): worker %s started, pid %s, queues %s", p.index, p.name,
                 p.hostname, procs[p.index].pid, ",".join(p.queues))

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
