"""What a benchmark process reads about itself: how long it has lived, its peak memory
(CUDA's allocator or the resident set), the time now, and an error in one line."""

from __future__ import annotations

import datetime as dt
import os
import resource
import sys

import torch

# Set in a measuring process that a fork server started (benchmarks.forkserver), so its
# evidence can say how it started.
FORKED_ENV = "SPEEDWATCH_FORKED"


def process_start() -> str:
    """"forked" (from a server that had imported the harness) or "fresh"."""
    return "forked" if os.environ.get(FORKED_ENV) == "1" else "fresh"


def process_age() -> float | None:
    """Seconds since this process started (Linux; None elsewhere): how long the
    interpreter, its imports and the child's own set-up took before the measurement."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


# longest reason kept in one line (a result's reason column)
_REASON_MAX = 400


def one_line(exc: BaseException) -> str:
    """'Type: first line of the message', short enough for a table cell and a database row."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."


def maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss) if sys.platform == "darwin" else int(rss) * 1024


class Peak:
    """Peak memory of one phase: CUDA allocator peak on GPU, max-RSS growth on CPU."""

    def __init__(self, on_cuda: bool) -> None:
        self.on_cuda = on_cuda
        self.start = 0

    def __enter__(self) -> Peak:
        if self.on_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self.start = maxrss_bytes()
        self.value = 0
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on_cuda:
            torch.cuda.synchronize()
            self.value = int(torch.cuda.max_memory_allocated())
        else:
            self.value = max(0, maxrss_bytes() - self.start)
