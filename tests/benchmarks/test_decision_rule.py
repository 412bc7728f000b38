"""The one decision rule (benchmarks.stats.classify_ratio): a regression is a drop that is
real (its interval excludes no change) and large enough to matter (its estimate past the
threshold); a pass rules a drop of the threshold's size out."""

from __future__ import annotations

import pytest

from benchmarks.stats import classify_ratio


@pytest.mark.parametrize(("ratio", "low", "high", "outcome"), [
    # a real 4.9% drop measured to +-2% beside co-tenants: real and past 3%
    (0.9514, 0.9328, 0.9705, "regression"),
    # past 3% but the interval reaches no change: not shown to be real
    (0.9600, 0.9150, 1.0030, "undecided"),
    # real, but its estimate is under the threshold: a drop of 3% is not ruled out either
    (0.9800, 0.9650, 0.9950, "undecided"),
    # a drop of 3% ruled out
    (0.9950, 0.9750, 1.0150, "pass"),
    # mirrored
    (1.0500, 1.0300, 1.0700, "improvement"),
    (1.0400, 0.9900, 1.0900, "pass"),
    # an A/A comparison with a wide interval decides nothing
    (1.0100, 0.9000, 1.1300, "undecided"),
])
def test_the_rule(ratio: float, low: float, high: float, outcome: str) -> None:
    assert classify_ratio(ratio, low, high, 0.03) == outcome


def test_a_real_drop_at_a_gpu_threshold_is_a_regression() -> None:
    """-0.94% [-1.01, -0.87] at a 0.5% threshold: the custom op on a GPU at batch 1."""
    assert classify_ratio(0.9906, 0.9899, 0.9913, 0.005) == "regression"
    assert classify_ratio(0.9906, 0.9899, 0.9913, 0.03) == "pass"
