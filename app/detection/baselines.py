"""A project's baseline policy applied to a series' history: the previous result, a
pinned run, or the median of a window (one median rule, which the worker's decision
reference uses too)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.detection.verdict_types import Baseline, BaselineKind, HistoryPoint, VerdictError


def _usable(point: HistoryPoint) -> bool:
    return point.result.status == "ok" and point.result.speedup is not None


def previous_baseline(history: Sequence[HistoryPoint]) -> Baseline | None:
    """The latest usable result of the branch's history (oldest first), or None."""
    for point in reversed(history):
        if _usable(point):
            assert point.result.speedup is not None
            return Baseline("previous", f"the previous run on the branch ({point.revision})",
                            point.result.speedup.value, point.result)
    return None


def pinned_baseline(point: HistoryPoint) -> Baseline:
    """A run a person pinned as the reference; refused if it has no speedup."""
    if not _usable(point):
        raise VerdictError(f"pinned run {point.revision} has no usable speedup "
                           f"(status {point.result.status})")
    assert point.result.speedup is not None
    return Baseline("pinned", f"the pinned run ({point.revision})",
                    point.result.speedup.value, point.result)


def window_baseline(history: Sequence[HistoryPoint], window: int = 10) -> Baseline | None:
    """Median speedup of the last `window` usable results: steady against one lucky run."""
    if window < 1:
        raise VerdictError(f"window: {window} must be at least 1")
    values = [p.result.speedup.value for p in history if _usable(p) and p.result.speedup][-window:]
    if not values:
        return None
    return Baseline("window", f"the median of the last {len(values)} runs",
                    window_median(values))


def window_median(speedups: Sequence[float]) -> float:
    """The window policy's one rule: the median, the mean of the middle two for an even
    count (the default window is 10). The worker's decision reference uses it too, so a
    cell is measured against the number its verdict is judged against."""
    if not speedups:
        raise VerdictError("window: no speedups to take the median of")
    return float(np.median(speedups))


def select_baseline(
    kind: BaselineKind,
    history: Sequence[HistoryPoint],
    *,
    pinned: HistoryPoint | None = None,
    window: int = 10,
) -> Baseline | None:
    """The project's baseline policy applied to a series' history (oldest first)."""
    if kind == "previous":
        return previous_baseline(history)
    if kind == "pinned":
        if pinned is None:
            raise VerdictError("baseline policy 'pinned' needs a pinned run")
        return pinned_baseline(pinned)
    if kind == "window":
        return window_baseline(history, window)
    raise VerdictError(f"baseline policy {kind!r} is not previous, pinned or window")
