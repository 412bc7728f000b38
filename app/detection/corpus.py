"""Seeded, labelled corpora of speedup series, and the scoring of detections against them.

Two corpora (docs/detection.md lists both with the results):

`generate_corpus` (the widened corpus, with per-point confidence intervals):

- 85% of series have 40-80 points, 15% have 5-9 (a new series, or a rarely run cell);
  base level 1.0-3.0 (speedups), higher is better.
- Each point carries a 95% interval computed the way the product computes it
  (`benchmarks.stats.combine_processes`): k processes (3-8; most stop at 3), the interval's
  log half-width t(k-1) * s / sqrt(k) with s the processes' sample standard deviation. So an
  interval is itself noisy, and with 3 processes it is about twice as wide as the point's
  real standard error times 1.96. Two kinds of series: "gpu" (CUDA graphs; nominal
  half-width 0.05-0.5%) and "cpu" (2-5%).
- Run-to-run scatter that no single point's interval can show (other machine, other day,
  clock state): a coefficient of variation of 0 (the intervals explain the scatter) or
  0.1-1% (gpu) / 0.3-3% (cpu), log-uniform, in one of six shapes: gaussian; heavy (Student
  t, 3 degrees of freedom); outliers (4% of points off by 5-15 standard deviations of the
  point, 80% of them slow, half of those with an interval widened 3-10x as a throttled run
  shows); bimodal (each run lands in one of two modes, launch-bound timings); autocorrelated
  (AR(1), coefficient 0.3-0.8: consecutive runs share a machine's state); drift (a slow
  linear drift of 2-8% in total, NOT a change: see below). Heavy, bimodal and
  autocorrelated series always have some scatter.
- Steps: long series have 0 (35%), 1 (35%), 2 (18%) or 3 (12%) steps, at least 8 points
  apart and from either end; short series have none (45%) or one with at least 3 points on
  each side. Sizes 2, 3, 5, 10 or 20% (weights 25/25/20/15/15%), 60% of first steps down; a
  later step is a fix (opposite sign) half the time.

`generate_legacy_corpus` (the corpus of the first detection benchmark, kept so its figures
can be re-run; no intervals):

- Length 40-80 points, base level 1.0-3.0 (speedups), higher is better.
- 35% of series have no change, 45% one step, 20% two steps (the second at least 10 points
  after the first, half of them a recovery in the opposite direction: a regression and its fix).
- Steps of 2-30% of the level, down or up, drawn evenly from three buckets (2-5%, 5-10%,
  10-30%) and placed at least 10 points from either end, so each side has room to be seen.
- Multiplicative noise with a coefficient of variation drawn evenly from three buckets
  (0.5-1%, 1-2%, 2-5%) and one of five shapes:
  gaussian; heavy (Student t, 3 degrees of freedom, scaled to unit variance, clipped at
  15 sd so a speedup stays positive); outliers (gaussian plus, with probability 4% per point,
  an isolated excursion of 5-15 sd, 80% of them downward like a throttled run); bimodal (two
  modes at +-0.9 sd, as with two clock states); drift (gaussian plus a slow linear drift of
  2-8% in total over the series).

In both, drift is NOT a change: its label holds only the steps (if any). A detector that
reports the drift as a level shift scores a false positive. The level a drift reaches is
gradual and has no first revision to blame; Speedwatch reports such trends elsewhere (trend
charts), not as a regression opened against a revision.

Scoring: a detection is a true positive when it lies within `TOLERANCE` points of a
labelled change with the same direction; each label and detection is matched at most once,
nearest first.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

Direction = str  # "regression" | "improvement"

TOLERANCE = 3

# The widened corpus.
SHAPES = ("gaussian", "heavy", "outliers", "bimodal", "autocorrelated", "drift")
KINDS = ("gpu", "cpu")
HALF_WIDTHS = {"gpu": (0.0005, 0.005), "cpu": (0.02, 0.05)}
SCATTER_CVS = {"gpu": (0.001, 0.01), "cpu": (0.003, 0.03)}
STEP_SIZES = (0.02, 0.03, 0.05, 0.10, 0.20)
STEP_SIZE_WEIGHTS = (0.25, 0.25, 0.20, 0.15, 0.15)
_PROCESSES = {"gpu": (3, 3, 3, 3, 4, 5, 6, 8), "cpu": (3, 3, 3, 4, 5, 6)}
_NEEDS_SCATTER = ("heavy", "bimodal", "autocorrelated")

# The legacy corpus (the first benchmark's).
LEGACY_SHAPES = ("gaussian", "heavy", "outliers", "bimodal", "drift")
CV_BUCKETS = ((0.005, 0.01), (0.01, 0.02), (0.02, 0.05))
MAGNITUDE_BUCKETS = ((0.02, 0.05), (0.05, 0.10), (0.10, 0.30))


@dataclass(frozen=True)
class LabelledChange:
    index: int  # first value after the change
    magnitude: float  # signed relative change of the level, after / before - 1
    direction: Direction


@dataclass(frozen=True)
class LabelledSeries:
    id: str
    values: tuple[float, ...]
    higher_is_better: bool
    changes: tuple[LabelledChange, ...]
    shape: str
    cv: float  # legacy: the noise CV; widened: the run-to-run scatter CV beyond the intervals
    drift: float = 0.0  # total relative drift over the series (shape "drift" only)
    ci_low: tuple[float, ...] | None = None  # each point's 95% interval (widened corpus)
    ci_high: tuple[float, ...] | None = None
    kind: str = "none"  # "gpu" | "cpu" (widened corpus), "none" (legacy)
    half_width: float = 0.0  # nominal relative half-width of the points' intervals
    # widened corpus: each point's true noise standard deviation on the log scale (its own
    # measurement and the run-to-run scatter; an outlier's excursion not counted), which no
    # detector is given: scripts/detection_ceiling.py's oracle uses it
    point_sd: tuple[float, ...] | None = None

    def without_intervals(self) -> LabelledSeries:
        """The same series as an ingested one without samples would arrive."""
        return LabelledSeries(self.id, self.values, self.higher_is_better, self.changes,
                              self.shape, self.cv, self.drift, None, None, self.kind,
                              self.half_width, self.point_sd)


def _legacy_unit_noise(rng: np.random.Generator, shape: str, n: int) -> np.ndarray:
    """Zero-mean, unit-variance noise of the given shape."""
    if shape in ("gaussian", "drift"):
        return rng.standard_normal(n)
    if shape == "heavy":
        return np.clip(rng.standard_t(3, n) / np.sqrt(3.0), -15.0, 15.0)
    if shape == "outliers":
        e = rng.standard_normal(n)
        hit = rng.random(n) < 0.04
        size = rng.uniform(5.0, 15.0, n)
        sign = np.where(rng.random(n) < 0.8, -1.0, 1.0)
        return np.where(hit, sign * size, e)
    if shape == "bimodal":
        mode = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        return 0.9 * mode + np.sqrt(1 - 0.81) * rng.standard_normal(n)
    raise ValueError(f"unknown noise shape {shape!r}")


def _draw(rng: np.random.Generator, buckets: Sequence[tuple[float, float]]) -> float:
    lo, hi = buckets[int(rng.integers(len(buckets)))]
    return float(rng.uniform(lo, hi))


def generate_legacy_series(rng: np.random.Generator, series_id: str) -> LabelledSeries:
    n = int(rng.integers(40, 81))
    base = float(rng.uniform(1.0, 3.0))
    shape = LEGACY_SHAPES[int(rng.integers(len(LEGACY_SHAPES)))]
    cv = _draw(rng, CV_BUCKETS)
    u = rng.random()
    n_changes = 0 if u < 0.35 else (1 if u < 0.80 else 2)

    changes: list[LabelledChange] = []
    if n_changes == 1:
        idx = int(rng.integers(10, n - 10 + 1))
        mag = _draw(rng, MAGNITUDE_BUCKETS) * (1 if rng.random() < 0.5 else -1)
        changes.append(LabelledChange(idx, mag, ""))
    elif n_changes == 2:
        first = int(rng.integers(10, n - 20 + 1))
        second = int(rng.integers(first + 10, n - 10 + 1))
        m1 = _draw(rng, MAGNITUDE_BUCKETS) * (1 if rng.random() < 0.5 else -1)
        m2 = -np.sign(m1) * _draw(rng, MAGNITUDE_BUCKETS) if rng.random() < 0.5 else (
            _draw(rng, MAGNITUDE_BUCKETS) * (1 if rng.random() < 0.5 else -1))
        changes += [LabelledChange(first, m1, ""), LabelledChange(second, float(m2), "")]

    level = np.full(n, base)
    for c in changes:
        level[c.index:] *= 1 + c.magnitude
    drift = 0.0
    if shape == "drift":
        drift = float(rng.uniform(0.02, 0.08)) * (1 if rng.random() < 0.5 else -1)
        level *= 1 + drift * np.arange(n) / (n - 1)
    values = level * (1 + cv * _legacy_unit_noise(rng, shape, n))
    labelled = tuple(
        LabelledChange(c.index, c.magnitude, "improvement" if c.magnitude > 0 else "regression")
        for c in changes
    )
    return LabelledSeries(
        id=series_id,
        values=tuple(float(v) for v in values),
        higher_is_better=True,
        changes=labelled,
        shape=shape,
        cv=cv,
        drift=drift,
    )


def generate_legacy_corpus(seed: int, size: int = 1500) -> list[LabelledSeries]:
    """The first benchmark's `size` series; the same seed always gives the same corpus."""
    rng = np.random.default_rng(seed)
    return [generate_legacy_series(rng, f"s{seed}-{i:05d}") for i in range(size)]


