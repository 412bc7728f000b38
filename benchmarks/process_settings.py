"""The measurement's own environment variables, checked together.

Each is read where it takes effect: how a benchmark process starts
(`SPEEDWATCH_FORK_SERVER`, `SPEEDWATCH_FORK_PRELOAD`), how many prepare ahead
(`SPEEDWATCH_PREPARE_AHEAD`), how large the build cache may grow
(`SPEEDWATCH_BUILD_CACHE_MAX_BYTES`), whether frozen inductor builds are kept as their
programs (`SPEEDWATCH_INDUCTOR_PROGRAMS`), where bytecode is kept
(`SPEEDWATCH_PYCACHE_DIR`), the GPU processes' host-wide lock
(`SPEEDWATCH_GPU_TIMING_LOCK`), whether they pin their launch state
(`SPEEDWATCH_LAUNCH_PIN`). Read only there, a typo stopped a worker's first
cell, minutes after the worker seemed to start well. A worker asks here first and refuses
to start with the variable's name instead.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import build_cache, bytecode, forkserver, launch_gate, launch_pin, prepared
from benchmarks.backends import inductor_program

_CHECKS: tuple[Callable[[], object], ...] = (
    lambda: forkserver.setting("cuda"),
    forkserver.preload_setting,
    prepared.ahead_setting,
    build_cache.max_bytes,
    inductor_program.enabled,
    bytecode.configured_dir,
    launch_gate.checked_path,
    launch_pin.checked,
)


def problems() -> list[str]:
    """One line per variable whose value the measurement would refuse; empty when all
    are usable."""
    found: list[str] = []
    for check in _CHECKS:
        try:
            check()
        except ValueError as exc:
            found.append(str(exc))
    return found
