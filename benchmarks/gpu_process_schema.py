"""What a GPU process records about its GPU beside its timing, as the result document holds
it: the other processes with a CUDA context there (the GPU guard), and its launch pin."""

from __future__ import annotations

from pydantic import StrictBool

from benchmarks.document_values import Count, NonNegative, Open, Positive, Text


class GpuProcesses(Open):
    """The processes holding a CUDA context on a GPU process's device (NVML): `present` once
    it had its own (itself included), `newer` those that made one after it, before its
    timing ended. A newer context shortens every kernel launch of the older process's CUDA
    graphs (benchmarks.fingerprint.newer_gpu_processes)."""

    present: Count | None = None
    newer: Count | None = None


class LaunchPin(Open):
    """A GPU process's captured graphs moved into the faster kernel-launch state just before
    its timing (benchmarks.launch_pin): a tiny graph's time a kernel before and after a
    helper made a CUDA context on the GPU; `moved` where it dropped (the graphs were in the
    slower state), `error` where the helper failed (they timed in whichever state they were
    in)."""

    before_us: Positive | None = None
    after_us: Positive | None = None
    moved: StrictBool | None = None
    seconds: NonNegative | None = None
    error: Text | None = None
