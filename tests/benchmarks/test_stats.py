"""The statistics are pure functions: literal samples in, known numbers out."""

from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks.result import BenchResult
from benchmarks.stats import StatsError, speedup_ci, summary


def simulated_rounds(
    n_rounds: int, iters: int, *, base_ms: float, ratio: float, drift: float, noise: float,
    seed: int,
) -> tuple[list[list[float]], list[list[float]]]:
    """Paired rounds whose true speedup is `ratio`: a per-round drift factor hits both sides."""
    rng = np.random.default_rng(seed)
    base, cand = [], []
    for _ in range(n_rounds):
        shared = np.exp(rng.normal(0, drift))
        base.append(list(base_ms * shared * np.exp(rng.normal(0, noise, iters))))
        cand.append(list(base_ms / ratio * shared * np.exp(rng.normal(0, noise, iters))))
    return base, cand


def test_summary_of_one_to_nine_has_known_quantiles() -> None:
    s = summary([float(x) for x in range(1, 10)])
    assert s.n == 9
    assert s.median_ms == 5.0
    assert s.iqr_ms == 4.0  # p75 7 - p25 3
    assert s.mean_ms == 5.0
    assert s.p05_ms == pytest.approx(1.4)  # linear interpolation between 1 and 2
    assert s.p95_ms == pytest.approx(8.6)


def test_summary_pools_rounds() -> None:
    assert summary([[1.0, 2.0], [3.0, 4.0, 5.0]]) == summary([1.0, 2.0, 3.0, 4.0, 5.0])


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -2.0], [1.0, float("nan")]])
def test_summary_refuses_samples_no_clock_produces(bad: list[float]) -> None:
    with pytest.raises(StatsError):
        summary(bad)


def test_speedup_is_ratio_of_pooled_medians() -> None:
    base = [[4.0, 4.0, 100.0], [4.0, 5.0, 4.0]]  # median 4
    cand = [[2.0, 2.0, 2.0], [1.0, 2.0, 9.0]]  # median 2
    s = speedup_ci(base, cand, resamples=200)
    assert s.value == 2.0
    assert s.value == summary(base).median_ms / summary(cand).median_ms
    assert s.ci_low <= s.value <= s.ci_high


def test_identical_sides_give_speedup_one_with_zero_width_ci() -> None:
    base, _ = simulated_rounds(20, 10, base_ms=3.0, ratio=1.0, drift=0.2, noise=0.05, seed=1)
    s = speedup_ci(base, base, resamples=500)
    assert s.value == 1.0
    assert (s.ci_low, s.ci_high) == (1.0, 1.0)


def test_constant_ratio_gives_exact_speedup() -> None:
    base = [[2.0, 2.2, 2.1], [3.0, 3.1, 2.9]]
    cand = [[x / 2.5 for x in r] for r in base]
    s = speedup_ci(base, cand, resamples=300)
    assert s.value == pytest.approx(2.5)
    assert s.ci_low == pytest.approx(2.5)
    assert s.ci_high == pytest.approx(2.5)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_ci_contains_the_true_speedup(seed: int) -> None:
    base, cand = simulated_rounds(30, 10, base_ms=5.0, ratio=1.5, drift=0.1, noise=0.05,
                                  seed=seed)
    s = speedup_ci(base, cand, resamples=2000, seed=seed)
    assert s.ci_low < 1.5 < s.ci_high
    assert s.ci_high - s.ci_low < 0.1  # and it is informative, not everything


def test_ci_shrinks_with_more_rounds() -> None:
    widths = []
    for n in (8, 32, 128):
        base, cand = simulated_rounds(n, 5, base_ms=5.0, ratio=1.2, drift=0.05, noise=0.1,
                                      seed=7)
        s = speedup_ci(base, cand, resamples=2000)
        widths.append(s.ci_high - s.ci_low)
    assert widths[0] > widths[1] > widths[2]


def test_pairing_cancels_drift_shared_by_both_sides() -> None:
    """Breaking the pairing (shuffling candidate rounds) must widen the interval."""
    base, cand = simulated_rounds(40, 5, base_ms=5.0, ratio=1.3, drift=0.3, noise=0.01, seed=11)
    paired = speedup_ci(base, cand, resamples=2000)
    order = np.random.default_rng(0).permutation(len(cand))
    unpaired = speedup_ci(base, [cand[i] for i in order], resamples=2000)
    assert unpaired.value == paired.value  # pooled medians ignore order...
    # ...but the interval of the paired design is several times narrower.
    assert (unpaired.ci_high - unpaired.ci_low) > 3 * (paired.ci_high - paired.ci_low)


def test_bootstrap_is_seeded() -> None:
    base, cand = simulated_rounds(15, 5, base_ms=2.0, ratio=1.1, drift=0.1, noise=0.1, seed=2)
    a = speedup_ci(base, cand, resamples=1000, seed=42)
    b = speedup_ci(base, cand, resamples=1000, seed=42)
    c = speedup_ci(base, cand, resamples=1000, seed=43)
    assert a == b
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)


def test_ci_always_contains_the_point_estimate_so_results_validate() -> None:
    # Two rounds: the percentile interval alone may exclude the pooled estimate.
    base = [[1.0, 1.0, 1.0, 5.0], [5.0, 5.0, 5.0, 1.0]]
    cand = [[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]]
    s = speedup_ci(base, cand, resamples=500)
    assert s.ci_low <= s.value <= s.ci_high
    BenchResult(series_key="k", spec={}, status="ok", speedup=s).check()


def test_ragged_rounds_are_supported() -> None:
    base = [[2.0, 2.0], [2.0, 2.0, 2.0]]
    cand = [[1.0], [1.0, 1.0, 1.0]]
    s = speedup_ci(base, cand, resamples=100)
    assert (s.value, s.ci_low, s.ci_high) == (2.0, 2.0, 2.0)


def test_unequal_round_counts_are_refused() -> None:
    with pytest.raises(StatsError, match="differ in number"):
        speedup_ci([[1.0], [1.0]], [[1.0]])


def test_two_thousand_resamples_of_a_long_run_are_fast() -> None:
    base, cand = simulated_rounds(200, 50, base_ms=1.0, ratio=1.0, drift=0.01, noise=0.01,
                                  seed=0)
    t0 = time.perf_counter()
    speedup_ci(base, cand, resamples=2000)
    # 10,000 samples per side: vectorised this takes well under a second even on a loaded
    # 2-core machine; a per-resample Python loop over samples would take far longer.
    assert time.perf_counter() - t0 < 10.0


def test_an_empty_round_is_refused() -> None:
    with pytest.raises(StatsError, match="at least one sample"):
        speedup_ci([[1.0], []], [[1.0], [1.0]])
