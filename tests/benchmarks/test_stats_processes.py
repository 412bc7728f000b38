"""combine_processes: one speedup and CI from k independent processes, on literal samples.

The premise (benchmarks/README.md, "Process-to-process spread"): each process's speedup is
shifted by something its own rounds cannot see, so the combined CI must cover the spread
between processes, not only the noise within each.
"""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from benchmarks.result import BenchResult
from benchmarks.stats import (
    PROCESSES_METHOD,
    StatsError,
    combine_processes,
    speedup_ci,
    summary,
    units_half_width,
)
from tests.benchmarks.test_stats import simulated_rounds

Pair = tuple[list[list[float]], list[list[float]]]


def process(ratio: float, seed: int, rounds: int = 40) -> Pair:
    return simulated_rounds(rounds, 10, base_ms=4.0, ratio=ratio, drift=0.05, noise=0.02,
                            seed=seed)


def log_half_width(lo: float, hi: float) -> float:
    return (math.log(hi) - math.log(lo)) / 2


def test_one_process_is_exactly_the_single_process_bootstrap() -> None:
    base, cand = process(1.3, seed=1)
    assert combine_processes([(base, cand)], resamples=800, seed=5) == \
        speedup_ci(base, cand, resamples=800, seed=5)


def test_value_is_the_ratio_of_medians_of_all_processes_pooled() -> None:
    procs = [process(1.2, seed=1), process(1.3, seed=2), process(1.25, seed=3)]
    s = combine_processes(procs, resamples=500)
    base = [r for b, _ in procs for r in b]
    cand = [r for _, c in procs for r in c]
    assert s.value == summary(base).median_ms / summary(cand).median_ms
    assert s.method == PROCESSES_METHOD
    assert s.ci_low < s.value < s.ci_high
    BenchResult(series_key="k", spec={}, status="ok", speedup=s).check()


@pytest.mark.parametrize("k", [2, 3, 5])
def test_identical_processes_give_the_within_process_width_scaled_by_t_over_sqrt_k(
    k: int,
) -> None:
    """No spread between processes: only within-process noise, t(k-1)/sqrt(k) of one CI."""
    base, cand = process(1.3, seed=4, rounds=200)
    single = speedup_ci(base, cand, resamples=4000)
    combined = combine_processes([(base, cand)] * k, resamples=4000)
    assert combined.value == single.value
    expected = (log_half_width(single.ci_low, single.ci_high)
                * scipy_stats.t.ppf(0.975, k - 1) / scipy_stats.norm.ppf(0.975) / math.sqrt(k))
    assert log_half_width(combined.ci_low, combined.ci_high) == pytest.approx(expected, rel=0.15)


def test_processes_offset_from_each_other_are_all_inside_the_combined_ci() -> None:
    procs = [process(r, seed=10 + i) for i, r in enumerate((1.20, 1.25, 1.30))]
    own = [speedup_ci(b, c, resamples=1000) for b, c in procs]
    # The premise: each process's own CI excludes the others' estimates...
    assert own[0].ci_high < own[1].value < own[2].ci_low
    # ...and the combined CI contains every one of them.
    combined = combine_processes(procs, resamples=1000)
    for s in own:
        assert combined.ci_low < s.value < combined.ci_high


def test_more_processes_with_the_same_spread_give_a_narrower_ci() -> None:
    ratios = (1.20, 1.22, 1.24)  # the same between-process spread, repeated
    widths = []
    for k in (3, 6, 12):
        procs = [process(ratios[i % 3], seed=20 + i) for i in range(k)]
        s = combine_processes(procs, resamples=500)
        widths.append(log_half_width(s.ci_low, s.ci_high))
    assert widths[0] > widths[1] > widths[2]


def test_combined_ci_is_wider_than_within_process_noise_alone() -> None:
    """The within-process floor: processes that agree by luck keep at least their noise."""
    procs = [process(1.3, seed=30 + i) for i in range(3)]
    s = combine_processes(procs, resamples=2000)
    within_only = max(log_half_width(o.ci_low, o.ci_high)
                      for o in (speedup_ci(b, c, resamples=2000) for b, c in procs))
    assert log_half_width(s.ci_low, s.ci_high) > within_only / math.sqrt(3)


def test_combination_is_seeded() -> None:
    procs = [process(1.2, seed=1), process(1.25, seed=2), process(1.22, seed=3)]
    a = combine_processes(procs, resamples=300, seed=7)
    assert a == combine_processes(procs, resamples=300, seed=7)
    # where the processes agree, their rounds' bootstrap (seeded) sets the floor
    agree = [process(1.2, seed=1), process(1.2, seed=2), process(1.2, seed=3)]
    assert combine_processes(agree, resamples=300, seed=7) != \
        combine_processes(agree, resamples=300, seed=8)


def test_each_variance_counts_once() -> None:
    """Processes apart by more than their rounds' noise: the interval is the t interval of
    their spread alone, not that spread plus the rounds' noise again."""
    procs = [process(r, seed=40 + i) for i, r in enumerate((1.20, 1.25, 1.30, 1.22))]
    s = combine_processes(procs, resamples=500)
    logs = [math.log(speedup_ci(b, c, resamples=10).value) for b, c in procs]
    spread_only = units_half_width(logs, 0.0)
    assert log_half_width(s.ci_low, s.ci_high) == pytest.approx(spread_only, rel=1e-9)


def test_no_processes_or_a_bad_process_is_refused_with_its_number() -> None:
    with pytest.raises(StatsError, match="no processes"):
        combine_processes([])
    good = process(1.2, seed=1)
    with pytest.raises(StatsError, match="process 2: paired rounds differ"):
        combine_processes([good, ([[1.0], [1.0]], [[1.0]])])
