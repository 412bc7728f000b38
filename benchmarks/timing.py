"""Paired, interleaved timing of a baseline and a candidate callable in one process.

Both sides are warmed up, then measured in rounds; each round times `iters_per_round`
back-to-back calls of one side, then of the other, and which side goes first alternates
from round to round so neither always inherits the other's cache or clock state. Raw
per-iteration samples are kept per round: round i of both sides ran back to back, which is
what the paired bootstrap in `benchmarks.stats` relies on.

Clocks: on CUDA a pair of events per iteration, recorded on the current stream, read
after one synchronise at the end of the round, so the host never stalls the queue
mid-round. On the CPU, `time.perf_counter_ns` (wall time) around each call; for a
one-thread cell (`clock="thread"`) the calling thread's CPU time (`time.thread_time_ns`)
beside it, and the statistics use the CPU time: a co-tenant that takes the core stretches
the wall clock but not the CPU time the thread computed for (on a shared 2-core
machine, beside two busy processes, wall-clock speedups moved -11% to +16% between runs;
CPU-time speedups of processes pinned to a core kept a CV of 0.6%). The wall-clock samples
are kept beside them for the record. If other threads of the process burned CPU during
the rounds (a library that ignored the one-thread setting), the thread's CPU time would
leave their work out: the wall clock is used instead and the result says why.

Optional CUDA-graph capture replaces a callable by the replay of its captured graph, which
removes Python and launch overhead from both sides alike.

Turns (`Turns`): a child of a split measurement times one side while its twin, another
process, times the other; a referee (benchmarks.turns) tells each when to warm up and
when to time a round, so that round i of the two sides ran back to back as in a paired
process, without either side ever running in the other's process.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from benchmarks.clocks import THREAD_CLOCK, WALL_CLOCK
from benchmarks.timing_policy import TimingPolicy

Fn = Callable[[], Any]

# Other threads of the process may use this share of the timed thread's CPU time before
# its CPU time is no longer the whole of the work (then the wall clock is used).
HELPER_CPU_TOLERANCE = 0.02


class Turns(Protocol):
    """The child's side of a referee's turns (benchmarks.turns.ChildTurns)."""

    def ready(self) -> None:
        """Tell the referee everything is built and the side waits for its turns."""
        ...

    def next(self) -> str:
        """The referee's next word: "warm", "round" or "stop"."""
        ...

    def done(self) -> None:
        """Tell the referee the warm-up or round it asked for is over."""
        ...


@dataclass
class PairedSamples:
    baseline_ms: list[list[float]]
    candidate_ms: list[list[float]]
    timing_seconds: float
    stopped_by: str  # "rounds" (policy.rounds reached), "max_seconds" or "referee"
    warmup_seconds: float = 0.0
    cuda_graphs: dict[str, bool] = field(default_factory=dict)
    clock: str = WALL_CLOCK
    # why a one-thread cell fell back to the wall clock (None: it did not)
    clock_fallback: str | None = None
    # wall-clock samples of each side where the statistics use another clock
    wall_baseline_ms: list[list[float]] = field(default_factory=list)
    wall_candidate_ms: list[list[float]] = field(default_factory=list)
    # time.monotonic() at the first round's start and the last round's end
    window: tuple[float, float] | None = None

    @property
    def rounds(self) -> int:
        return len(self.baseline_ms)

    def wall_record(self) -> dict[str, Any] | None:
        """The wall clock's account beside the CPU clock: each side's median and how much
        of its wall time the thread spent on the CPU (1.0: the core was its own)."""
        if self.clock != THREAD_CLOCK:
            return None
        out: dict[str, Any] = {}
        for side, cpu, wall in (("baseline", self.baseline_ms, self.wall_baseline_ms),
                                ("candidate", self.candidate_ms, self.wall_candidate_ms)):
            flat_cpu = [x for r in cpu for x in r]
            flat_wall = [x for r in wall for x in r]
            if flat_cpu and flat_wall:
                out[f"{side}_median_ms"] = statistics.median(flat_wall)
                out[f"{side}_cpu_share"] = statistics.median(
                    c / w for c, w in zip(flat_cpu, flat_wall, strict=True) if w > 0)
        return out