def _scatter_noise(rng: np.random.Generator, shape: str, n: int) -> np.ndarray:
    """Zero-mean, unit-variance run-to-run noise of the given shape (outliers come apart)."""
    if shape in ("gaussian", "drift", "outliers"):
        return rng.standard_normal(n)
    if shape == "heavy":
        return np.clip(rng.standard_t(3, n) / np.sqrt(3.0), -15.0, 15.0)
    if shape == "bimodal":
        p = float(rng.uniform(0.2, 0.8))
        mode = np.where(rng.random(n) < p, 1.0, -1.0)
        mode = (mode - (2 * p - 1)) / (2 * np.sqrt(p * (1 - p)))
        return 0.9 * mode + np.sqrt(1 - 0.81) * rng.standard_normal(n)
    if shape == "autocorrelated":
        phi = float(rng.uniform(0.3, 0.8))
        e = rng.standard_normal(n) * np.sqrt(1 - phi * phi)
        out = np.empty(n)
        out[0] = rng.standard_normal()
        for i in range(1, n):
            out[i] = phi * out[i - 1] + e[i]
        return out
    raise ValueError(f"unknown noise shape {shape!r}")


def _step_size(rng: np.random.Generator) -> float:
    return float(rng.choice(STEP_SIZES, p=STEP_SIZE_WEIGHTS))


