"""The change-point detector's knobs and their checks, and the error a series that cannot be
analysed raises."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


class SeriesError(ValueError):
    """A series that cannot be analysed (NaN, infinity, wrong shape); the message says which."""


@dataclass(frozen=True)
class DetectorSettings:
    """Knobs of the detector. Defaults were tuned on corpus seed 1 (see docs/detection.md)."""

    min_segment: int = 3
    """Fewest points on each side of a change: one or two outliers are never a change."""
    min_segment_without_intervals: int = 4
    """Fewest points on each side of a change where no point has an interval of its own:
    the scatter is then estimated from the very points tested, and three heavy-tailed
    points in a row pass for a segment too often."""
    min_inner_segment: int = 0
    """Fewest points of a segment between two changes (a dip and its recovery); below
    `min_segment` it is `min_segment`."""
    min_inner_segment_without_intervals: int = 5
    """The same where no point has an interval of its own: the two edges of a dip are
    chosen together, among about n x L pairs of positions, which each edge's correction for
    the splits searched (between its neighbours, the other edge given) does not count, and
    four runs in a row of heavy-tailed noise pass for a dip too often."""
    min_relative_change: float = 0.01
    """Smallest |after/before - 1| reported; smaller real shifts are not worth an alarm."""
    max_p_value: float = 0.001
    """Step test p-value (times the split points searched) a change must reach."""
    penalty_factor: float = 3.0
    """Search penalty per change, in units of log(n) (squared errors weighted by each
    point's variance): candidates for the confirmation, not yet change points."""
    clip_sigmas: float = 3.0
    scan_correction: bool = True
    """The step test's p-value corrected for the split having been picked where the data
    jump most by the tail of the maximum over the splits (`max_over_splits_p`); False: Bonferroni,
    times the number of splits."""
    trend: bool = True
    """Model a common linear drift: a slow drift is no change point; a step is measured
    net of it."""
    drift_guard: bool = True
    max_step_given_trend_p: float = 0.2
    """Drift guard: p-value (times the split points) of the step on top of a linear trend."""
    max_step_given_trend_p_without_intervals: float = 0.02
    """The drift guard where no point has an interval of its own (and no way through it by
    `min_jump_over_ramp`): a scatter estimated from the points tested leaves a slow drift
    in heavy noise looking like a step too often."""
    min_jump_over_ramp: float = 6.0
    """Drift guard, the other way through: a step passes it where it fits its two segments
    better than a linear ramp does by this much (weighted residual sum of squares, in
    chi-square units): a jump, not a drift, even where a trend beside it cannot be ruled
    out. `math.inf` turns it off."""
    rank_test_without_intervals: bool = True
    """Where no point has an interval of its own, a step must also pass a Wilcoxon rank-sum
    test of its two segments (drift removed; `max_rank_p`, times the same split points): the
    t-test's scatter is then estimated from the very points tested, and a short run of two
    or three wild points among ordinary ones passes it as a dip."""
    rank_test: bool = False
    """The rank-sum test is required (set by `without_intervals`)."""
    max_rank_p: float = 0.01
    """The rank-sum check's level (times the split points); where two short segments
    cannot reach it at all (4 points against 4), complete separation is asked instead."""
    autocorrelation: bool = True
    """Inflate variances for the residuals' lag-1 autocorrelation where it is significant."""
    autocorrelation_p: float = 0.1
    trend_p: float = 0.01
    """A common linear drift enters the model where its slope is significant at this level."""
    scale_prior_dof: float = 10.0
    """Degrees of freedom of the points' own variances (intervals and first differences)
    against the residuals' dispersion around the segments (see `_noise_given`)."""
    interval_prior_dof: float = 4.0
    """Degrees of freedom of the series' typical point variance when it is pooled with each
    point's own (see `moderated_variances`); 0 trusts every interval as it is."""

    def without_intervals(self) -> DetectorSettings:
        """The settings for a series of which no point has its own interval."""
        return dataclasses.replace(
            self, min_segment=max(self.min_segment, self.min_segment_without_intervals),
            min_inner_segment=max(self.min_inner_segment,
                                  self.min_inner_segment_without_intervals),
            min_jump_over_ramp=math.inf, rank_test=self.rank_test or
            self.rank_test_without_intervals,
            max_step_given_trend_p=min(self.max_step_given_trend_p,
                                       self.max_step_given_trend_p_without_intervals))

    def check(self) -> DetectorSettings:
        if self.min_segment < 2:
            raise SeriesError(f"min_segment: {self.min_segment} must be at least 2")
        if not 0 <= self.min_relative_change < 1:
            raise SeriesError(f"min_relative_change: {self.min_relative_change} not in [0, 1)")
        if self.min_segment_without_intervals < 2:
            raise SeriesError(f"min_segment_without_intervals: "
                              f"{self.min_segment_without_intervals} must be at least 2")
        if self.min_inner_segment < 0 or self.min_inner_segment_without_intervals < 0:
            raise SeriesError("min_inner_segment and min_inner_segment_without_intervals "
                              "must be at least 0")
        if not self.min_jump_over_ramp >= 0:
            raise SeriesError(f"min_jump_over_ramp: {self.min_jump_over_ramp} must be at "
                              "least 0")
        for name in ("max_p_value", "max_rank_p", "max_step_given_trend_p",
                     "max_step_given_trend_p_without_intervals"):
            p = getattr(self, name)
            if not 0 < p <= 1:
                raise SeriesError(f"{name}: {p} not in (0, 1]")
        if self.interval_prior_dof < 0:
            raise SeriesError("interval_prior_dof must be at least 0")
        if self.penalty_factor <= 0 or self.clip_sigmas <= 0:
            raise SeriesError("penalty_factor and clip_sigmas must be positive")
        return self


DEFAULT_SETTINGS = DetectorSettings()
