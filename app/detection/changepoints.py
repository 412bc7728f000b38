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
from scipy import special

from app.detection.changepoint_search import _best_split, _candidates
from app.detection.changepoint_tests import (
    _rank_sum_p,
    _separated_p,
    _two_sided_t,
    max_over_splits_p,
)
from app.detection.detector_settings import DEFAULT_SETTINGS, DetectorSettings
from app.detection.series_noise import (
    FloatArray,
    _clipped,
    _interval_bounds,
    _interval_overstatement,
    _mean_abs_difference_scale,
    _Noise,
    _noise_given,
    as_series,
    moderated_variances,
    noise_scale,
    point_variances,
)

Direction = Literal["regression", "improvement"]


# What `ChangePoint.test` says; docs/detection.md describes both.
TEST_WITH_INTERVALS = ("step t-test weighted by each point's 95% interval and the series' "
                       "scatter; corrected for the maximum over the splits searched; "
                       "drift guard")


TEST_SCATTER_ONLY = ("step t-test on the series' scatter alone (no point has its own "
                     "uncertainty); corrected for the maximum over the splits searched; "
                     "drift guard; rank-sum check")


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
    return [_change_point(c, higher_is_better, test) for c in cands]


def _change_point(c: _Candidate, higher_is_better: bool, test: str) -> ChangePoint:
    """A confirmed candidate, named a regression or an improvement by the series' sense."""
    worse = c.relative_change < 0 if higher_is_better else c.relative_change > 0
    return ChangePoint(
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
