"""Change points in one series of speedups (or any metric): where the level moved.

Each point may come with its own 95% interval, which only Speedwatch has: a GPU cell timed
with CUDA graphs is often known to +-0.1%, a CPU cell to +-3%. The noise model of point i is

    variance_i = scale * inflation * (phi * s_i^2 + tau^2)

- s_i^2: the point's own variance, (half-width / 1.96)^2 on the log scale, pooled with the
  series' typical one (`moderated_variances`: an interval from 3 processes has 2 degrees of
  freedom and is sometimes far too narrow by chance). NaN-free: a point without an interval
  gets the typical one; without any intervals s_i = 0 and the series' scatter is all there
  is -- the same method, not a second one.
- tau^2: the scatter BETWEEN points that no single interval can see (another machine,
  another day, a clock state), from first differences (`noise_scale`); phi <= 1: how much of
  the intervals the differences show where they show less (the product's Student-t
  intervals from few processes are about twice 1.96 standard errors), pooled with 1.
- scale: the residuals' dispersion around the segments the search proposed (every
  candidate: around fewer, a change not yet confirmed would count as scatter), pooled with
  1; inflation: (1 + rho) / (1 - rho) for a significant lag-1 autocorrelation rho of the
  residuals (consecutive runs sharing a machine's state make a segment's mean vary more),
  re-estimated as candidates fail, the larger kept.

Method, and why each part is there (docs/detection.md has the measured comparison):

1. Log scale for positive series: speedups' noise, drift and steps are multiplicative.
2. Robust clipping: each value is pulled to within `clip_sigmas` of its own standard
   deviation of a centred running median (window 5). One wild sample cannot fake a step,
   while a real step survives: the running median follows it within two points.
3. Search: the exact minimiser of the weighted squared error plus `penalty_factor * log(n)`
   per change (PELT's objective, with PELT's pruning), over the split positions that seeded
   binary segmentation proposes (Kovacs et al. 2020: the best split of each of O(n) intervals
   of halving lengths). Seeded intervals see a short dip (a regression and its fix) that a
   split of the whole series would average away; searching only their positions keeps a
   10k-point series to tens of milliseconds (scripts/bench_detection.py --timing).
4. Confirmation of every candidate against its neighbours' segments (Hunter/Otava's merge
   step): the weighted difference of the two segment levels over its standard error (Student
   t; a common linear drift enters the model where it is significant), its p-value corrected
   for the split having been picked where the data jump most (the tail of the maximum over
   the splits the search could have chosen there, `max_over_splits_p`) must reach
   `max_p_value`; a drift guard (the step must also stand
   on top of a local linear trend, at `max_step_given_trend_p`, so a slow drift is not a
   change point while a step on a drift still is; with intervals a step also passes it
   where it fits better than a ramp by `min_jump_over_ramp`); and a minimum relative effect.
   Candidates that fail are removed weakest first and their neighbours re-tested on the
   merged segments; the autocorrelation is re-estimated on the segments left (the larger
   inflation kept) until they no longer change.

Where no point has an interval, the same method runs with `DetectorSettings.without_intervals`:
4 points a side (5 for a segment between two changes), a stricter drift guard, no
jump-over-ramp way through it, and a Wilcoxon
rank-sum test of the two segments beside the t-test (the shift must be carried by most of
their points, not by two or three wild runs the clipping followed).

Every change point reports its size, its 95% interval and the test that confirmed it.
Pure functions on plain numbers: no service imports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view
from scipy import optimize, special, stats

Direction = Literal["regression", "improvement"]
FloatArray = npt.NDArray[np.float64]

# A 95% interval's half-width over the standard error it stands for.
_Z95 = float(stats.norm.ppf(0.975))
# Median of chi-square with one degree of freedom: d^2 / var(d) has it for Gaussian d.
_CHI2_1_MEDIAN = float(stats.chi2.ppf(0.5, 1))
# Highest lag-1 autocorrelation believed: beyond it a segment's mean is not estimable.
_MAX_RHO = 0.9

# What `ChangePoint.test` says; docs/detection.md describes both.
TEST_WITH_INTERVALS = ("step t-test weighted by each point's 95% interval and the series' "
                       "scatter; corrected for the maximum over the splits searched; "
                       "drift guard")
TEST_SCATTER_ONLY = ("step t-test on the series' scatter alone (no point has its own "
                     "uncertainty); corrected for the maximum over the splits searched; "
                     "drift guard; rank-sum check")


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


@dataclass(frozen=True)
class ChangePoint:
    """One level shift. `index` is the position of the first value after the change."""

    index: int
    direction: Direction
    before: float  # level of the segment before, at the change (weighted, outliers clipped)
    after: float  # level of the segment after, at the change
    relative_change: float  # after / before - 1
    p_value: float | None  # the step test's, times the split points searched (see module)
    ci_low: float | None = None  # 95% interval of relative_change
    ci_high: float | None = None
    test: str = ""  # the test that confirmed it (TEST_WITH_INTERVALS or TEST_SCATTER_ONLY)

    def to_dict(self, *, explain: bool = False) -> dict[str, Any]:
        """The `speedwatch detect` keys; with `explain`, also the change's 95% interval
        (`relative_change_ci_low`/`_high`) and the test that confirmed it."""
        out: dict[str, Any] = {
            "index": self.index, "direction": self.direction, "before": self.before,
            "after": self.after, "relative_change": self.relative_change,
            "p_value": self.p_value,
        }
        if explain:
            out.update(relative_change_ci_low=self.ci_low, relative_change_ci_high=self.ci_high,
                       test=self.test)
        return out


def as_series(values: Sequence[float] | FloatArray, name: str = "values") -> FloatArray:
    """Values as a 1-D float array; refuse what no measurement produces (NaN, inf)."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SeriesError(f"{name} must be a list of numbers") from None
    if x.ndim != 1:
        raise SeriesError(f"{name} must be a flat list of numbers")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise SeriesError(f"{name}[{int(bad[0])}] is {x[bad[0]]!r}; NaN and infinity are "
                          "refused")
    return x


