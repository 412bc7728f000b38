"""Change points on literal series: where a level moved, and where it did not."""

from __future__ import annotations

import numpy as np
import pytest

from app.detection.changepoints import (
    DetectorSettings,
    SeriesError,
    detect_change_points,
    noise_scale,
)

# Small deterministic wiggle (+-0.5%), so series are literal yet not constant.
WIGGLE = [0.004, -0.003, 0.001, -0.005, 0.002, 0.005, -0.001, -0.004, 0.003, 0.0]


def noisy(level: float, n: int, offset: int = 0) -> list[float]:
    return [level * (1 + WIGGLE[(i + offset) % len(WIGGLE)]) for i in range(n)]


def test_clean_ten_percent_drop_is_found_at_the_first_value_after_it() -> None:
    series = noisy(2.0, 20) + noisy(1.8, 20, offset=3)
    [cp] = detect_change_points(series)
    assert cp.index == 20
    assert cp.direction == "regression"
    assert cp.before == pytest.approx(2.0, rel=0.01)
    assert cp.after == pytest.approx(1.8, rel=0.01)
    assert cp.relative_change == pytest.approx(-0.10, abs=0.01)
    assert cp.p_value is not None and cp.p_value < 1e-6


def test_a_rise_is_an_improvement_when_higher_is_better() -> None:
    [cp] = detect_change_points(noisy(1.5, 15) + noisy(1.8, 15, offset=5))
    assert (cp.index, cp.direction) == (15, "improvement")


def test_higher_is_better_false_flips_the_direction() -> None:
    """Latency going up is a regression, the same shape as a speedup going up is not."""
    series = noisy(10.0, 15) + noisy(12.0, 15, offset=5)
    [as_speedup] = detect_change_points(series, higher_is_better=True)
    [as_latency] = detect_change_points(series, higher_is_better=False)
    assert as_speedup.direction == "improvement"
    assert as_latency.direction == "regression"
    assert as_latency.index == as_speedup.index == 15


def test_a_single_outlier_is_not_a_change_point() -> None:
    series = noisy(2.0, 40)
    series[17] = 1.2  # one throttled run, 40% slow
    assert detect_change_points(series) == []


def test_two_adjacent_outliers_are_not_a_change_point_either() -> None:
    series = noisy(2.0, 40)
    series[17] = series[18] = 1.5
    assert detect_change_points(series) == []


def test_a_constant_series_has_no_change_point() -> None:
    assert detect_change_points([1.7] * 50) == []
    assert noise_scale([1.7] * 50) == 0.0


def test_a_step_in_an_otherwise_constant_series_is_found() -> None:
    """No noise at all: the noise floor falls back to the mean absolute difference."""
    [cp] = detect_change_points([1.0] * 12 + [0.9] * 12)
    assert (cp.index, cp.direction) == (12, "regression")


def test_regression_and_its_fix_are_two_change_points() -> None:
    series = noisy(2.0, 20) + noisy(1.6, 15, offset=2) + noisy(2.0, 20, offset=7)
    cps = detect_change_points(series)
    assert [(c.index, c.direction) for c in cps] == [(20, "regression"), (35, "improvement")]


def test_a_slow_linear_drift_is_not_a_change_point() -> None:
    """Documented behaviour: 6% of gradual drift over 60 runs has no revision to blame.

    The same drift with a 10% step on top still yields the step, at its index.
    """
    n = 60
    trend = [1 + 0.06 * i / (n - 1) for i in range(n)]
    drift = [2.0 * t * (1 + WIGGLE[i % 10]) for i, t in enumerate(trend)]
    assert detect_change_points(drift) == []
    stepped = [v * (0.9 if i >= 35 else 1.0) for i, v in enumerate(drift)]
    [cp] = detect_change_points(stepped)
    assert (cp.index, cp.direction) == (35, "regression")


def test_a_shift_smaller_than_the_minimum_effect_is_ignored() -> None:
    series = noisy(2.0, 30) + noisy(2.0 * 0.985, 30, offset=4)  # 1.5% drop, very clear
    assert detect_change_points(series) == []
    lenient = DetectorSettings(min_relative_change=0.01)
    [cp] = detect_change_points(series, settings=lenient)
    assert cp.index == 30


def test_series_too_short_for_two_segments_give_nothing() -> None:
    assert detect_change_points([]) == []
    assert detect_change_points([2.0, 1.0]) == []
    assert detect_change_points([2.0] * 4 + [1.0] * 3) == []  # min_segment 4 on each side


def test_heavy_noise_hides_a_small_step_rather_than_inventing_changes() -> None:
    rng = np.random.default_rng(7)
    series = list(2.0 * (1 + 0.05 * rng.standard_normal(60)))
    assert detect_change_points(series) == []


@pytest.mark.parametrize("bad", [[1.0, float("nan"), 1.0], [1.0, float("inf")]])
def test_nan_and_infinity_are_refused(bad: list[float]) -> None:
    with pytest.raises(SeriesError, match="NaN and infinity are refused"):
        detect_change_points(bad)


def test_nested_values_are_refused() -> None:
    with pytest.raises(SeriesError, match="flat list"):
        detect_change_points([[1.0, 2.0]])  # type: ignore[list-item]
