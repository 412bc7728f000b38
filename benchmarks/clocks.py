"""Names of the clocks a result's samples were read from, in a module without torch: the
parent process that joins split measurements (benchmarks.isolation) reads them too."""

from __future__ import annotations

WALL_CLOCK = "perf_counter_ns"
THREAD_CLOCK = "thread_time_ns"
CUDA_CLOCK = "cuda_event"
# evidence.timing key of a split child's wall-clock rounds, kept beside its CPU-time
# samples so that the join can fall back to the wall clock on both sides (a child's
# document only: the joined result drops it)
SIDE_WALL_ROUNDS = "side_wall_rounds_ms"