def _interval_bounds(x: FloatArray, ci_low: Sequence[float | None] | FloatArray | None,
                     ci_high: Sequence[float | None] | FloatArray | None
                     ) -> tuple[FloatArray, FloatArray] | None:
    """Checked interval bounds (NaN where a point has none), or None without intervals."""
    if ci_low is None and ci_high is None:
        return None
    if ci_low is None or ci_high is None:
        raise SeriesError("ci_low and ci_high come together: give both or neither")
    bounds = []
    for name, given in (("ci_low", ci_low), ("ci_high", ci_high)):
        try:
            arr = np.asarray(given if isinstance(given, np.ndarray)
                             else [np.nan if v is None else v for v in given], dtype=np.float64)
        except (TypeError, ValueError):
            raise SeriesError(f"{name} must be a list of numbers (or null)") from None
        if arr.ndim != 1 or arr.size != x.size:
            raise SeriesError(f"{name} has {arr.size} values, values has {x.size}")
        if np.any(np.isinf(arr)):
            raise SeriesError(f"{name}[{int(np.flatnonzero(np.isinf(arr))[0])}] is infinite")
        bounds.append(arr)
    lo, hi = bounds
    half = np.flatnonzero(np.isnan(lo) != np.isnan(hi))
    if half.size:
        raise SeriesError(f"point {int(half[0])}: ci_low and ci_high are both null or both "
                          "numbers")
    known = ~np.isnan(lo)
    outside = np.flatnonzero(known & ((lo > x) | (x > hi)))
    if outside.size:
        i = int(outside[0])
        raise SeriesError(f"point {i}: {x[i]!r} is not within its interval "
                          f"[{lo[i]!r}, {hi[i]!r}]")
    return lo, hi


def point_variances(
    values: Sequence[float] | FloatArray,
    ci_low: Sequence[float | None] | FloatArray | None,
    ci_high: Sequence[float | None] | FloatArray | None,
    *,
    log_scale: bool = False,
) -> FloatArray:
    """Each point's own variance from its 95% interval: (half-width / 1.96)^2, on the log
    scale if asked; NaN for a point without an interval, zeros when no point has one.

    An interval from a few processes is wider than 1.96 standard errors (Student t); the
    residuals' dispersion around the segments corrects the level (`_noise_given`).
    """
    x = as_series(values)
    bounds = _interval_bounds(x, ci_low, ci_high)
    if bounds is None:
        return np.zeros(x.size)
    lo, hi = bounds
    if log_scale:
        with np.errstate(divide="ignore", invalid="ignore"):
            width = np.log(hi) - np.log(lo)
    else:
        width = hi - lo
    return np.asarray((width / (2 * _Z95)) ** 2, dtype=np.float64)


# An interval from 3 processes (the product's minimum; benchmarks.stats.combine_processes)
# carries 2 degrees of freedom: its variance is sd^2 * chi-square(2) / 2.
_POINT_DOF = 2.0


