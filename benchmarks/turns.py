"""Two processes, one side each, taking turns round by round: a split unit timed as a pair.

A split measurement times eager and the candidate in processes of their own, so that
neither runs inside the other's process (beside ONNX Runtime constant, eager in the same
process ran up to 29% slower than alone on a shared CPU). Timed one after
the other, though, the two processes see different minutes of the machine: on a shared
2-core virtual machine eager's CPU time per call moved 85-93 ms between processes a
minute apart, with nothing else of ours running, and unit speedups scattered 3-4%. Here
both children are alive at once, pinned to the same core, and a referee in the parent
tells them in turn to time one round (baseline then candidate, candidate then baseline,
...): round i of both sides ran back to back, the machine's drift reaches both alike and
cancels in a paired ratio, and the units' speedups agreed within 0.85% (sd over five
units, with nothing else running).

The protocol is one word a line over two pipes per child (`TURN_ENV` names the child's
ends): the child says "ready" once it has built everything and is about to time, then
waits; the referee says "warm" (warm up alone), "round" (time one round) or "stop"; the
child answers "done" after each warm-up and round. A child that ends before "stop" (a
skipped backend, a crash) ends the unit; its twin is killed by the caller.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO

from benchmarks.timing_policy import TimingPolicy

TURN_ENV = "SPEEDWATCH_TURN_FDS"
WORDS = ("warm", "round", "stop")


class ChildTurns:
    """The child's end: reads the referee's words, answers "ready" and "done"."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read: IO[bytes] = os.fdopen(read_fd, "rb", buffering=0)
        self._write: IO[bytes] = os.fdopen(write_fd, "wb", buffering=0)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ChildTurns | None:
        value = (os.environ if environ is None else environ).get(TURN_ENV, "")
        parts = value.split(",")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        return cls(int(parts[0]), int(parts[1]))

    def ready(self) -> None:
        self._say("ready")

    def next(self) -> str:
        line = self._read.readline()
        # the referee gone (its end closed): stop, and let the supervisor check decide
        return line.decode("ascii", errors="replace").strip() or "stop"

    def done(self) -> None:
        self._say("done")

    def _say(self, word: str) -> None:
        # the referee gone: the next read says stop
        with contextlib.suppress(BrokenPipeError):
            self._write.write(f"{word}\n".encode("ascii"))


@dataclass
class Side:
    """The parent's end of one child: its name, pid and the two pipe ends."""

    name: str
    pid: int
    to_child: int
    from_child: int
    buffer: bytes = b""


class SideEnded(Exception):
    """A child closed its pipe (it exited) before the referee said stop."""

    def __init__(self, side: str) -> None:
        super().__init__(side)
        self.side = side


class RefereeTimeout(Exception):
    """The unit outran its deadline."""


@dataclass(frozen=True)
class Refereed:
    """What the referee saw: rounds per side and the timed stretch (time.monotonic())."""

    rounds: int
    started: float
    finished: float


class Referee:
    """Drives two children through warm-up and alternating rounds until the policy's
    stopping rule, applied to the two sides together: `policy.rounds` rounds, or twice
    `policy.max_seconds` of timing (each side's share, as when they ran one after the
    other) once `policy.min_rounds` are in."""

    def __init__(self, sides: list[Side], policy: TimingPolicy, *, deadline: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if len(sides) != 2:
            raise ValueError("a referee drives exactly two sides")
        self.sides = sides
        self.policy = policy
        self.deadline = deadline
        self.clock = clock

    def run(self) -> Refereed:
        """Raises SideEnded or RefereeTimeout; the caller kills what is left."""
        for side in self.sides:
            self._expect(side, "ready")
        for side in self.sides:
            self._say(side, "warm")
            self._expect(side, "done")
        policy = self.policy
        started = self.clock()
        rounds = 0
        while True:
            order = self.sides if rounds % 2 == 0 else list(reversed(self.sides))
            for side in order:
                self._say(side, "round")
                self._expect(side, "done")
            rounds += 1
            elapsed = self.clock() - started
            if rounds >= max(1, policy.rounds) or (
                    elapsed >= 2 * policy.max_seconds and rounds >= policy.min_rounds):
                break
        finished = self.clock()
        for side in self.sides:
            self._say(side, "stop")
        return Refereed(rounds=rounds, started=started, finished=finished)

    def _say(self, side: Side, word: str) -> None:
        try:
            os.write(side.to_child, f"{word}\n".encode("ascii"))
        except (BrokenPipeError, OSError):
            raise SideEnded(side.name) from None

    def _expect(self, side: Side, word: str) -> None:
        line = self._line(side)
        if line != word:
            raise RuntimeError(f"{side.name} side said {line!r}, expected {word!r}")

    def _line(self, side: Side) -> str:
        while b"\n" not in side.buffer:
            left = self.deadline - self.clock()
            if left <= 0:
                raise RefereeTimeout()
            ready, _, _ = select.select([side.from_child], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(side.from_child, 256)
            if not chunk:
                raise SideEnded(side.name)
            side.buffer += chunk
        line, _, side.buffer = side.buffer.partition(b"\n")
        return line.decode("ascii", errors="replace").strip()
