"""A stored result and its profiles (what got slower, kernel by kernel), as the API returns
them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class ResultIngestedPublic(BaseModel):
    result_id: int
    run_id: int
    cell_id: int
    series_key: str
    status: str
    created: bool


class ResultBatchIngestedPublic(BaseModel):
    """Each posted document's stored result, in the order posted."""

    results: list[ResultIngestedPublic]
    created: int = Field(description="documents stored by this request")
    existing: int = Field(description="documents that were stored already (a retry)")


class ResultPublic(BaseModel):
    """A stored result with where it belongs: what `speedwatch repro` rebuilds a cell from."""

    result_id: int
    run_id: int
    cell_id: int
    project: str
    revision: str
    branch: str | None
    series_key: str
    pins: list[str] = Field(description="the environment's requested pins")
    interpreter: str | None = Field(description="or the named interpreter it ran in")
    installed: dict[str, str] = Field(description="what the worker reported installed")
    created_at: datetime
    document: dict[str, Any] = Field(description="the result document (BenchResultDocument)")


class ProfileEntryPublic(BaseModel):
    name: str
    group: str = Field(description="operator type, or kernel family (numbering dropped)")
    calls: float = Field(description="per inference")
    us: float = Field(description="microseconds per inference")


class ProfilePublic(BaseModel):
    """One side's profile, taken in an untimed pass after the timing (benchmarks.profile)."""

    source: str = Field(description="torch.profiler, onnxruntime or tensorrt")
    what: str = Field(description="kernels (GPU), operators (CPU), nodes or layers")
    unit: str
    inferences: int
    total_us: float = Field(description="per inference, all rows")
    seconds: float | None = Field(default=None, description="what the profile pass took")
    entries: list[ProfileEntryPublic]


class ResultProfilePublic(BaseModel):
    result_id: int
    series_key: str
    sides: dict[str, ProfilePublic] = Field(description="baseline (eager), candidate")


class ProfileRowPublic(BaseModel):
    name: str
    change: Literal["appeared", "vanished", "slower", "faster"]
    base_us: float
    head_us: float
    delta_us: float = Field(description="microseconds per inference, head minus base")
    base_calls: float
    head_calls: float
    share: float | None = Field(description="of the whole profile's change")


class SideDiffPublic(BaseModel):
    matched_by: str = Field(description="name, group, or name and group (renamed rows)")
    source: str | None
    what: str | None
    base_total_us: float
    head_total_us: float
    change_us: float
    change: float | None = Field(description="relative to the base profile's total")
    explained: float | None = Field(description="share of the change the rows account for")
    rows: list[ProfileRowPublic]
    rows_left_out: int


class ProfileDiffPublic(BaseModel):
    """What got slower between two results of one model, side by side."""

    base_result_id: int
    head_result_id: int
    base_series_key: str
    head_series_key: str
    sides: dict[str, SideDiffPublic]
    unavailable: dict[str, str] = Field(description="sides without a diff, and why")
    largest: str | None = Field(description="the row that moved its side most, in words")