def capture_cuda_graph(fn: Fn, *, warmup: int = 3) -> Fn:
    """Capture one call of `fn` in a CUDA graph and return a replay function.

    The warm-up runs on a side stream as PyTorch's CUDA-graph notes require (lazy
    initialisation such as cuDNN autotuning must not happen during capture). The captured
    output buffer is kept alive by the closure; every replay rewrites it in place.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn()
    torch.cuda.synchronize()

    def replay() -> Any:
        graph.replay()
        return static_out

    replay.graph = graph  # type: ignore[attr-defined]  # keep the graph reachable
    return replay


def _time_round_cpu(fn: Fn, iters: int) -> list[float]:
    out: list[float] = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


class _ThreadClockTimer:
    """CPU time of the calling thread per call, with the wall clock beside it and the
    process's CPU time around the round (to see whether other threads worked too)."""

    def __init__(self) -> None:
        self.last_wall: list[float] = []  # the wall clock's samples of the latest round
        self.thread_ns = 0
        self.process_ns = 0

    def __call__(self, fn: Fn, iters: int) -> list[float]:
        cpu: list[float] = []
        wall: list[float] = []
        p0, t_start = time.process_time_ns(), time.thread_time_ns()
        for _ in range(iters):
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            fn()
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            cpu.append((c1 - c0) / 1e6)
            wall.append((w1 - w0) / 1e6)
        self.thread_ns += time.thread_time_ns() - t_start
        self.process_ns += time.process_time_ns() - p0
        self.last_wall = wall
        return cpu

    def helper_share(self) -> float:
        """CPU time other threads spent during the rounds, relative to the timed thread's."""
        return max(0, self.process_ns - self.thread_ns) / max(1, self.thread_ns)


class _CudaRoundTimer:
    """Preallocated event pairs, reused every round (creating events is not free)."""

    def __init__(self, iters: int) -> None:
        self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]

    def __call__(self, fn: Fn, iters: int) -> list[float]:
        torch.cuda.synchronize()
        for i in range(iters):
            self.starts[i].record()
            fn()
            self.ends[i].record()
        torch.cuda.synchronize()
        return [self.starts[i].elapsed_time(self.ends[i]) for i in range(iters)]


def time_paired(
    baseline: Fn,
    candidate: Fn | None,
    policy: TimingPolicy,
    *,
    device: str,
    clock: Callable[[], float] = time.monotonic,
    cpu_clock: str = WALL_CLOCK,
    turns: Turns | None = None,
) -> PairedSamples:
    """Warm up both callables, then measure interleaved rounds until the policy says stop.

    Warm-up alternates the sides for at least `policy.warmup_iters` calls each and at
    least `policy.warmup_seconds`. Stops after `policy.rounds` rounds, or earlier once
    `policy.max_seconds` of timing wall time have passed and at least `policy.min_rounds`
    rounds exist. Callers pass callables
    already wrapped by `capture_cuda_graph` when they want graphs.

    `candidate=None`: one side of a split measurement (benchmarks.spec.SIDES), a process
    that times one callable and never runs the other; the same warm-up, rounds and
    stopping rule, `candidate_ms` empty. Its rounds are paired with those of the adjacent
    process of the other side, not within this process. With `turns` (one side only) the
    referee says when to warm up, when to time a round and when to stop; the policy's
    stopping rule is then the referee's.

    `cpu_clock=THREAD_CLOCK` (CPU only): the statistics' samples are the thread's CPU
    time per call (module docstring), the wall clock's are kept in `wall_*_ms`.
    """
    iters = max(1, policy.iters_per_round)
    on_cuda = device == "cuda"
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    thread_timer = _ThreadClockTimer() if cpu_clock == THREAD_CLOCK and not on_cuda else None

    def warm_up() -> float:
        return _warm_up(baseline, candidate, policy, clock, sync)

    with torch.inference_mode():
        timer: Callable[[Fn, int], list[float]] = (
            _CudaRoundTimer(iters) if on_cuda else thread_timer or _time_round_cpu
        )
        if turns is not None:
            if candidate is not None:
                raise ValueError("turns time one side: candidate must be None")
            return _time_turns(baseline, timer, iters, turns, warm_up, clock, thread_timer)
        warmup_seconds = warm_up()
        base_rounds: list[list[float]] = []
        cand_rounds: list[list[float]] = []
        wall_base: list[list[float]] = []
        wall_cand: list[list[float]] = []

        def time_round(fn: Fn, rounds: list[list[float]], wall: list[list[float]]) -> None:
            rounds.append(timer(fn, iters))
            if thread_timer is not None:
                wall.append(thread_timer.last_wall)

        def one_round(r: int) -> None:
            """Both sides, in alternating order (or the one side of a split process)."""
            if candidate is None:
                time_round(baseline, base_rounds, wall_base)
            elif r % 2 == 0:
                time_round(baseline, base_rounds, wall_base)
                time_round(candidate, cand_rounds, wall_cand)
            else:
                time_round(candidate, cand_rounds, wall_cand)
                time_round(baseline, base_rounds, wall_base)

        start = clock()
        stopped_by = _rounds_until_stop(one_round, policy, clock, start)
        end = clock()
    samples = PairedSamples(
        baseline_ms=base_rounds,
        candidate_ms=cand_rounds,
        timing_seconds=end - start,
        stopped_by=stopped_by,
        warmup_seconds=warmup_seconds,
        window=(start, end),
    )
    if thread_timer is not None:
        _use_thread_clock(samples, thread_timer, wall_base, wall_cand)
    return samples


