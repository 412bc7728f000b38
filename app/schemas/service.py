"""The service itself: health, regressions, tokens and a project's detection policy."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.detection.policy import DetectionPolicy
from app.schemas.common import PublicModel


class HealthPublic(BaseModel):
    """ok: every dependency answers; degraded: the broker does not (reads, uploads and
    triggers still work); unavailable: the database does not."""

    status: Literal["ok", "degraded", "unavailable"]
    database: str
    broker: str


class LivePublic(BaseModel):
    status: Literal["ok"]


class RegressionPublic(BaseModel):
    """A regression of one series: what dropped, against what, and where it stands."""

    id: int
    project: str
    series_key: str
    status: Literal["open", "acknowledged", "resolved"]
    opened_by_run_id: int
    opened_by_result_id: int
    baseline_result_id: int | None
    baseline_kind: Literal["previous", "pinned", "window"]
    baseline_description: str
    baseline_speedup: float | None
    threshold: float
    magnitude: float | None = Field(description="new speedup / baseline speedup - 1")
    evidence: str = Field(description="what changed between baseline and new result")
    reasons: list[str]
    resolved_by_result_id: int | None
    acknowledged_by: str | None
    created_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None


class RegressionListPublic(BaseModel):
    items: list[RegressionPublic]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page")


class TokenPublic(PublicModel):
    """A token's record; its value is never part of it (only its hash is stored)."""

    id: int
    name: str
    scopes: list[str]
    projects: list[str] | None = Field(
        description="the projects it is limited to; null: every project")
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreatedPublic(TokenPublic):
    token: str = Field(description="the bearer token; shown this once, store it now")


class TokenListPublic(BaseModel):
    items: list[TokenPublic]


class DetectionPolicyPublic(BaseModel):
    project: str
    policy: DetectionPolicy
    stored: bool = Field(description="false: the project has no policy of its own and the "
                                     "defaults apply")