def moderated_variances(s2: FloatArray, prior_dof: float) -> FloatArray:
    """Each point's variance pooled with the series' typical one (empirical Bayes, as limma
    moderates per-gene variances): (d0 * s0^2 + d * s_i^2) / (d0 + d).

    An interval from a few processes is an estimate of its own: with 2 degrees of freedom
    one in a hundred comes out ten times too narrow, and a weighted mean would follow that
    one point. s0^2 is the median point variance over the chi-square median it would have,
    d = 2 (the product's minimum of 3 processes), d0 = `prior_dof`. A throttled point's
    wide interval still weighs it down. A point without an interval (NaN) gets s0^2; when
    no point has one, all are 0 and the series' scatter is all there is.
    """
    known = ~np.isnan(s2)
    if not np.any(known & (s2 > 0)):
        return np.zeros(s2.size)
    d = _POINT_DOF
    s0 = float(np.median(s2[known])) / (float(stats.chi2.ppf(0.5, d)) / d)
    if prior_dof == 0:
        return np.where(known, s2, s0)
    return np.asarray(np.where(known, (prior_dof * s0 + d * s2) / (prior_dof + d), s0),
                      dtype=np.float64)


def _mean_abs_difference_scale(x: FloatArray) -> float:
    # Gaussian relation E|d| = sqrt(2/pi) * sd(d), sd(d) = sqrt(2) * sigma.
    return float(np.mean(np.abs(np.diff(x)))) * math.sqrt(math.pi / 2) / math.sqrt(2)


def noise_scale(values: Sequence[float] | FloatArray,
                variances: Sequence[float] | FloatArray | None = None) -> float:
    """Point-to-point scatter (standard deviation) beyond the points' own variances.

    Robust to steps and drift. Without variances it is MAD(diff) * 1.4826 / sqrt(2), falling
    back to the mean absolute difference when more than half the differences are exactly
    zero (quantised or mostly constant series); 0 only for a constant series, or when the
    points' own variances explain all the scatter.
    """
    x = as_series(values)
    if x.size < 2:
        return 0.0
    s2 = np.zeros(x.size) if variances is None else np.asarray(variances, dtype=np.float64)
    d = np.diff(x)
    d = d - float(np.median(d))
    d2 = d * d
    a = s2[:-1] + s2[1:]
    if not np.any(a > 0):
        tau2 = float(np.median(d2)) / (2 * _CHI2_1_MEDIAN)
        return math.sqrt(tau2) if tau2 > 0 else _mean_abs_difference_scale(x)

    def excess(t2: float) -> float:
        denom = a + 2 * t2
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(denom > 0, d2 / np.where(denom > 0, denom, 1.0),
                             np.where(d2 > 0, np.inf, 0.0))
        return float(np.median(ratio)) - _CHI2_1_MEDIAN

    if excess(0.0) <= 0:
        return 0.0
    upper = float(np.median(d2)) / (2 * _CHI2_1_MEDIAN)
    if upper <= 0 or excess(upper) > 0:
        upper = max(upper, float(np.max(d2)))
    return math.sqrt(float(optimize.brentq(excess, 0.0, upper, xtol=upper * 1e-4)))


def _interval_overstatement(x: FloatArray, s2: FloatArray) -> float:
    """How much of the points' own variances the first differences show, when they show
    less than all of it: median(d_i^2 / (s_i^2 + s_{i+1}^2)) over the chi-square(1) median,
    at most 1. Intervals from 3 processes are Student t with 2 degrees of freedom, about
    twice as wide as 1.96 standard errors: the scatter can be well inside them."""
    a = s2[:-1] + s2[1:]
    if x.size < 2 or not np.all(a > 0):
        return 1.0
    d = np.diff(x)
    d = d - float(np.median(d))
    return min(1.0, float(np.median(d * d / a)) / _CHI2_1_MEDIAN)


def _running_median(x: FloatArray, half: int = 2) -> FloatArray:
    """Centred running median, windows truncated at the ends."""
    n = x.size
    out = np.empty(n)
    if n > 2 * half:
        out[half:n - half] = np.median(sliding_window_view(x, 2 * half + 1), axis=1)
        edges = list(range(half)) + list(range(n - half, n))
    else:
        edges = list(range(n))
    for i in edges:
        out[i] = np.median(x[max(0, i - half): min(n, i + half + 1)])
    return out


def _clipped(x: FloatArray, sd: FloatArray, k: float) -> FloatArray:
    m = _running_median(x)
    return np.asarray(m + np.clip(x - m, -k * sd, k * sd), dtype=np.float64)


def _seeded_intervals(n: int, min_segment: int) -> tuple[npt.NDArray[np.intp],
                                                         npt.NDArray[np.intp]]:
    """Starts and ends of the seeded intervals: lengths n, n/2, n/4, ..., each level's
    intervals overlapping by half, down to the shortest that holds two segments."""
    starts, ends = [0], [n]
    k = 1
    while True:
        length = math.ceil(n / 2**k)
        if length < 2 * min_segment:
            break
        count = 2 * 2**k - 1
        s = np.unique(np.round(np.linspace(0, n - length, count)).astype(np.intp))
        starts.extend(s.tolist())
        ends.extend((s + length).tolist())
        k += 1
    return np.asarray(starts, dtype=np.intp), np.asarray(ends, dtype=np.intp)