def _warm_up(baseline: Fn, candidate: Fn | None, policy: TimingPolicy,
             clock: Callable[[], float], sync: Callable[[], Any]) -> float:
    """Alternate the sides for at least `warmup_iters` calls each and `warmup_seconds`;
    the seconds it took."""
    warm_start = clock()
    done_warmup = 0
    while done_warmup < policy.warmup_iters or clock() - warm_start < policy.warmup_seconds:
        baseline()
        if candidate is not None:
            candidate()
        done_warmup += 1
        if done_warmup >= policy.warmup_iters:
            sync()  # a GPU queue must drain before the clock says the time is up
    sync()
    return clock() - warm_start


def _rounds_until_stop(one_round: Callable[[int], None], policy: TimingPolicy,
                       clock: Callable[[], float], start: float) -> str:
    """Time `policy.rounds` rounds, or fewer once `max_seconds` have passed and at least
    `min_rounds` exist; what stopped them."""
    for r in range(max(1, policy.rounds)):
        one_round(r)
        done = r + 1
        if (
            done < policy.rounds
            and clock() - start >= policy.max_seconds
            and done >= policy.min_rounds
        ):
            return "max_seconds"
    return "rounds"


def _time_turns(fn: Fn, timer: Callable[[Fn, int], list[float]], iters: int, turns: Turns,
                warm_up: Callable[[], float], clock: Callable[[], float],
                thread_timer: _ThreadClockTimer | None) -> PairedSamples:
    """One side's rounds, each when the referee asks for it (see time_paired)."""
    rounds: list[list[float]] = []
    wall: list[list[float]] = []
    warmup_seconds = timing_seconds = 0.0
    first: float | None = None
    last = 0.0
    turns.ready()
    while True:
        word = turns.next()
        if word == "stop":
            break
        if word == "warm":
            warmup_seconds += warm_up()
        elif word == "round":
            t0 = clock()
            first = t0 if first is None else first
            rounds.append(timer(fn, iters))
            if thread_timer is not None:
                wall.append(thread_timer.last_wall)
            last = clock()
            timing_seconds += last - t0
        else:
            raise RuntimeError(f"the referee said {word!r}, not warm, round or stop")
        turns.done()
    samples = PairedSamples(baseline_ms=rounds, candidate_ms=[], timing_seconds=timing_seconds,
                            stopped_by="referee", warmup_seconds=warmup_seconds,
                            window=(first, last) if first is not None else None)
    if thread_timer is not None:
        _use_thread_clock(samples, thread_timer, wall, [])
    return samples


def _use_thread_clock(samples: PairedSamples, timer: _ThreadClockTimer,
                      wall_base: list[list[float]], wall_cand: list[list[float]]) -> None:
    """Keep the thread's CPU time as the samples, or fall back to the wall clock where
    other threads of the process worked beside the timed one."""
    share = timer.helper_share()
    if share > HELPER_CPU_TOLERANCE:
        samples.clock = WALL_CLOCK
        samples.clock_fallback = (f"other threads of the process used {share:.1%} of the timed "
                                  "thread's CPU time: its CPU time would leave their work out")
        samples.baseline_ms, samples.candidate_ms = wall_base, wall_cand
        return
    samples.clock = THREAD_CLOCK
    samples.wall_baseline_ms, samples.wall_candidate_ms = wall_base, wall_cand

