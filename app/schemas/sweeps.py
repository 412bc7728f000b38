"""Sweeps and bisects, as the API returns them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.schemas.runs import ProgressPublic


class SweepCellPublic(BaseModel):
    series_key: str
    weights: str
    status: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    error: str | None = Field(description="why the cell has no speedup")


class SweepRunPublic(BaseModel):
    """One version's run."""

    version: str = Field(description="the swept package's version in this run")
    run_id: int
    pins: list[str]
    status: Literal["queued", "running", "done", "failed"]
    verdict: Literal["pass", "regression", "inconclusive", "error"] | None
    installed: dict[str, str] = Field(description="versions the worker found installed")
    cells: list[SweepCellPublic]


class SweepChangePublic(BaseModel):
    """A change of speedup between two consecutive measured releases beyond the CIs and
    the threshold."""

    weights: str
    before: str
    after: str
    change: float = Field(description="after / before speedup - 1")
    change_low: float
    change_high: float
    direction: Literal["regression", "improvement"]


class BisectStepPublic(BaseModel):
    n: int
    role: Literal["good", "bad", "probe", "bisect"] = Field(
        description="good/bad: the two environments; probe: one package alone at its bad "
        "version; bisect: a release in between")
    package: str | None
    version: str | None
    pins: list[str]
    run_id: int | None
    status: str = Field(description="the run's status")
    outcome: Literal["good", "bad", "inconclusive", "failed"] | None = Field(
        description="null while measuring")
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    change: float | None = Field(default=None, description="against the good environment")
    change_low: float | None = None
    change_high: float | None = None
    sentence: str | None = None


class SweepPublic(BaseModel):
    id: int
    project: str
    kind: Literal["sweep", "bisect"]
    status: Literal["running", "done", "cancelled", "failed"]
    package: str
    from_version: str | None
    to_version: str | None
    pre: bool
    holds: list[str]
    versions: list[str] = Field(description="sweep: the releases measured, oldest first")
    max_runs: int = Field(description="versions (sweep) or steps (bisect) at most")
    regression_id: int | None
    outcome: str | None = Field(description="done: what it found; a bisect's answer")
    progress: ProgressPublic = Field(description="its runs by status")
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None


class SweepDetailPublic(SweepPublic):
    runs: list[SweepRunPublic] = Field(description="sweep: one per version, oldest first")
    changes: list[SweepChangePublic] = Field(
        description="sweep: consecutive releases whose speedups differ beyond the CIs and "
        "the threshold")
    steps: list[BisectStepPublic] = Field(description="bisect: its steps in order")
    warning: str | None = Field(default=None, description="set on creation when the cells "
                                "could not be handed to the executor yet")


class SweepListPublic(BaseModel):
    items: list[SweepPublic]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page")
