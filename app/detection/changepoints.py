"""Change points in one series of speedups (or any positive metric): where the level moved.

Method, and why each part is there (docs/detection.md has the measured comparison):

1. Noise scale from first differences: sigma = MAD(diff(x)) * 1.4826 / sqrt(2). A step or a
   slow drift moves only one difference or all of them by a hair, so this measures the
   point-to-point noise without being inflated by the very changes we look for.
2. Robust clipping: each value is pulled to within `clip_sigmas` * sigma of a centred running
   median (window 5). One wild sample cannot buy a segment of its own in the L2 search, while
   a real step survives, because the running median follows a step within two points.
3. Search: the exact minimiser of the penalised L2 cost (the objective PELT solves), with a
   minimum segment length and a penalty of `penalty_factor * sigma^2 * log(n)` per change:
   the penalty is calibrated to this series' measured noise, so a quiet series can show a
   small step and a noisy one needs a larger one before it is considered at all.
4. Confirmation of every candidate, each against its neighbours' segments (the merge step
   of Hunter/Otava, with different tests): a Mann-Whitney U test between the two segments
   (rank-based, so heavy tails, outliers and two-mode noise do not fake or hide a shift),
   a minimum relative effect between segment medians (tiny real shifts are not worth an
   alarm), and a drift guard: in a least-squares fit of level + linear trend + step on the
   two segments the step must be significant by itself. A slow drift is explained by the
   trend and is not a change point; a step on top of a drift still is. Candidates that fail
   are removed weakest first and their neighbours re-tested on the merged segments.

Pure functions on plain numbers: no service imports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy import stats

Direction = Literal["regression", "improvement"]
FloatArray = npt.NDArray[np.float64]

# MAD -> standard deviation for Gaussian noise.
_MAD_TO_SD = 1.4826


class SeriesError(ValueError):
    """A series that cannot be analysed (NaN, infinity, wrong shape); the message says which."""


@dataclass(frozen=True)
class DetectorSettings:
    """Knobs of the detector. Defaults were tuned on corpus seed 1 (see docs/detection.md)."""

    min_segment: int = 4
    """Fewest points on each side of a change: one or two outliers are never a change."""
    min_relative_change: float = 0.02
    """Smallest |after/before - 1| reported; smaller real shifts are not worth an alarm."""
    max_p_value: float = 0.001
    """Mann-Whitney p-value a change must reach."""
    penalty_factor: float = 3.0
    """Penalty per change in units of sigma^2 * log(n)."""
    clip_sigmas: float = 3.0
    drift_guard: bool = True
    max_step_given_trend_p: float = 0.01
    """Drift guard: p-value the step must reach on top of a linear trend (max-t corrected)."""

    def check(self) -> DetectorSettings:
        if self.min_segment < 2:
            raise SeriesError(f"min_segment: {self.min_segment} must be at least 2")
        if not 0 <= self.min_relative_change < 1:
            raise SeriesError(f"min_relative_change: {self.min_relative_change} not in [0, 1)")
        for name in ("max_p_value", "max_step_given_trend_p"):
            p = getattr(self, name)
            if not 0 < p <= 1:
                raise SeriesError(f"{name}: {p} not in (0, 1]")
        if self.penalty_factor <= 0 or self.clip_sigmas <= 0:
            raise SeriesError("penalty_factor and clip_sigmas must be positive")
        return self


DEFAULT_SETTINGS = DetectorSettings()


@dataclass(frozen=True)
class ChangePoint:
    """One level shift. `index` is the position of the first value after the change."""

    index: int
    direction: Direction
    before: float  # median of the segment before
    after: float  # median of the segment after
    relative_change: float  # after / before - 1
    p_value: float | None  # Mann-Whitney U, two-sided, between the two segments

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def as_series(values: Sequence[float] | FloatArray) -> FloatArray:
    """Values as a 1-D float array; refuse what no measurement produces (NaN, inf)."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SeriesError("values must be a list of numbers") from None
    if x.ndim != 1:
        raise SeriesError("values must be a flat list of numbers")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise SeriesError(f"values[{int(bad[0])}] is {x[bad[0]]!r}; NaN and infinity are refused")
    return x