def _best_split(sw: FloatArray, swx: FloatArray, lo: int, hi: int,
                m: int) -> tuple[int, float]:
    """The split of [lo, hi) with the largest weighted |z|, and that |z|."""
    split = np.arange(lo + m, hi - m + 1)
    wa = sw[split] - sw[lo]
    wb = sw[hi] - sw[split]
    diff = (swx[hi] - swx[split]) / wb - (swx[split] - swx[lo]) / wa
    az = np.abs(diff) / np.sqrt(1 / wa + 1 / wb)
    j = int(np.argmax(az))
    return int(split[j]), float(az[j])


def _split_positions(x: FloatArray, w: FloatArray, min_segment: int,
                     least_z: float) -> npt.NDArray[np.intp]:
    """Where a change could be: the best split (weighted |z|) of every seeded interval
    where that |z| is at least `least_z`."""
    n = x.size
    m = min_segment
    sw = np.concatenate([[0.0], np.cumsum(w)])
    swx = np.concatenate([[0.0], np.cumsum(w * x)])
    lo, hi = _seeded_intervals(n, m)
    counts = hi - lo - 2 * m + 1
    keep = counts > 0
    lo, hi, counts = lo[keep], hi[keep], counts[keep]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    which = np.repeat(np.arange(lo.size), counts)
    split = lo[which] + m + (np.arange(int(counts.sum())) - offsets[which])
    l_, r_ = lo[which], hi[which]
    wa = sw[split] - sw[l_]
    wb = sw[r_] - sw[split]
    diff = (swx[r_] - swx[split]) / wb - (swx[split] - swx[l_]) / wa
    az = np.abs(diff) / np.sqrt(1 / wa + 1 / wb)
    best = np.maximum.reduceat(az, offsets)
    at_max = np.flatnonzero(az == np.repeat(best, counts))
    _, first = np.unique(which[at_max], return_index=True)
    return np.unique(split[at_max[first]][best >= least_z])


def _candidates(x: FloatArray, w: FloatArray, min_segment: int, penalty: float) -> list[int]:
    """The segmentation minimising the weighted squared error plus `penalty` per change,
    among the split positions of the seeded intervals (exact dynamic programming over them:
    O(p^2) for p positions, a few per point at most, instead of O(n^2) over every point)."""
    n = x.size
    m = min_segment
    # Adding a change lowers the cost by its z^2 against its final neighbours; a split that
    # no interval shows with half the z the penalty asks for does not pay for itself.
    pos = _split_positions(x, w, m, math.sqrt(penalty) / 2)
    ends = np.concatenate([[0], pos, [n]])
    sw = np.concatenate([[0.0], np.cumsum(w)])
    swx = np.concatenate([[0.0], np.cumsum(w * x)])
    swxx = np.concatenate([[0.0], np.cumsum(w * x * x)])
    cw, cwx, cwxx = sw[ends], swx[ends], swxx[ends]
    best = np.full(ends.size, np.inf)
    best[0] = -penalty
    last = np.zeros(ends.size, dtype=np.intp)
    alive = np.zeros(0, dtype=np.intp)  # PELT: starts that can still begin the last segment
    waiting = 0  # ends[waiting:] are not yet m points behind the current end
    # the first start at least m points behind each end
    ready = np.searchsorted(ends, ends - m, side="right")
    for j in range(1, ends.size):
        if ready[j] > waiting:
            new = np.arange(waiting, ready[j])
            alive = np.concatenate([alive, new[np.isfinite(best[new])]])
            waiting = int(ready[j])
        if alive.size == 0:
            continue
        segw = cw[j] - cw[alive]
        segx = cwx[j] - cwx[alive]
        cost = (cwxx[j] - cwxx[alive]) - segx * segx / segw
        total = best[alive] + cost
        k = int(np.argmin(total))
        best[j], last[j] = total[k] + penalty, alive[k]
        # A start whose cost alone already exceeds the best with a change can never win
        # later (the squared-error cost of a segment only grows as it is extended).
        alive = alive[total <= best[j]]
    chosen: list[int] = []
    j = ends.size - 1
    while j > 0:
        j = int(last[j])
        if j > 0:
            chosen.append(int(ends[j]))
    return sorted(chosen)