def _step_positions(rng: np.random.Generator, n: int, count: int, gap: int) -> list[int]:
    """`count` indices at least `gap` apart and from either end (rejection sampling)."""
    while True:
        idx = sorted(int(i) for i in rng.integers(gap, n - gap + 1, count))
        if all(b - a >= gap for a, b in itertools.pairwise(idx)):
            return idx


def generate_series(rng: np.random.Generator, series_id: str) -> LabelledSeries:
    """One series of the widened corpus (see the module docstring)."""
    kind = KINDS[int(rng.integers(len(KINDS)))]
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
    short = rng.random() < 0.15
    n = int(rng.integers(5, 10)) if short else int(rng.integers(40, 81))
    base = float(rng.uniform(1.0, 3.0))

    positions: list[int] = []
    if short:
        if n >= 6 and rng.random() >= 0.45:
            positions = [int(rng.integers(3, n - 3 + 1))]
    else:
        u = rng.random()
        count = 0 if u < 0.35 else 1 if u < 0.70 else 2 if u < 0.88 else 3
        positions = _step_positions(rng, n, count, 8) if count else []
    changes: list[LabelledChange] = []
    for j, idx in enumerate(positions):
        size = _step_size(rng)
        if j == 0:
            sign = -1.0 if rng.random() < 0.6 else 1.0
        elif rng.random() < 0.5:
            sign = -float(np.sign(changes[-1].magnitude))  # a fix of the previous step
        else:
            sign = -1.0 if rng.random() < 0.5 else 1.0
        mag = sign * size
        changes.append(LabelledChange(idx, mag, "improvement" if mag > 0 else "regression"))

    level = np.full(n, base)
    for c in changes:
        level[c.index:] *= 1 + c.magnitude
    drift = 0.0
    if shape == "drift":
        drift = float(rng.uniform(0.02, 0.08)) * (1 if rng.random() < 0.5 else -1)
        level *= 1 + drift * np.arange(n) / (n - 1)

    # Each point's own measurement: k processes, per-process log standard deviation sd,
    # the point off by N(0, sd^2 / k), its interval t(k-1) * s / sqrt(k) with s ~ sd * chi.
    half = float(np.exp(rng.uniform(*np.log(HALF_WIDTHS[kind]))))
    k = rng.choice(_PROCESSES[kind], n)
    t = stats.t.ppf(0.975, k - 1)
    sd = half * np.sqrt(k) / t * np.exp(0.25 * rng.standard_normal(n))
    s = sd * np.sqrt(rng.chisquare(k - 1) / (k - 1))
    own = sd / np.sqrt(k) * rng.standard_normal(n)
    log_half = t * s / np.sqrt(k)

    lo, hi = SCATTER_CVS[kind]
    scatter = 0.0
    if shape in _NEEDS_SCATTER or rng.random() >= 0.3:
        scatter = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    between = scatter * _scatter_noise(rng, shape, n)
    if shape == "outliers":
        hit = rng.random(n) < 0.04
        point_sd = np.sqrt(scatter**2 + (sd / np.sqrt(k)) ** 2)
        excursion = rng.uniform(5.0, 15.0, n) * point_sd
        slow = np.where(rng.random(n) < 0.8, -1.0, 1.0)
        between = np.where(hit, slow * excursion, between)
        shows = hit & (rng.random(n) < 0.5)
        log_half = np.where(shows, log_half * rng.uniform(3.0, 10.0, n), log_half)
    values = level * np.exp(own) * (1 + between)
    return LabelledSeries(
        id=series_id,
        values=tuple(float(v) for v in values),
        higher_is_better=True,
        changes=tuple(changes),
        shape=shape,
        cv=scatter,
        drift=drift,
        ci_low=tuple(float(v) for v in values * np.exp(-log_half)),
        ci_high=tuple(float(v) for v in values * np.exp(log_half)),
        kind=kind,
        half_width=half,
        point_sd=tuple(float(v) for v in np.sqrt(sd * sd / k + scatter * scatter)),
    )


