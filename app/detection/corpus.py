"""A seeded, labelled corpus of speedup series, and the scoring of detections against it.

What the corpus holds (docs/detection.md lists it with the results):

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
- Drift is NOT a change: its label holds only the steps (if any). A detector that reports
  the drift as a level shift scores a false positive. The level a drift reaches is gradual
  and has no first revision to blame; Speedwatch reports such trends elsewhere (trend
  charts), not as a regression opened against a revision.

Scoring: a detection is a true positive when it lies within `TOLERANCE` points of a
labelled change with the same direction; each label and detection is matched at most once,
nearest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

Direction = str  # "regression" | "improvement"

SHAPES = ("gaussian", "heavy", "outliers", "bimodal", "drift")
CV_BUCKETS = ((0.005, 0.01), (0.01, 0.02), (0.02, 0.05))
MAGNITUDE_BUCKETS = ((0.02, 0.05), (0.05, 0.10), (0.10, 0.30))
TOLERANCE = 3


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
    cv: float
    drift: float = 0.0  # total relative drift over the series (shape "drift" only)


def _unit_noise(rng: np.random.Generator, shape: str, n: int) -> np.ndarray:
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


def generate_series(rng: np.random.Generator, series_id: str) -> LabelledSeries:
    n = int(rng.integers(40, 81))
    base = float(rng.uniform(1.0, 3.0))
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
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
    values = level * (1 + cv * _unit_noise(rng, shape, n))
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


def generate_corpus(seed: int, size: int = 1500) -> list[LabelledSeries]:
    """`size` labelled series; the same seed always gives the same corpus."""
    rng = np.random.default_rng(seed)
    return [generate_series(rng, f"s{seed}-{i:05d}") for i in range(size)]


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
