"""Paired, interleaved timing of a baseline and a candidate callable in one process.

Both sides are warmed up, then measured in rounds; each round times `iters_per_round`
back-to-back calls of one side, then of the other, and which side goes first alternates
from round to round so neither always inherits the other's cache or clock state. Raw
per-iteration samples are kept per round: round i of both sides ran back to back, which is
what the paired bootstrap in `benchmarks.stats` relies on.

Clocks: `time.perf_counter_ns` around each call on CPU (the call is synchronous there); on
CUDA a pair of events per iteration, recorded on the current stream, read after one
synchronise at the end of the round, so the host never stalls the queue mid-round.
Optional CUDA-graph capture replaces a callable by the replay of its captured graph, which
removes Python and launch overhead from both sides alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.spec import TimingPolicy

Fn = Callable[[], Any]


@dataclass
class PairedSamples:
    baseline_ms: list[list[float]]
    candidate_ms: list[list[float]]
    timing_seconds: float
    stopped_by: str  # "rounds" (policy.rounds reached) or "max_seconds"
    warmup_seconds: float = 0.0
    cuda_graphs: dict[str, bool] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(self.baseline_ms)


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
    process of the other side, not within this process.
    """
    iters = max(1, policy.iters_per_round)
    on_cuda = device == "cuda"
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    with torch.inference_mode():
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
        warmup_seconds = clock() - warm_start
        timer: Callable[[Fn, int], list[float]] = (
            _CudaRoundTimer(iters) if on_cuda else _time_round_cpu
        )
        base_rounds: list[list[float]] = []
        cand_rounds: list[list[float]] = []
        start = clock()
        stopped_by = "rounds"
        for r in range(max(1, policy.rounds)):
            if candidate is None:
                base_rounds.append(timer(baseline, iters))
            elif r % 2 == 0:
                base_rounds.append(timer(baseline, iters))
                cand_rounds.append(timer(candidate, iters))
            else:
                cand_rounds.append(timer(candidate, iters))
                base_rounds.append(timer(baseline, iters))
            done = r + 1
            if (
                done < policy.rounds
                and clock() - start >= policy.max_seconds
                and done >= policy.min_rounds
            ):
                stopped_by = "max_seconds"
                break
        elapsed = clock() - start
    return PairedSamples(
        baseline_ms=base_rounds,
        candidate_ms=cand_rounds,
        timing_seconds=elapsed,
        stopped_by=stopped_by,
        warmup_seconds=warmup_seconds,
    )