def generate_corpus(seed: int, size: int = 1500) -> list[LabelledSeries]:
    """`size` series of the widened corpus; the same seed always gives the same corpus."""
    rng = np.random.default_rng(seed)
    return [generate_series(rng, f"w{seed}-{i:05d}") for i in range(size)]


@dataclass(frozen=True)
class Detection:
    index: int
    direction: Direction


@dataclass
class Match:
    """Matching of one series' detections to its labels."""

    matched: list[tuple[LabelledChange, Detection]] = field(default_factory=list)
    missed: list[LabelledChange] = field(default_factory=list)
    false: list[Detection] = field(default_factory=list)


def match(
    labels: Sequence[LabelledChange], detections: Sequence[Detection], tolerance: int = TOLERANCE
) -> Match:
    """One-to-one matching, nearest pairs first, same direction, within `tolerance` points."""
    pairs = sorted(
        (abs(d.index - lab.index), li, di)
        for li, lab in enumerate(labels)
        for di, d in enumerate(detections)
        if abs(d.index - lab.index) <= tolerance and d.direction == lab.direction
    )
    used_l: set[int] = set()
    used_d: set[int] = set()
    out = Match()
    for _, li, di in pairs:
        if li in used_l or di in used_d:
            continue
        used_l.add(li)
        used_d.add(di)
        out.matched.append((labels[li], detections[di]))
    out.missed = [lab for i, lab in enumerate(labels) if i not in used_l]
    out.false = [d for i, d in enumerate(detections) if i not in used_d]
    return out