@dataclass(frozen=True)
class _Noise:
    """The noise model of the points: variance_i = base_i * scale * inflation."""

    scale: float  # residual dispersion over the base variances (moderated towards 1)
    inflation: float  # (1 + rho) / (1 - rho)
    dof: float  # degrees of freedom behind the scale
    slope: float = 0.0  # common linear drift per point (0: none in the model)
    slope_var: float = 0.0  # its variance


def _segment_ids(n: int, cps: Sequence[int]) -> npt.NDArray[np.intp]:
    ids = np.zeros(n, dtype=np.intp)
    for c in cps:
        ids[c:] += 1
    return ids


def _noise_given(x: FloatArray, base: FloatArray, cps: Sequence[int],
                 settings: DetectorSettings, own_share: float) -> _Noise:
    """The noise around the segments: dispersion, drift and autocorrelation of the residuals.

    `base`: each point's variance as the points' intervals and the first differences say
    (s_i^2 + tau^2). The residuals around the segment means (and a common drift) say how far
    off that is overall: their dispersion, pooled with 1 (what `base` claims) as a prior worth
    `scale_prior_dof` degrees of freedom. A long series speaks for itself, a short one leans
    on its points' intervals. The drift and the autocorrelation enter the model only where the
    residuals show them (a trend significant at `trend_p`, a lag-1 autocorrelation at
    `autocorrelation_p`): each costs a step's worth of power where it is not there.
    """
    n = x.size
    seg = _segment_ids(n, cps)
    k = len(cps) + 1
    t = np.arange(n, dtype=np.float64)
    w = 1.0 / base
    sw = np.bincount(seg, w, k)
    xm = (np.bincount(seg, w * x, k) / sw)[seg]
    tm = (np.bincount(seg, w * t, k) / sw)[seg]
    tt = float(np.sum(w * (t - tm) ** 2))
    r = x - xm
    dof = n - k
    phi = float(np.sum(w * r * r)) / dof if dof > 0 else 1.0
    slope = slope_var = 0.0
    if settings.trend and tt > 0 and dof > 1:
        b = float(np.sum(w * (t - tm) * r)) / tt
        r_t = r - b * (t - tm)
        phi_t = float(np.sum(w * r_t * r_t)) / (dof - 1)
        if phi_t > 0 and 2 * special.ndtr(-abs(b) / math.sqrt(phi_t / tt)) <= settings.trend_p:
            slope, r, phi, dof = b, r_t, phi_t, dof - 1
    inflation = 1.0
    if settings.autocorrelation and dof > 2:
        e = r * np.sqrt(w)
        same = seg[1:] == seg[:-1]
        denom = float(np.sum(e * e))
        if denom > 0:
            raw = float(np.sum((e[:-1] * e[1:])[same])) / denom
            # Residuals around a mean of L points are anti-correlated by about 1/L:
            # E[raw] ~ rho - (1 + 3 rho) / L (Kendall); invert with L = n / k.
            inv_l = k / n
            shrink = 1 - 3 * inv_l
            rho = (raw + inv_l) / shrink if shrink > 0 else 0.0
            # Tested before the correction's amplification (raw has a standard error of
            # about 1 / sqrt(dof)): dividing by `shrink` scales its noise up as well, 3x in
            # a 9-point series of two segments, where a chance raw of 0.1 read as rho 0.97.
            if special.ndtr(-rho * shrink * math.sqrt(dof)) <= settings.autocorrelation_p:
                rho = min(max(rho, 0.0), _MAX_RHO)
                inflation = (1 + rho) / (1 - rho)
    # Only the points' own intervals are information beside the residuals; a scatter
    # from first differences is the same data again.
    d0 = settings.scale_prior_dof * own_share
    scale = (d0 + dof * phi) / (d0 + dof) if d0 + dof > 0 else 1.0
    if slope:
        slope_var = scale * inflation / tt
    return _Noise(max(scale, 1e-12), inflation, max(d0 + dof / inflation, 1.0), slope,
                  slope_var)


@dataclass
class _Candidate:
    index: int
    before: float
    after: float
    relative_change: float
    ci_low: float
    ci_high: float
    p_value: float
    trend_p: float
    passed: bool


def _relative(before: float, after: float) -> float:
    if before != 0.0:
        return after / before - 1.0
    return 0.0 if after == 0.0 else math.copysign(1.0, after)


