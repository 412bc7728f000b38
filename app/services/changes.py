"""Change points of a series' speedup history, each attributed to the run that shows it.

The search is app.detection.changepoints (the code behind `speedwatch detect`); this module
adds what a person needs to act on one: the first revision measured after the change (where
to look in the commit log), its date, the installed versions that differ between the
segment before and the segment after, and one sentence with all of it. The API
(`GET /api/v1/series/{key}/changes`) and the dashboard's series page both call
`attribute_changes`, so the page and the API never disagree about where a series moved.

Versions are compared on the points next to the change, a few on each side (as many as
the detector's minimum segment): the most common installed version of each package there,
ties going to the point nearest the change. Not the single pair of points across the change,
so one run on a stray environment does not name a package that did not move; not the whole
segments either, since a long segment spans several releases and its most common version
may be an old one.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.detection.changepoints import ChangePoint, detect_change_points
from app.detection.detector_settings import DEFAULT_SETTINGS, DetectorSettings, SeriesError
from app.models import Series
from app.services.series import Point, series_points

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionChange:
    package: str
    before: str | None  # None: not installed on that side
    after: str | None

    def __str__(self) -> str:
        return f"{self.package} {self.before or 'none'} -> {self.after or 'none'}"


@dataclass(frozen=True)
class AttributedChange:
    change: ChangePoint
    first_after: Point  # the first point measured after the change
    last_before: Point
    versions: tuple[VersionChange, ...]
    sentence: str


def _usual_versions(nearest_first: Sequence[Point]) -> dict[str, str | None]:
    """Each package's most common installed version (None: mostly absent); a tie goes to
    the version seen first, i.e. nearest the change."""
    packages = sorted({name for p in nearest_first for name in p.installed_versions})
    usual: dict[str, str | None] = {}
    for name in packages:
        counts = Counter(p.installed_versions.get(name) for p in nearest_first)
        usual[name] = counts.most_common(1)[0][0]
    return usual


def _version_changes(points: Sequence[Point], lo: int, index: int, hi: int,
                     near: int) -> tuple[VersionChange, ...]:
    before = points[max(lo, index - near):index][::-1]
    after = points[index:min(hi, index + near)]
    b, a = _usual_versions(before), _usual_versions(after)
    return tuple(VersionChange(name, b.get(name), a.get(name))
                 for name in sorted(set(b) | set(a)) if b.get(name) != a.get(name))


def _percent(relative: float) -> str:
    return f"{relative:+.1%}" if abs(relative) < 0.1 else f"{relative:+.0%}"


def change_sentence(change: ChangePoint, first_after: Point,
                    versions: Sequence[VersionChange]) -> str:
    """'speedup 2.61x -> 1.68x (-36%; 95% CI -38% to -34%) from revision v1.7 (2026-11-05);
    torch-tensorrt 2.6.0 -> 2.7.0'. No version named means the environment held: look at
    the code."""
    interval = ""
    if change.ci_low is not None and change.ci_high is not None:
        interval = (f"; 95% CI {_percent(change.ci_low)} to {_percent(change.ci_high)}")
    head = (f"speedup {change.before:.2f}x -> {change.after:.2f}x "
            f"({_percent(change.relative_change)}{interval}) from revision "
            f"{first_after.revision} ({first_after.created_at:%Y-%m-%d})")
    tail = "; ".join(str(v) for v in versions) or "no installed version changed"
    return f"{head}; {tail}"


def attribute_changes(
    points: Sequence[Point], *, settings: DetectorSettings = DEFAULT_SETTINGS
) -> list[AttributedChange]:
    """The change points of `points` (oldest first), oldest first, each attributed.

    Each point's stored 95% interval goes to the search: a series measured to +-0.1% per
    point shows a 2% step its scatter alone would hide. A point ingested without raw samples
    has only its sender's interval, so it counts as a point without one.
    """
    measured = [p.samples_per_side is not None for p in points]
    try:
        found = detect_change_points(
            [p.speedup for p in points], settings=settings,
            ci_low=[p.ci_low if m else None for p, m in zip(points, measured, strict=True)],
            ci_high=[p.ci_high if m else None for p, m in zip(points, measured, strict=True)])
    except SeriesError as exc:  # stored speedups are finite; a bad row must not break a page
        log.warning("change points not searched: %s", exc)
        return []
    out = []
    for i, change in enumerate(found):
        lo = found[i - 1].index if i > 0 else 0
        hi = found[i + 1].index if i + 1 < len(found) else len(points)
        versions = _version_changes(points, lo, change.index, hi, settings.min_segment)
        first_after = points[change.index]
        out.append(AttributedChange(change, first_after, points[change.index - 1], versions,
                                    change_sentence(change, first_after, versions)))
    return out


def series_changes(
    session: Session, series: Series, *, limit: int
) -> tuple[list[Point], list[AttributedChange]]:
    """The newest `limit` ok points of the series and their attributed change points. The
    search grows with the square of the points, hence the bound."""
    points = series_points(session, series, limit=limit)
    return points, attribute_changes(points)
