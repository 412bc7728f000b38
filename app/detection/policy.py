"""What a project asks of detection: the baseline to compare with, the thresholds, and
whether a suspected regression is confirmed by a re-measure before its alert opens.

A plain model, stored as JSON on the project (`projects.detection`) and shown by the API as
it is; the API's shapes (app.schemas), the store's policy service (app.services.policy),
detection (app.services.detection) and confirmation (app.services.confirmation) all read
this one class, so it lives here, below all of them.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.detection.verdict_types import DEFAULT_THRESHOLD, BaselineKind

_DIGEST = re.compile(r"@[0-9a-f]{12}\Z")  # benchmarks.model_ref: label "@" 12 hex digits


def _without_digest(series_key: str) -> str:
    model, sep, rest = series_key.partition("/")
    return _DIGEST.sub("", model) + sep + rest


class DetectionPolicy(BaseModel):
    """A project's detection settings, stored as JSON on the project (NULL: these defaults)."""

    model_config = ConfigDict(extra="forbid")

    baseline: BaselineKind = "previous"
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, lt=1)
    window: int = Field(default=10, ge=1, le=1000)
    pinned_run_id: int | None = None
    # Per-series overrides of `threshold`: a series that is noisier (or more critical) than
    # the rest gets its own bar without loosening (or tightening) every other series.
    series_thresholds: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=300)],
        Annotated[float, Field(ge=0, lt=1)],
    ] = Field(default_factory=dict, max_length=1000)

    def threshold_for(self, series_key: str) -> float:
        """The series' own threshold if it has one, else the project's.

        An own model's key carries its architecture's digest (`pkg.nets:build@2dbc3e64bf12/
        ...`), so a changed model starts a new series; a threshold set for the model still
        applies to it, whether it was set with an earlier digest or with none."""
        if series_key in self.series_thresholds:
            return self.series_thresholds[series_key]
        plain = _without_digest(series_key)
        matches = [v for k, v in self.series_thresholds.items() if _without_digest(k) == plain]
        return matches[-1] if matches else self.threshold
    # Confirm before alarming (app.services.confirmation): a triggered run's candidate
    # speed regression is re-measured, candidate and baseline environments alternating in
    # `confirm_processes` child processes each, before its alert opens.
    confirm: bool = True
    # 3: a multi-process interval uses the t quantile (12.7 for 2 processes, 4.3 for 3).
    confirm_processes: int = Field(default=3, ge=2, le=16)
