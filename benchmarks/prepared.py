"""GPU children prepared ahead: a cell's next processes build or load while one times.

Most of a GPU process's life is preparation (interpreter, imports, weights, loading or
building the candidate, its first call and accuracy check); its timing is a few seconds.
Run one after another, a GPU run is mostly a GPU waiting for the next process to prepare.
Here the children a run will need next start early and prepare side by side; each stops
at its gate, before it captures its CUDA graphs, and says "ready"; the parent tells one
child at a time "go", in the run's own turn order, and it captures, times and ends alone.
So timing stays one process at a time on the GPU, while preparation overlaps it.

Preparing beside a timing child is not nothing: it uses CPU cores and a little of the GPU
(reference inferences, a first call, constant folding). Where a build itself times
candidates on the device (builds as shipped, the max-autotune modes, TensorRT), that
timing would both disturb and be disturbed, so those cells never prepare ahead
(`quiet_build`). `SPEEDWATCH_PREPARE_AHEAD` sets how many children may be alive at once,
the timing one included (default 8; 0 or 1: one at a time, as on a CPU, where a second
process on the host moves the timing itself).

The gate's protocol is two words over two pipes (`GATE_ENV` names the child's ends): the
child says "ready" and waits; the parent says "go" (or closes the pipe: the child exits).
"""

from __future__ import annotations

import contextlib
import os
import select
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GATE_ENV = "SPEEDWATCH_GATE_FDS"
AHEAD_ENV = "SPEEDWATCH_PREPARE_AHEAD"
DEFAULT_AHEAD = 8
MAX_AHEAD = 64


def ahead_setting(environ: dict[str, str] | None = None) -> int:
    """Children a GPU run may keep alive at once (`AHEAD_ENV`); a bad value is an error
    naming the variable, not a silent default."""
    raw = (os.environ if environ is None else environ).get(AHEAD_ENV, "").strip()
    if not raw:
        return DEFAULT_AHEAD
    if not raw.isdigit() or int(raw) > MAX_AHEAD:
        raise ValueError(f"{AHEAD_ENV}={raw!r}: expected a whole number from 0 to {MAX_AHEAD}")
    return int(raw)


def quiet_build(spec: Any) -> bool:
    """Whether a unit of `spec` may prepare beside another's timing: a GPU cell timed with
    both sides in each process, whose build does not time candidates on the device."""
    if spec.device != "cuda" or spec.sides == "split" or spec.timing.builds != "pinned":
        return False
    if spec.backend == "eager":
        return True
    if spec.backend == "inductor":
        from benchmarks.backends.inductor import AUTOTUNE_MODES, compile_mode

        return compile_mode(spec) not in AUTOTUNE_MODES
    return False


# ---- the child's end ---------------------------------------------------------------------

def wait_for_turn(environ: dict[str, str] | None = None) -> float:
    """At the gate: say "ready", wait for "go"; the seconds waited (0 without a gate). A
    parent gone or saying anything else ends the process: it was not wanted any more."""
    value = (os.environ if environ is None else environ).get(GATE_ENV, "")
    parts = value.split(",")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return 0.0
    began = time.perf_counter()
    reader = os.fdopen(int(parts[0]), "rb", buffering=0)
    writer = os.fdopen(int(parts[1]), "wb", buffering=0)
    try:
        writer.write(b"ready\n")
    except BrokenPipeError:
        os._exit(3)
    word = reader.readline().decode("ascii", errors="replace").strip()
    if word != "go":
        os._exit(3)
    return time.perf_counter() - began


# ---- the parent's end --------------------------------------------------------------------

@dataclass
class Prepared:
    """One child started ahead, preparing or waiting at its gate."""

    key: tuple[Any, ...]
    child: Any  # benchmarks.isolation._Child
    workdir: tempfile.TemporaryDirectory[str]
    to_child: int
    from_child: int
    launched: float = field(default_factory=time.monotonic)
    ready: bool = False
    _buffer: bytes = b""

    def poll_ready(self, timeout_s: float) -> bool:
        """Whether it said "ready" within `timeout_s` (False: it ended or is still busy)."""
        if self.ready:
            return True
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.from_child], [], [], max(0.0, left))
            if not readable:
                return False
            chunk = os.read(self.from_child, 64)
            if not chunk:  # it ended before its gate (a skip, a crash): finish() says how
                return False
            self._buffer += chunk
            if b"ready\n" in self._buffer:
                self.ready = True
                return True

    def go(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            os.write(self.to_child, b"go\n")

    def close(self) -> None:
        for fd in (self.to_child, self.from_child):
            with contextlib.suppress(OSError):
                os.close(fd)

    def discard(self) -> None:
        """Not wanted after all (its cell decided, or the spec changed): gone, files too."""
        self.close()
        self.child.kill()
        self.workdir.cleanup()


Launch = Callable[[Path, dict[str, str], tuple[int, ...]], Any]


class Preparer:
    """The children started ahead of their turn, by key (`isolation.unit_key`)."""

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        self._waiting: dict[tuple[Any, ...], Prepared] = {}
        self.timing_pid: int | None = None

    def alive(self) -> int:
        return len(self._waiting) + (1 if self.timing_pid is not None else 0)

    def pids(self) -> list[int]:
        return [p.child.proc.pid for p in self._waiting.values()]

    def has(self, key: tuple[Any, ...]) -> bool:
        return key in self._waiting

    def start(self, key: tuple[Any, ...], launch: Launch) -> bool:
        """Start the child for `key` now, if there is room; whether it was started."""
        if key in self._waiting or self.alive() >= self.ahead:
            return False
        workdir = tempfile.TemporaryDirectory(prefix="speedwatch-bench-")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            child = launch(Path(workdir.name), {GATE_ENV: f"{to_child_r},{from_child_w}"},
                           (to_child_r, from_child_w))
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        if not hasattr(child, "proc"):  # could not start: the turn itself will say why
            os.close(to_child_w)
            os.close(from_child_r)
            workdir.cleanup()
            return False
        self._waiting[key] = Prepared(key, child, workdir, to_child_w, from_child_r)
        return True

    def take(self, key: tuple[Any, ...]) -> Prepared | None:
        return self._waiting.pop(key, None)

    def keep_only(self, keys: set[tuple[Any, ...]]) -> None:
        """Discard the children no longer wanted."""
        for key in [k for k in self._waiting if k not in keys]:
            self._waiting.pop(key).discard()

    def close(self) -> None:
        self.keep_only(set())


_ACTIVE: Preparer | None = None


def active() -> Preparer | None:
    """The preparer of the run in progress in this process, if any."""
    return _ACTIVE


@contextlib.contextmanager
def preparing(ahead: int) -> Iterator[Preparer | None]:
    """Children may be started ahead while this is open (None when `ahead` < 2); any left
    unclaimed at the end are killed."""
    global _ACTIVE
    if ahead < 2 or _ACTIVE is not None:
        yield None
        return
    preparer = Preparer(ahead)
    _ACTIVE = preparer
    try:
        yield preparer
    finally:
        _ACTIVE = None
        preparer.close()
