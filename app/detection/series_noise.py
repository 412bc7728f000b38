"""How noisy a series is: each point's own variance from its interval, moderated toward
the series' scatter, and the scatter robust to steps and outliers (the scale a change is
judged against). Also the checks on a series' input."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view
from scipy import optimize, special, stats

from app.detection.detector_settings import DetectorSettings, SeriesError

FloatArray = npt.NDArray[np.float64]


# A 95% interval's half-width over the standard error it stands for.
_Z95 = float(stats.norm.ppf(0.975))


# Median of chi-square with one degree of freedom: d^2 / var(d) has it for Gaussian d.
_CHI2_1_MEDIAN = float(stats.chi2.ppf(0.5, 1))


# Highest lag-1 autocorrelation believed: beyond it a segment's mean is not estimable.
_MAX_RHO = 0.9


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
