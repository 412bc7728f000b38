"""The verdict's vocabulary: what a cell and a run can be judged, the ratio estimate and
baseline they are judged with, and how a threshold is written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from benchmarks.result import BenchResult

Rounds = Sequence[Sequence[float]]


CellVerdictKind = Literal["pass", "regression", "improvement", "inconclusive", "error"]


RunVerdictKind = Literal["pass", "regression", "inconclusive", "error"]


BaselineKind = Literal["previous", "pinned", "window"]


DEFAULT_THRESHOLD = 0.03


class VerdictError(ValueError):
    """Samples or settings that admit no verdict; the message says which."""


@dataclass(frozen=True)
class RatioEstimate:
    """New speedup over baseline speedup, with its bootstrap confidence interval."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    new_speedup: float
    baseline_speedup: float


@dataclass(frozen=True)
class Baseline:
    """What a new cell is compared with, and words that say what it is."""

    kind: BaselineKind
    description: str  # e.g. "the previous run on the branch (rev 3f2a1c)"
    speedup: float
    result: BenchResult | None = None  # raw samples when the baseline is one run


@dataclass(frozen=True)
class CellVerdict:
    verdict: CellVerdictKind
    reasons: tuple[str, ...]
    ratio: RatioEstimate | None = None
    suspect: bool = False
    """Point estimate beyond the threshold, the interval not excluding no change: re-measure."""
    host_drift: bool = False
    """Same software as the baseline, yet a change beyond the threshold: the host's drift,
    an operations matter (the runner is named in the reasons), never the code's regression."""

    @property
    def ok(self) -> bool:
        return self.verdict in ("pass", "improvement")


@dataclass(frozen=True)
class RunVerdict:
    verdict: RunVerdictKind
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class HistoryPoint:
    """One earlier result of the series, oldest first in a history."""

    revision: str
    result: BenchResult


def signed_percent(x: float) -> str:
    return f"{x * 100:+.1f}%"


def percent(fraction: float) -> str:
    """3% for 0.03, 0.5% for 0.005: a threshold as set, never rounded to 0%."""
    return f"{fraction * 100:.3g}%"
