"""Evidence gathered after the timing, never part of it: kernels launched per inference
(the first process's) and each side's profile (benchmarks.profile). It explains a
change; it never is one."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from benchmarks.process_state import one_line

KERNEL_COUNT_INFERENCES = 5


def count_kernels(fn: Callable[[], Any], inferences: int = KERNEL_COUNT_INFERENCES) -> float:
    """GPU kernels launched per call of `fn`, from the profiler's device-side events.

    Memory copies and memsets are not kernels and are left out; a fused program shows up
    as fewer kernels per inference, which is the point of the number. The pass is the GPU
    profile's (benchmarks.profile.torch_profile_and_kernels), for a side whose profile
    comes from elsewhere or is not taken.
    """
    from benchmarks.profile import torch_profile_and_kernels

    kernels = torch_profile_and_kernels(fn, on_cuda=True, inferences=inferences)[1]
    assert kernels is not None  # counted on every GPU pass
    return kernels


def side_profiles(sides: dict[str, Callable[[], Any]], compiled: Any, x: torch.Tensor,
                  on_cuda: bool, kernels: dict[str, float] | None = None) -> dict[str, Any]:
    """evidence.profile: each side's profile; evidence.profile_error where one failed (a
    profile is a bonus: never lose the measurement over it). A side profiled through
    torch.profiler on a GPU also gives its kernels per inference, into `kernels` when
    given (benchmarks.profile.torch_profile_and_kernels): no second profiler pass."""
    from benchmarks import profile as profiling

    out: dict[str, Any] = {}
    errors: dict[str, str] = {}
    n = profiling.GPU_INFERENCES if on_cuda else profiling.CPU_INFERENCES
    for name, fn in sides.items():
        own = compiled.profile if name == "candidate" and compiled is not None else None
        try:
            out[name] = profiling.timed(partial(own, x, n) if own is not None else partial(
                _torch_profile, name, fn, on_cuda, n, kernels))
        except Exception as exc:
            errors[name] = one_line(exc)
    return {**({"profile": out} if out else {}),
            **({"profile_error": errors} if errors else {})}


def _torch_profile(name: str, fn: Callable[[], Any], on_cuda: bool, inferences: int,
                   kernels: dict[str, float] | None) -> dict[str, Any]:
    from benchmarks import profile as profiling

    document, count = profiling.torch_profile_and_kernels(fn, on_cuda=on_cuda,
                                                          inferences=inferences)
    if count is not None and kernels is not None:
        kernels[name] = count
    return document