def noise_scale(values: Sequence[float] | FloatArray) -> float:
    """Point-to-point noise (standard deviation) of a series, robust to steps and drift.

    Falls back to the mean absolute difference when more than half the differences are
    exactly zero (quantised or mostly constant series), and is 0 only for a constant series.
    """
    x = as_series(values)
    if x.size < 2:
        return 0.0
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d))))
    sigma = _MAD_TO_SD * mad / math.sqrt(2)
    if sigma == 0.0:
        # Gaussian relation E|d| = sqrt(2/pi) * sd(d), sd(d) = sqrt(2) * sigma.
        sigma = float(np.mean(np.abs(d))) * math.sqrt(math.pi / 2) / math.sqrt(2)
    return sigma


def _running_median(x: FloatArray, half: int = 2) -> FloatArray:
    n = x.size
    return np.asarray(
        [np.median(x[max(0, i - half): min(n, i + half + 1)]) for i in range(n)],
        dtype=np.float64,
    )


def _clipped(x: FloatArray, sigma: float, k: float) -> FloatArray:
    m = _running_median(x)
    return np.asarray(m + np.clip(x - m, -k * sigma, k * sigma), dtype=np.float64)


def _optimal_partition(z: FloatArray, penalty: float, min_segment: int) -> list[int]:
    """Exact minimiser of sum of segment L2 costs + penalty per change (PELT's objective).

    O(n^2) vectorised over the split point; fine for the few hundred points of a series.
    Returns the change indices (first index of each new segment), ascending.
    """
    n = z.size
    s1 = np.concatenate([[0.0], np.cumsum(z)])
    s2 = np.concatenate([[0.0], np.cumsum(z * z)])
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    last = np.zeros(n + 1, dtype=np.intp)
    for t in range(min_segment, n + 1):
        # a segment [s, t) needs t - s >= min_segment, and s == 0 or s >= min_segment
        s = np.arange(0, t - min_segment + 1)
        s = s[(s == 0) | (s >= min_segment)]
        s = s[np.isfinite(best[s])]
        length = t - s
        seg_sum = s1[t] - s1[s]
        cost = (s2[t] - s2[s]) - seg_sum * seg_sum / length
        total = best[s] + cost + penalty
        j = int(np.argmin(total))
        best[t] = total[j]
        last[t] = s[j]
    cps: list[int] = []
    t = n
    while t > 0:
        s_ = int(last[t])
        if s_ > 0:
            cps.append(s_)
        t = s_
    return sorted(cps)


# Monte Carlo draws for the null distribution of the largest step statistic (drift guard);
# above this segment length a Bonferroni bound over the split points is used instead.
_NULL_DRAWS = 2000
_NULL_MAX_LENGTH = 400


def _step_projections(length: int, min_segment: int) -> FloatArray:
    """Unit vectors u_s: the step at s with level and trend projected out (rows, one per s).

    For y = level + slope * t + step * 1[t >= s] + noise, the OLS t-statistic of the step
    is u_s.y / sqrt((|M y|^2 - (u_s.y)^2) / (length - 3)), M the residual maker of the line.
    """
    t = np.arange(length, dtype=np.float64)
    line = np.column_stack([np.ones(length), (t - t.mean()) / length])
    splits = np.arange(min_segment, length - min_segment + 1)
    steps = (t[None, :] >= splits[:, None]).astype(np.float64)
    coef, *_ = np.linalg.lstsq(line, steps.T, rcond=None)
    resid = steps - (line @ coef).T
    return resid / np.linalg.norm(resid, axis=1, keepdims=True)


def _line_residual_sq(y: FloatArray) -> FloatArray:
    """|M y|^2 per row of y (rows are series of equal length)."""
    length = y.shape[-1]
    t = np.arange(length, dtype=np.float64)
    tc = (t - t.mean()) / np.linalg.norm(t - t.mean())
    yc = y - y.mean(axis=-1, keepdims=True)
    return np.sum(yc * yc, axis=-1) - (yc @ tc) ** 2


def _t_stats(u: FloatArray, y: FloatArray) -> FloatArray:
    a = y @ u.T
    q = _line_residual_sq(y)
    rss = np.maximum(q[..., None] - a * a, 1e-300)
    return np.asarray(a / np.sqrt(rss / (u.shape[1] - 3)))


@lru_cache(maxsize=512)
def _null_max_t(length: int, min_segment: int) -> FloatArray:
    """Sorted largest |t| of the step over all split points, for trend + Gaussian noise.

    The statistic does not depend on the level, slope or noise scale, so one table per
    (length, min_segment) serves every series; the fixed seed keeps results reproducible.
    """
    u = _step_projections(length, min_segment)
    rng = np.random.default_rng(20240604)
    draws = rng.standard_normal((_NULL_DRAWS, length))
    return np.sort(np.max(np.abs(_t_stats(u, draws)), axis=1))