def _step_against_trend(y: FloatArray, w: FloatArray, split: int) -> tuple[float, float]:
    """Two views of a step at `split` against a local linear trend (known variances):

    - the step's z in y ~ level + trend + step (does the step stand on top of a trend?);
    - how much better the step alone fits than the trend alone: the weighted residual sum
      of squares of y ~ level + trend minus that of y ~ level + step, in chi-square units
      (positive where the data look more like a jump than a ramp).
    """
    length = y.size
    t = (np.arange(length) - (length - 1) / 2) / length
    step = (np.arange(length) >= split) * 1.0
    design = np.column_stack([np.ones(length), t, step])
    xtw = design.T * w
    gram = xtw @ design
    xty = xtw @ y
    yy = float(np.sum(w * y * y))

    def rss(cols: list[int]) -> float:
        g = gram[np.ix_(cols, cols)]
        b = xty[cols]
        try:
            return yy - float(b @ np.linalg.solve(g, b))
        except np.linalg.LinAlgError:
            return yy

    try:
        cov = np.linalg.inv(gram)
    except np.linalg.LinAlgError:
        return 0.0, 0.0
    beta = cov @ xty
    z = float(beta[2] / math.sqrt(cov[2, 2])) if cov[2, 2] > 0 else 0.0
    return z, rss([0, 1]) - rss([0, 2])


def _siegmund_nu(x: FloatArray) -> FloatArray:
    """Siegmund's overshoot correction nu(x) for a maximum taken over a discrete grid
    (Siegmund and Yakir's approximation; nu -> 1 as the grid becomes continuous)."""
    h = np.maximum(x, 1e-12) / 2
    out = (1 / h) * (special.ndtr(h) - 0.5) / (h * special.ndtr(h) + np.exp(-h * h / 2)
                                                 / math.sqrt(2 * math.pi))
    return np.asarray(out, dtype=np.float64)


def max_over_splits_p(p: float, sw: FloatArray, lo: int, hi: int, m: int) -> float:
    """The p-value of the largest of the standardized steps over every split of [lo, hi)
    with m points a side, given the one at hand has two-sided p-value `p` on its own.

    Neighbouring splits' statistics are nearly the same statistic (a standardized Brownian
    bridge in information time t, the share of the weight before the split), so the
    maximum's tail is far below `p` times the number of splits (Bonferroni) on long
    segments: P(max |Z| > b) ~ 2 b phi(b) sum_k lambda_k D_k nu(b sqrt(2 lambda_k D_k)),
    lambda = 1 / (2 t (1 - t)), D_k the share of the weight of point k (Siegmund 1988;
    within 10% of simulation for 8-160 equal-weight points at b = 3-4). At least `p`, at
    most Bonferroni. A Student-t p-value enters as the normal quantile with that p-value."""
    splits = hi - lo - 2 * m + 1
    if splits <= 1 or p >= 1.0:
        return min(1.0, p * max(splits, 1))
    total = sw[hi] - sw[lo]
    k = np.arange(lo + m, hi - m + 1)
    t = (sw[k] - sw[lo]) / total
    step = (sw[k + 1] - sw[k]) / total  # the weight of point k
    lam = 1 / (2 * t * (1 - t))
    b = float(-special.ndtri(p / 2))
    scan = 2 * b * math.exp(-b * b / 2) / math.sqrt(2 * math.pi) * float(
        np.sum(lam * step * _siegmund_nu(b * np.sqrt(2 * lam * step))))
    return float(min(1.0, p * splits, max(p, scan)))


def _rank_sum_p(a: FloatArray, b: FloatArray) -> float:
    """Two-sided p-value of the Wilcoxon rank-sum (Mann-Whitney) test of a against b: exact
    where the samples are completely separated, or where a sample has at most 8 points and
    there are no ties (scipy); otherwise the normal approximation with tie and continuity
    corrections (as scipy's, without its overhead), which overstates the p-value of a
    short separated segment several-fold."""
    n1, n2 = a.size, b.size
    if a.max() < b.min() or b.max() < a.min():
        return _separated_p(n1, n2)  # exact, ties within a segment or not
    both = np.concatenate([a, b])
    ranks = stats.rankdata(both)
    _, counts = np.unique(both, return_counts=True)
    tied = bool(np.any(counts > 1))
    if min(n1, n2) <= 8 and not tied:
        return float(stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue)
    n = n1 + n2
    u = float(np.sum(ranks[:n1])) - n1 * (n1 + 1) / 2
    ties = float(np.sum(counts.astype(np.float64) ** 3 - counts))
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return float(min(1.0, 2 * special.ndtr(-z)))


