"""No GPU process of the host ends while another captures its CUDA graphs and times them.

On two H200s of one host with one worker per GPU, a process that had captured its CUDA
graphs moved into the faster kernel-launch state (benchmarks.launch_state: every kernel
about 0.35 us shorter, for the rest of its life) whenever a process on the other GPU ended
from then until its timing was over: 23 of 23 processes with such an end in that window
moved (11 before their timing, 12 during it), 0 of 63 without one, 14 of those with a
context made on the other GPU in it; on the run before, 11 of 12 and 2 of 53
(results/nvidia-h200x2-2026-11-29-fleet-16cells/, `python -m experiments.launch_states DB
--run 2 --against 1 --flips`). With the gate, the same fleet on another two-H200 host moved
none of 48 two-worker processes, 13 of them with another GPU's process reaching its end in
that window, and two workers ran it 1.98x as fast as one
(results/nvidia-h200x2-2026-11-29-fleet-gated/).

So a GPU process takes a host-wide lock, shared, from just before its capture to the end
of its timing (`timing`), and a GPU process that has finished takes it exclusively before it
ends and keeps it until it is gone (`hold_until_exit`): it ends between other processes'
timings, never inside one. Timings on different GPUs still overlap (the lock is shared
among them). A waiting process waits at most TIMING_WAIT_S or EXIT_WAIT_S, then goes on: a
process of another user that holds the lock cannot stall a run. The lock file is
`SPEEDWATCH_GPU_TIMING_LOCK` (default /tmp/speedwatch-gpu-timing.lock; "off": no gate).
A child never imports pydantic (benchmarks.runner), so this reads its variable itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

LOCK_ENV = "SPEEDWATCH_GPU_TIMING_LOCK"
DEFAULT_LOCK = "/tmp/speedwatch-gpu-timing.lock"
TIMING_WAIT_S = 60.0  # a capture waits at most this long for a process that is ending
EXIT_WAIT_S = 60.0  # a finished process waits at most this long for others' timings
_POLL_S = 0.01
_HELD: list[int] = []  # the exclusive lock's descriptor, kept open until the process ends


def lock_path() -> str | None:
    """The host's lock file, or None where the gate is off."""
    value = os.environ.get(LOCK_ENV, "").strip()
    if value.lower() == "off":
        return None
    return value or DEFAULT_LOCK


def checked_path() -> str | None:
    """The lock file, opened once to see that it can be: a ValueError naming the variable
    where it cannot (a worker checks at start-up, benchmarks.process_settings; a measuring
    process would only go on without the gate)."""
    path = lock_path()
    if path is None:
        return None
    fd = _open(path)
    if fd is None:
        raise ValueError(f"{LOCK_ENV}={path!r}: the lock file cannot be opened or made "
                         "(a file this user can read, or off)")
    os.close(fd)
    return path


def _open(path: str) -> int | None:
    """The lock file, read-only (flock needs no more); made where it is missing, readable
    by every user. An existing file is opened without O_CREAT: in a sticky directory such as
    /tmp, the kernel may refuse O_CREAT on another user's file (fs.protected_regular)."""
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.chmod(path, 0o644)
    return fd


def _acquire(fd: int, kind: int, limit_s: float) -> float | None:
    """Seconds waited for the lock, or None where it was not had within `limit_s`."""
    start = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return time.monotonic() - start
        except BlockingIOError:
            if time.monotonic() - start >= limit_s:
                return None
            time.sleep(_POLL_S)
        except OSError:
            return None


@contextlib.contextmanager
def timing(limit_s: float = TIMING_WAIT_S) -> Iterator[float | None]:
    """Hold the shared lock while the block runs (the capture and the timing); yields the
    seconds waited for it, None where the gate is off or it was not had in time (the block
    runs anyway)."""
    path = lock_path()
    fd = _open(path) if path else None
    if fd is None:
        yield None
        return
    try:
        yield _acquire(fd, fcntl.LOCK_SH, limit_s)
    finally:
        os.close(fd)  # releases the lock


def hold_until_exit(limit_s: float = EXIT_WAIT_S) -> float | None:
    """Take the lock exclusively and keep it until this process is gone; the seconds
    waited, None where the gate is off or it was not had in time. The lock is kept on a
    descriptor numbered above the process's others: a dying process's descriptors are
    closed in the order of their numbers, so the GPU driver's, whose release ends the CUDA
    context, go first."""
    path = lock_path()
    fd = _open(path) if path else None
    if fd is None:
        return None
    waited = _acquire(fd, fcntl.LOCK_EX, limit_s)
    _HELD.append(_high(fd))
    return waited


def _high(fd: int) -> int:
    """`fd` moved to a number above the process's other descriptors (where it can be)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    ceiling = 65536 if soft == resource.RLIM_INFINITY else min(int(soft), 65536)
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, max(3, ceiling - 8))
    except OSError:
        return fd
    os.close(fd)  # the lock stays: it belongs to the open file, which `high` still holds
    return high