def _step_beyond_trend_p(y: FloatArray, split: int, min_segment: int) -> float:
    """p-value that y has a step at `split` on top of a linear trend (drift guard).

    The statistic is the step's t in y ~ level + trend + step; its null distribution is
    that of the LARGEST such t over every split point a search could have picked, because
    the split was chosen where the data jump most. A plain t-test at the chosen split would
    let one in a few dozen slow drifts through as a step.
    """
    length = y.size
    if length < 2 * min_segment or length <= 3:
        return 1.0
    u = _step_projections(length, min_segment)
    row = split - min_segment
    if not 0 <= row < u.shape[0]:
        return 1.0
    t_obs = abs(float(_t_stats(u[row:row + 1], y[None, :])[0, 0]))
    if length > _NULL_MAX_LENGTH:
        return min(1.0, float(2 * stats.t.sf(t_obs, length - 3)) * u.shape[0])
    null = _null_max_t(length, min_segment)
    exceed = null.size - int(np.searchsorted(null, t_obs, side="left"))
    return (1 + exceed) / (null.size + 1)


@dataclass
class _Candidate:
    index: int
    before: float
    after: float
    relative_change: float
    p_value: float
    trend_p: float
    passed: bool


def _relative(before: float, after: float) -> float:
    if before != 0.0:
        return after / before - 1.0
    return 0.0 if after == 0.0 else math.copysign(1.0, after)


def _evaluate(
    x: FloatArray, xc: FloatArray, lo: int, index: int, hi: int, settings: DetectorSettings
) -> _Candidate:
    left, right = x[lo:index], x[index:hi]
    before, after = float(np.median(left)), float(np.median(right))
    rel = _relative(before, after)
    if np.ptp(x[lo:hi]) == 0.0:
        p = 1.0
    elif np.ptp(left) == 0.0 and np.ptp(right) == 0.0:
        # Two constant segments at different levels: as separated as ranks can be.
        p = float(stats.mannwhitneyu(left, right, alternative="two-sided", method="asymptotic")
                  .pvalue)
    else:
        p = float(stats.mannwhitneyu(left, right, alternative="two-sided").pvalue)
    trend_p = (
        _step_beyond_trend_p(xc[lo:hi], index - lo, settings.min_segment)
        if settings.drift_guard else 0.0
    )
    passed = (
        p <= settings.max_p_value
        and abs(rel) >= settings.min_relative_change
        and trend_p <= settings.max_step_given_trend_p
    )
    return _Candidate(index, before, after, rel, p, trend_p, passed)


def detect_change_points(
    values: Sequence[float] | FloatArray,
    *,
    higher_is_better: bool = True,
    settings: DetectorSettings = DEFAULT_SETTINGS,
) -> list[ChangePoint]:
    """Level shifts in `values`, oldest first; empty when the series is too short or flat.

    A series shorter than 2 * min_segment has no room for a change on both sides.
    """
    settings.check()
    x = as_series(values)
    n = x.size
    m = settings.min_segment
    if n < 2 * m or np.ptp(x) == 0.0:
        return []
    sigma = noise_scale(x)
    xc = _clipped(x, sigma, settings.clip_sigmas)
    z = np.asarray((xc - float(np.median(xc))) / sigma, dtype=np.float64)
    cps = _optimal_partition(z, settings.penalty_factor * math.log(n), m)
    if not cps:
        return []

    def bounds(i: int) -> tuple[int, int]:
        lo = cps[i - 1] if i > 0 else 0
        hi = cps[i + 1] if i + 1 < len(cps) else n
        return lo, hi

    cands = [_evaluate(x, xc, *_with_index(bounds(i), c), settings) for i, c in enumerate(cps)]
    # Merge step: drop the weakest failing candidate, re-test its neighbours on the merged
    # segments, repeat until every remaining candidate passes.
    while True:
        failing = [i for i, c in enumerate(cands) if not c.passed]
        if not failing:
            break
        worst = max(failing, key=lambda i: (cands[i].p_value, -abs(cands[i].relative_change)))
        del cps[worst]
        del cands[worst]
        for i in (worst - 1, worst):
            if 0 <= i < len(cps):
                cands[i] = _evaluate(x, xc, *_with_index(bounds(i), cps[i]), settings)
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
            )
        )
    return out


def _with_index(bounds: tuple[int, int], index: int) -> tuple[int, int, int]:
    return bounds[0], index, bounds[1]