def _separated_p(n1: int, n2: int) -> float:
    """The rank-sum test's smallest two-sided p-value: every point of one sample beyond
    every point of the other, one of the C(n1 + n2, n1) ways to split the points."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def _two_sided_t(z: float, dof: float) -> float:
    return float(2 * special.stdtr(dof, -abs(z)))


@dataclass(frozen=True)
class _Fit:
    """Weights and drift-free values under one noise model, with prefix sums, so that a
    candidate's two segment levels cost O(1) however long the segments."""

    noise: _Noise
    w: FloatArray
    y: FloatArray  # values net of the common drift
    sw: FloatArray
    swt: FloatArray
    swy: FloatArray

    @classmethod
    def of(cls, xc: FloatArray, base: FloatArray, noise: _Noise) -> _Fit:
        w = 1.0 / (base * noise.scale * noise.inflation)
        t = np.arange(xc.size, dtype=np.float64)
        y = xc - noise.slope * t

        def prefix(a: FloatArray) -> FloatArray:
            return np.concatenate([[0.0], np.cumsum(a)])

        return cls(noise, w, y, prefix(w), prefix(w * t), prefix(w * y))


def _evaluate(fit: _Fit, lo: int, index: int, hi: int, settings: DetectorSettings,
              log_scale: bool) -> _Candidate:
    noise = fit.noise
    wa, wb = fit.sw[index] - fit.sw[lo], fit.sw[hi] - fit.sw[index]
    # Levels net of the common drift, each at its segment's own weighted time.
    before = (fit.swy[index] - fit.swy[lo]) / wa
    after = (fit.swy[hi] - fit.swy[index]) / wb
    gap = (fit.swt[hi] - fit.swt[index]) / wb - (fit.swt[index] - fit.swt[lo]) / wa
    se = math.sqrt(1 / wa + 1 / wb + gap * gap * noise.slope_var)
    dof = noise.dof
    z = (after - before) / se
    splits = hi - lo - 2 * settings.min_segment + 1
    p_one = _two_sided_t(z, dof)
    p = (max_over_splits_p(p_one, fit.sw, lo, hi, settings.min_segment) if settings.scan_correction
         else min(1.0, p_one * splits))
    q = float(special.stdtrit(dof, 0.975))
    # Report the two levels where they meet: at the change, drift included.
    before += noise.slope * index
    after += noise.slope * index
    if log_scale:
        before, after = math.exp(before), math.exp(after)
        rel = after / before - 1
        ci = (math.expm1(math.log1p(rel) - q * se), math.expm1(math.log1p(rel) + q * se))
    else:
        rel = _relative(before, after)
        scale = abs(before) if before != 0 else 1.0
        ci = (rel - q * se / scale, rel + q * se / scale)
    passed = p <= settings.max_p_value and abs(rel) >= settings.min_relative_change
    inner = settings.min_inner_segment
    if passed and ((lo > 0 and index - lo < inner) or (hi < fit.w.size and hi - index < inner)):
        passed = False  # a segment between two changes, too short
    if passed and settings.rank_test:
        # Two short segments cannot reach a small rank-sum p-value at all (4 points against
        # 4: 2/70 when every one of them lies beyond every other): complete separation, the
        # smallest p-value there is, passes.
        a, b = fit.y[lo:index], fit.y[index:hi]
        p_rank = _rank_sum_p(a, b)
        passed = p_rank * splits <= settings.max_rank_p or p_rank <= _separated_p(a.size, b.size)
    trend_p = 0.0  # not needed unless the step passed the rest
    if passed and settings.drift_guard and hi - lo > 3:
        zt, jump_over_ramp = _step_against_trend(fit.y[lo:hi], fit.w[lo:hi], index - lo)
        trend_p = min(1.0, _two_sided_t(zt, dof) * splits)
        passed = (trend_p <= settings.max_step_given_trend_p
                  or jump_over_ramp >= settings.min_jump_over_ramp)
    return _Candidate(index, before, after, rel, ci[0], ci[1], p, trend_p, passed)


def _confirm(xc: FloatArray, base: FloatArray, cps: list[int], noise: _Noise,
             settings: DetectorSettings, log_scale: bool) -> tuple[list[int], list[_Candidate]]:
    """Hunter/Otava's merge step: drop the weakest failing candidate, re-test its
    neighbours on the merged segments, until every remaining candidate passes. Then each
    change moves to the split of its final segments where the step is largest (the search
    picked it among a few positions; between its final neighbours the best split can lie a
    point or two away), and the merge step runs again if that moved any."""
    n = xc.size
    cps = list(cps)
    m = settings.min_segment
    fit = _Fit.of(xc, base, noise)

    def evaluate(i: int) -> _Candidate:
        lo = cps[i - 1] if i > 0 else 0
        hi = cps[i + 1] if i + 1 < len(cps) else n
        return _evaluate(fit, lo, cps[i], hi, settings, log_scale)

    cands = [evaluate(i) for i in range(len(cps))]
    for refinements in range(4):
        while True:
            failing = [i for i, c in enumerate(cands) if not c.passed]
            if not failing:
                break
            worst = max(failing,
                        key=lambda i: (cands[i].p_value, -abs(cands[i].relative_change)))
            del cps[worst]
            del cands[worst]
            for i in (worst - 1, worst):
                if 0 <= i < len(cps):
                    cands[i] = evaluate(i)
        if refinements == 3:
            break
        moved = False
        for i in range(len(cps)):
            lo = cps[i - 1] if i > 0 else 0
            hi = cps[i + 1] if i + 1 < len(cps) else n
            best, _ = _best_split(fit.sw, fit.swy, lo, hi, m)
            if best != cps[i]:
                old, cps[i] = cps[i], best
                if evaluate(i).passed:
                    moved = True
                else:
                    cps[i] = old
        if not moved:
            break
        cands = [evaluate(i) for i in range(len(cps))]
    return cps, cands


