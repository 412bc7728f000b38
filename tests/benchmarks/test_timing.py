"""Paired interleaved timing: order alternates, rounds pair up, the stop rule holds."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable

from benchmarks.timing import time_paired
from benchmarks.timing_policy import TimingPolicy


def recorder(calls: list[str], name: str, seconds: float = 0.0) -> Callable[[], None]:
    def fn() -> None:
        calls.append(name)
        if seconds:
            time.sleep(seconds)
    return fn


def test_rounds_alternate_which_side_goes_first() -> None:
    calls: list[str] = []
    policy = TimingPolicy(warmup_iters=1, warmup_seconds=0, rounds=4, iters_per_round=2,
                          max_seconds=60, min_rounds=1)
    time_paired(recorder(calls, "b"), recorder(calls, "c"), policy, device="cpu")
    warmup, timed = calls[:2], "".join(calls[2:])
    assert warmup == ["b", "c"]
    assert timed == "bbcc" + "ccbb" + "bbcc" + "ccbb"


def test_samples_are_per_iteration_milliseconds_grouped_by_round() -> None:
    policy = TimingPolicy(warmup_iters=0, warmup_seconds=0, rounds=3, iters_per_round=4,
                          max_seconds=60, min_rounds=1)
    s = time_paired(recorder([], "b", 0.004), recorder([], "c", 0.001), policy, device="cpu")
    assert s.rounds == 3 and s.stopped_by == "rounds"
    assert [len(r) for r in s.baseline_ms] == [4, 4, 4]
    assert all(x >= 4.0 for r in s.baseline_ms for x in r)  # sleep(4 ms) lasts >= 4 ms
    assert all(x >= 1.0 for r in s.candidate_ms for x in r)
    cand = [x for r in s.candidate_ms for x in r]
    base = [x for r in s.baseline_ms for x in r]
    assert statistics.median(cand) < statistics.median(base)


def test_time_budget_stops_early_but_not_before_min_rounds() -> None:
    ticks = itertools.count()  # each clock read advances one "second"
    policy = TimingPolicy(warmup_iters=0, warmup_seconds=0, rounds=100, iters_per_round=1,
                          max_seconds=0.5, min_rounds=7)
    s = time_paired(lambda: None, lambda: None, policy, device="cpu",
                    clock=lambda: float(next(ticks)))
    assert s.rounds == 7 and s.stopped_by == "max_seconds"
    assert len(s.candidate_ms) == 7


def test_rounds_limit_wins_when_time_remains() -> None:
    policy = TimingPolicy(warmup_iters=0, warmup_seconds=0, rounds=5, iters_per_round=1,
                          max_seconds=1e9, min_rounds=1)
    s = time_paired(lambda: None, lambda: None, policy, device="cpu")
    assert (s.rounds, s.stopped_by) == (5, "rounds")
