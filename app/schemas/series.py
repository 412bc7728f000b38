"""Series, their points, comparisons across series and change points, as the API returns
them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class PointPublic(BaseModel):
    result_id: int
    run_id: int
    revision: str
    branch: str | None
    created_at: datetime
    speedup: float
    ci_low: float
    ci_high: float
    baseline_median_ms: float | None
    candidate_median_ms: float | None
    accuracy_passed: bool | None
    installed_versions: dict[str, str]


class SeriesPublic(BaseModel):
    """One project's history of one key: the key may exist in other projects too."""

    key: str
    project: str
    model: str
    backend: str
    weights: str
    precision: str
    batch_size: int
    shape_mode: str
    device_class: str
    threads: int | None = Field(description="CPU threads; null: the library's default")
    timing_mode: Literal["graphs", "nographs"] = Field(
        description="graphs: both sides timed as CUDA-graph replays")
    options: str = Field(description="backend options that change what is measured "
                                     "(the key's last segment); empty: none")
    latest: PointPublic | None


class SeriesListPublic(BaseModel):
    items: list[SeriesPublic]
    next_cursor: str | None


class SeriesPointsPublic(BaseModel):
    series: SeriesPublic
    points: list[PointPublic] = Field(description="oldest first")


class SpeedupPublic(BaseModel):
    result_id: int
    speedup: float
    ci_low: float
    ci_high: float


class CompareRowPublic(BaseModel):
    series_key: str
    base: SpeedupPublic
    head: SpeedupPublic
    change: float | None = Field(description="head speedup / base speedup - 1; null when the "
                                 "ratio is no finite number")
    ci_overlap: bool = Field(description="true: the two CIs overlap, the change may be noise")


class ComparePublic(BaseModel):
    base_run_id: int
    head_run_id: int
    series: list[CompareRowPublic]
    only_in_base: list[str]
    only_in_head: list[str]


class VersionChangePublic(BaseModel):
    package: str
    before: str | None = Field(description="most common version in the segment before; "
                                           "null: not installed")
    after: str | None = Field(description="most common version in the segment after")


class ChangePublic(BaseModel):
    direction: Literal["regression", "improvement"]
    before: float = Field(description="speedup level of the segment before, at the change "
                                      "(weighted by each point's precision, outliers clipped)")
    after: float = Field(description="speedup level of the segment after, at the change")
    relative_change: float = Field(description="after / before - 1")
    relative_change_ci_low: float | None = Field(
        description="95% interval of relative_change, low end")
    relative_change_ci_high: float | None = Field(
        description="95% interval of relative_change, high end")
    p_value: float | None = Field(description="the step test's p-value times the split points "
                                              "searched (docs/detection.md)")
    test: str = Field(description="the test that confirmed the change: with the points' "
                                  "intervals, or the series' scatter alone")
    revision: str = Field(description="the first revision measured after the change")
    run_id: int
    result_id: int
    created_at: datetime = Field(description="when that first result after was stored")
    previous_revision: str = Field(description="the last revision measured before it")
    versions: list[VersionChangePublic] = Field(
        description="installed versions that differ between the two segments")
    sentence: str


class SeriesChangesPublic(BaseModel):
    series_key: str
    project: str
    searched_points: int = Field(description="the newest ok points searched (at most limit)")
    searched_from: datetime | None = Field(description="the oldest searched point's date")
    changes: list[ChangePublic] = Field(description="oldest first")