def detect_change_points(
    values: Sequence[float] | FloatArray,
    *,
    higher_is_better: bool = True,
    ci_low: Sequence[float | None] | FloatArray | None = None,
    ci_high: Sequence[float | None] | FloatArray | None = None,
    settings: DetectorSettings = DEFAULT_SETTINGS,
) -> list[ChangePoint]:
    """Level shifts in `values`, oldest first; empty when the series is too short or flat.

    `ci_low`/`ci_high`: each point's 95% interval, aligned with `values` (both or neither;
    None inside them for a point without an interval of its own).
    A series shorter than 2 * min_segment has no room for a change on both sides.
    """
    settings.check()
    raw = as_series(values)
    bounds = _interval_bounds(raw, ci_low, ci_high)
    n = raw.size
    m = settings.min_segment
    if n < 2 * m or np.ptp(raw) == 0.0:
        return []
    # Speedups, latencies and throughputs are positive and their noise, drift and steps
    # multiplicative: on the log scale they add up, and a point's interval is symmetric
    # there (the product's is). Any other series is analysed as it is.
    log_scale = bool(np.all(raw > 0)) and (
        bounds is None or not bool(np.any(bounds[0] <= 0)))
    x = np.log(raw) if log_scale else raw
    s2 = moderated_variances(point_variances(raw, ci_low, ci_high, log_scale=log_scale),
                             settings.interval_prior_dof)
    with_intervals = bool(np.any(s2 > 0))
    if not with_intervals:
        settings = settings.without_intervals()
        m = settings.min_segment
        if n < 2 * m:
            return []
    tau = noise_scale(x, s2)
    if tau == 0.0 and not np.all(s2 > 0):
        tau = _mean_abs_difference_scale(x)  # points with no spread of their own
    floor = max(tau * tau, (1e-9 * float(np.max(np.abs(x)))) ** 2, 1e-300)
    # The intervals' level, as far as the differences contradict it, pooled with what the
    # intervals claim as a prior worth scale_prior_dof degrees of freedom.
    d0 = settings.scale_prior_dof
    phi0 = (d0 + (n - 1) * _interval_overstatement(x, s2)) / (d0 + n - 1)
    sd = np.sqrt(phi0 * s2 + floor)
    xc = _clipped(x, sd, settings.clip_sigmas)
    cps = _candidates(xc, 1.0 / (sd * sd), m, settings.penalty_factor * math.log(n))
    if not cps:
        return []
    base = phi0 * s2 + floor
    own_share = float(np.mean(s2 / base))
    # The noise's dispersion from the residuals around the search's segmentation, which has
    # every candidate: around fewer segments a change not (yet) confirmed would count as
    # scatter, and the next candidate would be judged against it (a 3% step missed makes the
    # 2% step beside it look like noise). Over-segmenting costs degrees of freedom, counted.
    # The autocorrelation is the exception: cutting a wandering series into candidate
    # segments hides it, so where candidates fail it is re-estimated on the segments left,
    # and the larger inflation kept.
    noise = _noise_given(xc, base, cps, settings, own_share)
    cands: list[_Candidate] = []
    for _ in range(10):
        kept, cands = _confirm(xc, base, cps, noise, settings, log_scale)
        if kept == cps or not kept:
            break
        cps = kept
        again = _noise_given(xc, base, cps, settings, own_share)
        noise = dataclasses.replace(noise, inflation=max(noise.inflation, again.inflation),
                                    dof=min(noise.dof, again.dof))
    test = TEST_WITH_INTERVALS if with_intervals else TEST_SCATTER_ONLY
    out = []
    for c in cands:
        worse = c.relative_change < 0 if higher_is_better else c.relative_change > 0
        out.append(
            ChangePoint(
                index=c.index,
                direction="regression" if worse else "improvement",
                before=c.before,
                after=c.after,
                relative_change=c.relative_change,
                p_value=c.p_value,
                ci_low=c.ci_low,
                ci_high=c.ci_high,
                test=test,
            )
        )
    return out
