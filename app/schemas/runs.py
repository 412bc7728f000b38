"""Runs, their cells and environments, and the workers that measure them, as the API
returns them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import PublicModel


class EnvironmentPublic(PublicModel):
    id: int
    pins: list[str]
    interpreter: str | None
    installed: dict[str, str]


class EnvironmentBuildPublic(BaseModel):
    """The last build of an environment's cached venv that a worker reported."""

    host: str | None = None
    seconds: float | None = Field(default=None, description="venv + pip install + checks")
    size_bytes: int | None = Field(default=None, description="the venv on disk")
    built_at: str | None = None
    venv_packages: dict[str, str] = Field(
        default_factory=dict, description="what pip installed into the venv: the pins and "
        "the companions they needed beyond the worker's own packages")


class EnvironmentDetailPublic(EnvironmentPublic):
    runs: int = Field(description="runs (of the projects you may read) that used it")
    projects: list[str] = Field(description="those runs' projects")
    build: EnvironmentBuildPublic | None = Field(
        description="null: no build reported yet")


class EnvironmentListPublic(BaseModel):
    items: list[EnvironmentDetailPublic]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page")


class ProgressPublic(BaseModel):
    total: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0


class GpuPublic(BaseModel):
    index: int
    name: str
    device_class: str
    memory_total_bytes: int | None = None
    utilization_pct: int | None = Field(default=None, description="at the last heartbeat")
    memory_used_bytes: int | None = None
    temperature_c: int | None = None
    processes: int | None = Field(default=None, description="compute processes on it")


class WorkerPublic(BaseModel):
    """A worker as it announced itself; `state` is alive (heartbeat within
    worker_lost_after), lost (silent: killed, host gone, store unreachable) or stopped (a
    clean shutdown)."""

    model_config = ConfigDict(from_attributes=True)

    name: str
    host: str
    pid: int | None
    kind: Literal["celery", "in-process"]
    state: Literal["alive", "lost", "stopped"]
    queues: list[str]
    interpreters: list[str]
    gpus: list[GpuPublic]
    concurrency: int
    version: str
    started_at: datetime | None
    last_heartbeat_at: datetime
    stopped_at: datetime | None


class QueuePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    alive_workers: int
    queued_cells: int
    running_cells: int


class WorkersPublic(BaseModel):
    heartbeat_seconds: float
    lost_after_seconds: float
    workers: list[WorkerPublic]
    queues: list[QueuePublic]


class CellSpecPublic(BaseModel):
    model: str
    backend: str
    weights: str
    precision: str
    batch_size: int
    shape_mode: str
    opt_level: str = Field(default="default",
                           description="the backend's optimization level (default: its own)")
    device: str
    image_size: int
    width: int
    threads: int | None = Field(default=None, description="CPU threads; null: the library's")
    sides: str = Field(default="paired", description='"paired" or "split" (each side alone)')
    cuda_graphs: bool = Field(default=True, description="GPU cells: CUDA-graph replays asked for")
    processes: int = Field(default=1, description="processes measured at least")
    max_processes: int = Field(default=0, description="adaptive: processes at most")
    budget_seconds: float = Field(default=0.0, description="adaptive: timing seconds at most")
    target_half_width: float = Field(
        default=0.0, description="adaptive: CI half-width a decided cell must reach too")
    compile_cache: str = Field(
        default="process", description='"process" (each process compiles afresh) or "host"')
    builds: str = Field(default="pinned", description='"pinned" or "as-shipped"')
    max_host_load: float = Field(
        default=0.5, description="CPU load guard: other processes' busy cores tolerated")


class ResultSummaryPublic(PublicModel):
    id: int
    status: str
    reason: str | None
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None = Field(
        default=None, description="processes-variance-components: the interval covers the "
        "variance between processes; paired-round-bootstrap: one process")
    baseline_median_ms: float | None
    candidate_median_ms: float | None
    accuracy_passed: bool | None
    evidence: dict[str, Any] = Field(
        default_factory=dict, description="fusion evidence, timing mode and fallback, "
        "adaptive measurement (processes, timing seconds, decision)")
    fingerprint: dict[str, Any] = Field(
        default_factory=dict, description="what it ran on: device, GPU, clocks and throttling "
        "at start and end, installed versions")


class ComparisonPublic(BaseModel):
    """This cell's speedup against its series' baseline: before, after, and the change."""

    baseline_speedup: float = Field(description="the baseline's speedup (before)")
    speedup: float = Field(description="this cell's speedup (after)")
    ratio: float = Field(description="after / before; 0.95 is a 5% drop")
    ci_low: float = Field(description="95% CI of the ratio, low end")
    ci_high: float


class CellJudgementPublic(BaseModel):
    verdict: Literal["pass", "regression", "improvement", "inconclusive", "error"] | None = None
    reasons: list[str] = Field(default_factory=list)
    suspect: bool = False
    confirming: bool = Field(default=False, description="a re-measure is under way")
    comparison: ComparisonPublic | None = Field(
        default=None, description="against the baseline; none for a series' first result")
    baseline_result_id: int | None = Field(
        default=None, description="the stored result it was judged against, when the "
        "baseline is one result (the run page diffs their evidence)")


class CellPublic(BaseModel):
    id: int
    series_key: str
    queue: str
    status: str
    attempts: int
    error: str | None
    spec: CellSpecPublic
    result: ResultSummaryPublic | None
    judgement: CellJudgementPublic | None = Field(
        default=None, description="this cell against its series' baseline, once judged")
    started_at: datetime | None
    finished_at: datetime | None


class RunPublic(BaseModel):
    id: int
    project: str
    kind: Literal["triggered", "ingest", "confirm", "sweep"] = Field(
        description="sweep: measured for a sweep or bisect (sweep_id); no point of its "
        "series")
    revision: str
    branch: str | None
    trigger: str
    status: Literal["queued", "running", "done", "failed"]
    verdict: Literal["pass", "regression", "inconclusive", "error"] | None = Field(
        description="pass; regression (a drop beyond the threshold, confirmed by re-measure "
        "where possible); inconclusive (a comparison not decided within the cells' timing "
        "budget: the reasons say which and why); error (a cell failed)")
    reasons: list[str] = Field(description="every cell's reasons, label first: not-ok cells "
                               "first, then the rest (no baseline, fallbacks, how long each "
                               "cell took to decide)")
    environment: EnvironmentPublic
    progress: ProgressPublic
    sweep_id: int | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDetailPublic(RunPublic):
    cells: list[CellPublic]


class RunSubmittedPublic(RunDetailPublic):
    created: bool = Field(description="false: an existing run was returned (idempotent retry)")
    warning: str | None = Field(
        default=None,
        description="set when the run was stored but its cells could not be handed to the "
        "executor (broker down); they stay queued and the reconciler sends them",
    )


class RunListPublic(BaseModel):
    items: list[RunPublic]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page")
