"""GPU children prepared ahead: a cell's next processes build or load while one times.

Most of a GPU process's life is preparation (interpreter, imports, weights, loading or
building the candidate, its first call and accuracy check); its timing is a few seconds.
Run one after another, a GPU run is mostly a GPU waiting for the next process to prepare.
Here the children a run will need next start early and prepare side by side; each stops
at its gate, before it captures its CUDA graphs, and says "ready"; the parent tells one
child at a time "go", in the run's own turn order.

Preparing beside a timing child is not harmless: measured on an H200 (the four-cell demo,
eight children alive), cells whose half-widths are 0.03-0.12% alone came out at 0.3-10.9%
with others preparing beside their timing. So the timing itself is a quiet window: before
its warm-up the child says "quiet", the parent stops every preparing child (SIGSTOP to its
process group, compile workers included), lets the GPU drain what they queued, and says
"go"; after its last round the child says "timed" and the others go on (SIGCONT).
Preparation overlaps everything else a process does (its start, capture, kernel counts,
profiles, its exit), never its timing.

Where a build itself times candidates on the device (builds as shipped, the max-autotune
modes, TensorRT), preparing beside others would disturb that timing too, so those cells
never prepare ahead (`quiet_build`), and every other child is stopped for the whole life
of theirs.

Off by default (`SPEEDWATCH_PREPARE_AHEAD`, 0): even with the others stopped while one
times, on an H200 some processes of the four-cell demo timed both sides about 12% faster
than every other process (eager 0.90 ms against 1.02 ms at batch 1), at full clocks and
with no throttling, which no process timed one at a time ever did; the batch-1 cells'
half-widths grew from 0.03-0.20% to 0.6-3.4%. The cause, measured later on an H200: a
process's CUDA-graph replays run about 0.12 ms faster a call once another process makes a
CUDA context on its GPU after its own (benchmarks.fingerprint.newer_gpu_processes), and
children preparing ahead make theirs while earlier ones wait for their turn. So a process
times as it always did, after preparing alone; the GPU guard (benchmarks.adaptive)
measures again a unit that saw a newer context. N children alive at once (N >= 2, the
timing one included) turns it on, for runs where time matters more than comparable levels.

The protocol is a word a line over two pipes (`GATE_ENV` names the child's ends): the
child says "ready" and waits for "go"; later "quiet", and waits for "go"; then "timed".
A parent gone, or one that closes the pipe, ends the child at its gate.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GATE_ENV = "SPEEDWATCH_GATE_FDS"
AHEAD_ENV = "SPEEDWATCH_PREPARE_AHEAD"
DEFAULT_AHEAD = 0
MAX_AHEAD = 64
# after stopping the preparing children: time for the GPU to finish what they had queued
SETTLE_S = 0.2


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

_PIPES: tuple[Any, Any] | None = None


def _pipes(environ: dict[str, str] | None) -> tuple[Any, Any] | None:
    global _PIPES
    if _PIPES is None:
        value = (os.environ if environ is None else environ).get(GATE_ENV, "")
        parts = value.split(",")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        _PIPES = (os.fdopen(int(parts[0]), "rb", buffering=0),
                  os.fdopen(int(parts[1]), "wb", buffering=0))
    return _PIPES


def _ask(word: str, environ: dict[str, str] | None) -> float:
    """Say `word`, wait for "go"; the seconds waited (0 without a gate). A parent gone or
    saying anything else ends the process: it is not wanted any more."""
    pipes = _pipes(environ)
    if pipes is None:
        return 0.0
    reader, writer = pipes
    began = time.perf_counter()
    try:
        writer.write(f"{word}\n".encode("ascii"))
    except BrokenPipeError:
        os._exit(3)
    if reader.readline().decode("ascii", errors="replace").strip() != "go":
        os._exit(3)
    return time.perf_counter() - began


def wait_for_turn(environ: dict[str, str] | None = None) -> float:
    """At the gate: "ready", then wait for the turn; the seconds waited."""
    return _ask("ready", environ)


def quiet_please(environ: dict[str, str] | None = None) -> float:
    """Before timing: ask the parent to stop the children preparing beside this one."""
    return _ask("quiet", environ)


def timed(environ: dict[str, str] | None = None) -> None:
    """After timing: the others may go on."""
    pipes = _pipes(environ)
    if pipes is not None:
        with contextlib.suppress(BrokenPipeError, OSError):
            pipes[1].write(b"timed\n")


# ---- the parent's end --------------------------------------------------------------------

@dataclass
class Prepared:
    """One child started ahead, preparing or waiting at its gate."""

    key: tuple[Any, ...]
    child: Any  # benchmarks.children.Child
    workdir: tempfile.TemporaryDirectory[str]
    to_child: int
    from_child: int
    launched: float = field(default_factory=time.monotonic)
    ready: bool = False
    _buffer: bytes = b""

    def word(self, timeout_s: float) -> str | None:
        """The child's next word within `timeout_s`: None if none came, "" once it ended
        (its pipe closed: a skip, a crash, or its exit)."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.from_child], [], [], max(0.0, left))
            if not readable:
                return None
            try:
                chunk = os.read(self.from_child, 64)
            except OSError:
                chunk = b""
            if not chunk:
                return ""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("ascii", errors="replace").strip()

    def poll_ready(self, timeout_s: float) -> bool:
        """Whether it said "ready" within `timeout_s` (False: it ended or is still busy)."""
        if not self.ready:
            self.ready = self.word(timeout_s) == "ready"
        return self.ready

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
    """The children started ahead of their turn, by key (`children.unit_key`)."""

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        self._waiting: dict[tuple[Any, ...], Prepared] = {}
        self.timing_pid: int | None = None
        self._paused = False
        self._seen_ready: set[tuple[Any, ...]] = set()
        # starts the children wanted next (set by the run's loop); called while a turn
        # waits, so that children whose turn comes later start meanwhile
        self.refill: Callable[[], None] = lambda: None

    def alive(self) -> int:
        return len(self._waiting) + (1 if self.timing_pid is not None else 0)

    def pids(self) -> list[int]:
        return [p.child.proc.pid for p in self._waiting.values()]

    def has(self, key: tuple[Any, ...]) -> bool:
        return key in self._waiting

    def start(self, key: tuple[Any, ...], launch: Launch, *, force: bool = False) -> bool:
        """Start the child for `key` now, if there is room (`force`: even if not); never
        while the others are stopped for a timing. Whether it was started."""
        if key in self._waiting or self._paused or (self.alive() >= self.ahead and not force):
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

    def seen_ready(self, key: tuple[Any, ...]) -> None:
        self._seen_ready.add(key)

    def is_ready(self, key: tuple[Any, ...]) -> bool:
        """Whether the child for `key` has reached its gate (it may have gone on since)."""
        if key in self._seen_ready:
            return True
        waiting = self._waiting.get(key)
        if waiting is not None and waiting.poll_ready(0):
            self._seen_ready.add(key)
            return True
        return False

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Stop every preparing child (and its compile workers), then give the GPU a moment
        to finish what they had queued: nothing of theirs runs while one times."""
        if self._paused:
            return
        self._paused = True
        for p in self._waiting.values():
            _signal_group(p.child.proc.pid, signal.SIGSTOP)
        if self._waiting:
            time.sleep(SETTLE_S)

    def resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        for p in self._waiting.values():
            _signal_group(p.child.proc.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused_for(self) -> Iterator[None]:
        """Every preparing child stopped for the whole block (a child whose own build
        times candidates on the device)."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def keep_only(self, keys: set[tuple[Any, ...]]) -> None:
        """Discard the children no longer wanted."""
        for key in [k for k in self._waiting if k not in keys]:
            self._waiting.pop(key).discard()

    def close(self) -> None:
        self.resume()
        self.keep_only(set())


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # each child leads a session of its own (benchmarks.children.start_child), so its group
    # holds its compile workers too
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(pid, sig)


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
