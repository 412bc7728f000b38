"""A GPU process moves its captured graphs into the faster kernel-launch state before it
times them, and reads that they are there (`SPEEDWATCH_LAUNCH_PIN=on`; off by default).

A GPU process times its CUDA graphs in one of two launch states (benchmarks.launch_state):
in the faster one every kernel launch is about 0.35 us shorter. The state belongs to the
graphs a process has captured: graphs that exist when another process makes a CUDA context
on the same GPU (one H200), or when a process of another GPU ends (two H200s of one host),
move into the faster state and stay there; graphs captured afterwards do not. Measured on
an H200 (results/nvidia-h200-2026-11-29-launch-calibration/):

- `python -m experiments.launch_calibration_probe`: eager ResNet50 captured, then a context
  made and ended on the GPU: 1.0116-1.0226 ms a call at batch 1 before, 0.8962-0.9026 ms
  after, five fresh processes of five, whether the context came from torch or from this
  module's driver-API helper; a second context moved nothing (0.0003 ms or less).
- `speedwatch bench` with the helper run before the capture: the tiny graph below moved
  (1.0433 to 0.8653 us a kernel, three processes of three), the cell's graphs, captured
  after it, did not (eager 1.0079 ms, as without the pin: 1.0080-1.0085).

So the pin comes after the capture, once the children preparing beside the process have
been stopped (benchmarks.prepared), just before the timing: a helper process makes a CUDA
context on the same GPU (through the driver, without torch: under a second) and ends; the
graphs already captured, the cell's and a tiny one, move. A graph of many one-element
kernels, a replay of which is almost all launch, is read before and after (`before_us`,
`after_us`, a kernel): a process whose graphs moved shows the drop; one whose graphs were
in the faster state already shows none. A pinned process's graphs stay in the faster state
whatever the host's other processes do afterwards, so the GPU guard (benchmarks.adaptive)
does not measure it again for a newer context. A process whose helper failed times as
before and says why (`error`).

Off by default until a GPU run has shown the cell's graphs move with the pin after the
capture (the placement the measurements above point to; not measured yet). A child never
imports pydantic (benchmarks.runner), so this reads its variable itself.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

PIN_ENV = "SPEEDWATCH_LAUNCH_PIN"
TINY_KERNELS = 500
READ_SECONDS = 0.25
HELPER_TIMEOUT_S = 30.0
# a reading this much lower after the helper: the process moved (the states are ~17% apart)
MOVED_FRACTION = 0.05

# Makes a CUDA context on device argv[1] of the devices this process sees, as torch would
# (the primary context, a first allocation), then ends. Driver API only: no torch import.
HELPER = r"""
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print(f"no CUDA driver library: {exc}", flush=True)
    sys.exit(2)
def check(rc, what):
    if rc != 0:
        print(f"{what} failed: CUDA error {rc}", flush=True)
        sys.exit(2)
check(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptr = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 20), "cuMemAlloc")
check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print("made", flush=True)
"""


ON = ("on", "1", "true", "yes")
OFF = ("", "off", "0", "false", "no")


def enabled() -> bool:
    """Whether GPU processes pin their graphs' launch state (`SPEEDWATCH_LAUNCH_PIN`, off
    by default)."""
    return os.environ.get(PIN_ENV, "").strip().lower() in ON


def checked() -> bool:
    """The setting, refused with the variable's name where it is not one of its values (a
    worker checks at start-up, benchmarks.process_settings)."""
    value = os.environ.get(PIN_ENV, "").strip().lower()
    if value not in ON + OFF:
        raise ValueError(f"{PIN_ENV}={value!r}: expected on or off")
    return enabled()


def make_newer_context(device_index: int, timeout_s: float = HELPER_TIMEOUT_S) -> str | None:
    """Run the helper: None where it made its context and ended, else why not (one line)."""
    try:
        done = subprocess.run([sys.executable, "-c", HELPER, str(device_index)],
                              capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the context helper did not run: {type(exc).__name__}: {exc}"
    if done.returncode == 0 and "made" in done.stdout:
        return None
    said = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()[-1]
    return f"the context helper failed (exit {done.returncode}): {said}"


def tiny_graph(kernels: int = TINY_KERNELS) -> Callable[[], Any]:
    """A CUDA graph of `kernels` one-element adds: a replay is almost all launch."""
    import torch

    from benchmarks.timing import capture_cuda_graph

    x = torch.zeros(1, device="cuda")

    def call() -> Any:
        for _ in range(kernels):
            x.add_(1.0)
        return x
    return capture_cuda_graph(call, warmup=1)


def reading(replay: Callable[[], Any], kernels: int = TINY_KERNELS,
            seconds: float = READ_SECONDS) -> float:
    """Median microseconds a kernel of the tiny graph over `seconds` of rounds of replays."""
    from benchmarks.timing import _CudaRoundTimer

    timer = _CudaRoundTimer(20)
    timer(replay, 20)  # warm-up, not kept
    samples: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds or not samples:
        samples.extend(timer(replay, 20))
    return statistics.median(samples) * 1000 / kernels


def held(record: object) -> bool:
    """Whether a process's `launch_pin` record says its graphs were pinned (read, helper run,
    no error): they stay in the faster state whatever happens on the GPU afterwards."""
    return isinstance(record, dict) and "after_us" in record and not record.get("error")


def pin(device_index: int) -> dict[str, Any]:
    """Move this process's captured graphs into the faster launch state; the record
    (gpu_process_schema.LaunchPin). Only graphs captured before it move: call it after the
    capture, just before the timing."""
    start = time.monotonic()
    replay = tiny_graph()
    before = reading(replay)
    error = make_newer_context(device_index)
    after = reading(replay)
    record: dict[str, Any] = {
        "before_us": round(before, 4), "after_us": round(after, 4),
        "moved": error is None and after < before * (1 - MOVED_FRACTION),
        "seconds": round(time.monotonic() - start, 3)}
    if error is not None:
        record["error"] = error
    return record
