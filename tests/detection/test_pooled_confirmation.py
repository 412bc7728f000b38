"""A re-measure and the measurement it re-measures are judged together: both measured the
same drop (app.services.confirmation.pooled_outcome, benchmarks.stats.pool_ratios)."""

from __future__ import annotations

import math

import pytest

from app.detection.verdict_types import RatioEstimate
from app.services.confirmation import ConfirmationOutcome, pooled_outcome
from benchmarks.stats import StatsError, pool_ratios


def estimate(ratio: float, low: float, high: float) -> RatioEstimate:
    return RatioEstimate(ratio, low, high, 0.95, ratio, 1.0)


def test_a_re_measure_that_passes_does_not_overrule_the_suspect_it_re_measures() -> None:
    """Measured through `submit` beside two co-tenants: a real 4.5% slowdown, suspect in the
    session (-3.4% [-7.7, +1.1]), re-measured at +6.0% [-1.3, +13.8], which alone passes."""
    first = estimate(0.9662, 0.9230, 1.0114)
    again = ConfirmationOutcome("pass", "re-measure: +6.0%", estimate(1.0600, 0.9870, 1.1380))
    pooled = pooled_outcome(first, again, 0.03)
    assert pooled.verdict == "inconclusive"
    assert "with the first measurement, pooled: -0.7% [-4.5%, +3.2%]" in pooled.sentence


def test_two_that_agree_on_a_drop_confirm_it() -> None:
    first = estimate(0.955, 0.925, 0.986)
    again = ConfirmationOutcome("inconclusive", "re-measure", estimate(0.950, 0.900, 1.003))
    assert pooled_outcome(first, again, 0.03).verdict == "regression"


def test_without_both_estimates_the_re_measure_stands() -> None:
    counted = ConfirmationOutcome("pass", "reproduces on 0 of 2 H100s: ...")
    assert pooled_outcome(estimate(0.95, 0.93, 0.97), counted, 0.03) is counted
    failed = ConfirmationOutcome(None, "the candidate re-measure failed")
    assert pooled_outcome(estimate(0.95, 0.93, 0.97), failed, 0.03) is failed


def test_pooling_weighs_by_inverse_variance() -> None:
    """Equal widths: the geometric mean, the half-width over sqrt(2)."""
    ratio, low, high = pool_ratios([(0.96, 0.96 / 1.02, 0.96 * 1.02),
                                    (1.00, 1.00 / 1.02, 1.00 * 1.02)])
    assert ratio == pytest.approx(math.sqrt(0.96))
    assert math.log(ratio / low) == pytest.approx(math.log(high / ratio))
    assert math.log(high / ratio) == pytest.approx(math.log(1.02) / math.sqrt(2))
    with pytest.raises(StatsError):
        pool_ratios([(1.0, 1.0, 1.0)])
