"""API shapes: request bodies (strict: unknown fields are refused) and `...Public` responses.

Kept apart from the ORM so that what the API promises changes only on purpose: every
response is built from one of these classes, never from a storage object directly.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from app.detection.policy import DetectionPolicy
from benchmarks import model_ref
from benchmarks.build import Builds
from benchmarks.result_schema import DOCUMENT_EXAMPLE, BenchResultDocument
from benchmarks.spec import (
    ALL_OPT_LEVELS,
    BACKENDS,
    PRECISIONS,
    SHAPE_MODES,
    WEIGHTS,
    CompileCache,
)


class StrictModel(BaseModel):
    """A request body: unknown fields refused, and every value of its JSON type (strict):
    "0.5" or true is no number, "yes", "true" or 1 no boolean, "3" no integer. Coercing
    them let a typo pass as a value nobody sent (a string "false" read as true)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class PublicModel(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def _one_of(allowed: tuple[str, ...]) -> AfterValidator:
    """Restrict a string to `allowed`, with a message that lists them."""

    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return value

    return AfterValidator(check)


def _enum(allowed: tuple[str, ...]) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "enum": list(allowed)})


def _model_reference(value: str) -> str:
    """A model by a form the API accepts (benchmarks.model_ref): syntax only, here; whether
    a factory's package may be imported is the server's setting (expand_matrix), whether
    it imports is only known to the worker that measures it (a skipped cell says why)."""
    try:
        model_ref.parse(value)
    except model_ref.ModelRefError as exc:
        raise ValueError(str(exc)) from None
    return value


ModelName = Annotated[
    str, AfterValidator(_model_reference),
    WithJsonSchema({
        "type": "string", "maxLength": model_ref.MAX_REFERENCE,
        "pattern": model_ref.API_PATTERN,
        "description": f"{model_ref.FORMS_HELP}: a factory's package must be one the server "
                       "lists (SPEEDWATCH_MODEL_PACKAGES); a file is relative to the worker's "
                       "model path (SPEEDWATCH_MODEL_PATH); nothing is downloaded",
        "examples": ["resnet50", "mypkg.nets:build", "torchvision:resnet18",
                     "file:nets/small.pt2"]})]
BackendName = Annotated[str, _one_of(BACKENDS), _enum(BACKENDS)]
WeightsName = Annotated[str, _one_of(WEIGHTS), _enum(WEIGHTS)]
PrecisionName = Annotated[str, _one_of(PRECISIONS), _enum(PRECISIONS)]
ShapeModeName = Annotated[str, _one_of(SHAPE_MODES), _enum(SHAPE_MODES)]
OptLevelName = Annotated[str, _one_of(ALL_OPT_LEVELS), _enum(ALL_OPT_LEVELS)]

# Ids are PostgreSQL `integer`s: a larger number in a path or cursor is a 422, not a 500.
ID_MAX = 2**31 - 1

# What a label may not hold: C0/C1 controls, and characters that make it display as
# something else (zero-width, bidi embeddings/overrides/isolates, line separators, BOM).
LABEL_FORBIDDEN = (r"\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                   r"\u2060-\u2069\ufeff")
_LABEL_FORBIDDEN_RE = re.compile(f"[{LABEL_FORBIDDEN}]")


def _plain_label(value: str) -> str:
    bad = _LABEL_FORBIDDEN_RE.search(value)
    if bad:
        raise ValueError(f"must not contain control, zero-width or bidi-override characters "
                         f"(U+{ord(bad.group()):04X} at position {bad.start()})")
    return value


Label = Annotated[str, Field(min_length=1, max_length=200,
                             json_schema_extra={"pattern": f"^[^{LABEL_FORBIDDEN}]+$"}),
                  AfterValidator(_plain_label)]
# Also checked by app.services.tokens for the projects a token is limited to (the CLI
# creates tokens without going through these models).
PROJECT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
PROJECT_NAME_MAX = 100
ProjectName = Annotated[
    str, Field(min_length=1, max_length=PROJECT_NAME_MAX, pattern=PROJECT_NAME_PATTERN)
]


# ---- requests -----------------------------------------------------------------------------

class EnvironmentIn(StrictModel):
    """Either version pins (`name==version`, names from the server's allowlist) or the name of
    an interpreter the workers are configured with."""

    pins: list[str] | None = Field(
        default=None, max_length=32, examples=[["onnxruntime==1.22.0"]]
    )
    interpreter: str | None = Field(
        default=None, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvironmentIn:
        if (self.pins is None) == (self.interpreter is None):
            raise ValueError("give exactly one of pins or interpreter")
        return self


class TimingIn(StrictModel):
    """Overrides of the default timing (benchmarks.spec.default_timing: adaptive over
    processes; CUDA graphs on a GPU); omitted fields keep the defaults."""

    warmup_iters: int | None = Field(default=None, ge=0, le=10_000)
    warmup_seconds: float | None = Field(default=None, ge=0, le=600)
    rounds: int | None = Field(default=None, ge=1, le=100_000)
    iters_per_round: int | None = Field(default=None, ge=1, le=10_000)
    max_seconds: float | None = Field(
        default=None, gt=0, le=3_600, description="timing seconds per process")
    min_rounds: int | None = Field(default=None, ge=1, le=1_000)
    cuda_graphs: bool | None = Field(
        default=None, description="GPU: time CUDA-graph replays (default true); a capture "
        "that fails falls back to plain launches, recorded in the result")
    processes: int | None = Field(
        default=None, ge=1, le=16, description="processes measured at least (default 3)")
    max_processes: int | None = Field(
        default=None, ge=1, le=32, description="adaptive: processes are added until the "
        "comparison with the baseline is decided, up to this many")
    budget_seconds: float | None = Field(
        default=None, ge=0, le=3_600, description="adaptive: stop adding processes once "
        "their timing seconds reach this (0: no budget)")
    target_half_width: float | None = Field(
        default=None, ge=0, lt=0.5, description="adaptive: a decided comparison stops only "
        "once the speedup's CI half-width is at most this fraction too (default 0.003 on a "
        "GPU, 0.015 on the CPU; 0 = none)")
    compile_cache: CompileCache | None = Field(
        default=None, description="\"process\" (default): each process compiles afresh, so the "
        "interval covers what a new compile may choose; \"host\": processes share the "
        "worker's compile cache (runtime variance only: tighter, so fewer processes; blind to a "
        "compile landing elsewhere)")
    builds: Builds | None = Field(
        default=None, description="\"pinned\" (default): choices a compiler makes by timing "
        "(inductor's autotuning, cuDNN and ONNX Runtime algorithm search, TensorRT tactics) "
        "are made deterministically or once per host through a tuning cache, so a rebuild "
        "runs the same code (evidence.build_fingerprint says so); \"as-shipped\": each build "
        "times its own choices as a user's production build does, the interval covers the "
        "spread between builds (evidence.build.spread), and the series key says "
        "builds=as-shipped")
    max_host_load: float | None = Field(
        default=None, gt=0, le=4096, description="CPU cells: other processes' busy cores "
        "(CPU seconds per second) past which a unit is measured again, at most twice a "
        "cell, and a load that stays is recorded and named in the verdict (default 0.5)")
    bootstrap_resamples: int | None = Field(default=None, ge=100, le=100_000)
    seed: int | None = Field(default=None, ge=0)
    profile: bool | None = Field(
        default=None, description="profile each side in an untimed pass after the timing "
        "(default true): what GET /api/v1/results/{id}/profile serves and a regression's "
        "profile diff reads")


class MatrixIn(StrictModel):
    """The cross product of these lists is the run's cells (one benchmark each).

    Combinations that cannot exist (weights "refit" outside the TensorRT backends) are left
    out; a matrix with no valid combination, or more than the server's max_matrix_cells, is
    refused.
    """

    models: list[ModelName] = Field(min_length=1, max_length=16)
    backends: list[BackendName] = Field(min_length=1, max_length=16)
    weights: list[WeightsName] = Field(default=["constant"], min_length=1, max_length=8)
    precisions: list[PrecisionName] = Field(default=["fp32"], min_length=1, max_length=8)
    batch_sizes: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        default=[1], min_length=1, max_length=16
    )
    shape_modes: list[ShapeModeName] = Field(default=["static"], min_length=1, max_length=4)
    opt_levels: list[OptLevelName] = Field(
        default=["default"], min_length=1, max_length=8,
        description="Optimization levels, each backend's own: onnxruntime disabled, basic, "
        "extended, layout, all; inductor (torch.compile modes) max-autotune-no-cudagraphs, "
        "max-autotune, reduce-overhead; tensorrt and torch_tensorrt 0-5. A level a backend "
        "does not have is left out for it; \"default\" is each backend's own default. A "
        "non-default level is part of the series key (opt_level=...).")
    device: str = Field(
        default="cpu",
        max_length=64,
        description='"cpu", "cuda" (any GPU) or a GPU class the server routes (gpu_queues)',
    )
    image_size: int | None = Field(default=None, ge=32, le=1024)
    width: int | None = Field(default=None, ge=4, le=256)
    threads: int | None = Field(
        default=None, ge=1, le=256,
        description="CPU threads for both sides (torch intra-op and ONNX Runtime); default: "
                    "the library's. On a shared or small CPU host, 1 gives steadier timings.")
    sides: Literal["paired", "split"] | None = Field(
        default=None,
        description='"split": each side timed alone in processes of its own, processes of '
        'the two sides alternating (the CPU default: next to a running candidate, eager '
        'measured up to 29% slower); "paired": both sides in every process, rounds '
        'alternating (the GPU default). A change starts a new series.')
    timing: TimingIn | None = None


class RunCreate(StrictModel):
    project: ProjectName
    revision: Label = Field(description="commit or version string under test")
    branch: Label | None = None
    trigger: str = Field(default="api", max_length=32, pattern=r"^[A-Za-z0-9_.-]+$")
    environment: EnvironmentIn
    matrix: MatrixIn


class ResultIngest(StrictModel):
    """A result measured elsewhere: the BenchResult document plus where it belongs."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "project": "vision", "revision": "v1.0", "branch": "main",
        "environment": {"pins": ["onnxruntime==1.22.0"]}, "result": DOCUMENT_EXAMPLE}]})

    project: ProjectName
    revision: Label
    branch: Label | None = None
    environment: EnvironmentIn
    result: BenchResultDocument = Field(
        description="a benchmarks.result.BenchResult document (what `speedwatch bench "
        "--json` writes), checked whole before anything is stored")


PackageName = Annotated[str, Field(min_length=1, max_length=100,
                                   pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$",
                                   examples=["onnxruntime"])]
VersionText = Annotated[str, Field(min_length=1, max_length=64,
                                   pattern=r"^[0-9][0-9A-Za-z.+!-]*$", examples=["1.16.0"])]


class SweepCreate(StrictModel):
    """One run per released version of `package` from `from_version` to `to_version`
    (both included), as the package index the workers' pip is configured with lists them,
    oldest first; every run holds `holds` fixed and measures `matrix`."""

    project: ProjectName
    package: PackageName = Field(description="an allowlisted package (SPEEDWATCH_ENV_ALLOWLIST)")
    from_version: VersionText
    to_version: VersionText
    pre: bool = Field(default=False, description="include pre-releases and dev releases")
    holds: list[str] = Field(default_factory=list, max_length=31,
                             description="pins held fixed in every run (name==version)",
                             examples=[["numpy==1.26.4"]])
    max_versions: int | None = Field(
        default=None, ge=1, le=1000, description="refuse a range with more releases than "
        "this (default and upper bound: the server's sweep_max_versions)")
    matrix: MatrixIn


class BisectCreate(StrictModel):
    """Find the first release that made a series slower: either a confirmed regression
    (`regression_id`: its baseline result's environment is good, the result that opened it
    bad) or two environments named here (`good`, `bad` pins and a one-cell `matrix`)."""

    project: ProjectName
    regression_id: int | None = Field(default=None, ge=1, le=ID_MAX)
    good: list[str] | None = Field(default=None, max_length=32,
                                   examples=[["onnxruntime==1.16.0"]])
    bad: list[str] | None = Field(default=None, max_length=32,
                                  examples=[["onnxruntime==1.22.0"]])
    matrix: MatrixIn | None = Field(default=None, description="with good/bad: the one cell "
                                    "(model, backend, weights...) to bisect")
    packages: list[PackageName] | None = Field(
        default=None, max_length=32, description="bisect only these of the packages that "
        "differ (default: every allowlisted one that differs)")
    pre: bool = Field(default=False, description="include pre-releases in the search")
    max_steps: int | None = Field(
        default=None, ge=2, le=1000, description="runs at most, the two environments "
        "included (default and upper bound: the server's bisect_max_steps)")

    @model_validator(mode="after")
    def _one_source(self) -> BisectCreate:
        named = self.good is not None or self.bad is not None
        if (self.regression_id is None) == (not named):
            raise ValueError("give either regression_id, or good and bad")
        if named and (self.good is None or self.bad is None):
            raise ValueError("give both good and bad")
        if named and self.matrix is None:
            raise ValueError("matrix: required with good and bad")
        if self.regression_id is not None and self.matrix is not None:
            raise ValueError("matrix: a regression's bisect measures its own series")
        return self


# ---- responses ----------------------------------------------------------------------------

class FieldErrorPublic(BaseModel):
    field: str
    message: str


class ErrorPublic(BaseModel):
    detail: str
    errors: list[FieldErrorPublic] | None = None


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


class ResultIngestedPublic(BaseModel):
    result_id: int
    run_id: int
    cell_id: int
    series_key: str
    status: str
    created: bool


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


# ---- tokens (admin) -----------------------------------------------------------------------

class TokenCreate(StrictModel):
    scope: Literal["read", "ci", "admin"]
    name: str | None = Field(default=None, min_length=1, max_length=100,
                             pattern=r"^[^\x00-\x1f\x7f]+$")
    projects: list[ProjectName] | None = Field(
        default=None, min_length=1, max_length=100,
        description="limit the token to these projects (they need not exist yet: a project "
                    "is created by its first run); left out: every project")


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


# ---- detection policy (per project) -------------------------------------------------------

class DetectionPolicyPublic(BaseModel):
    project: str
    policy: DetectionPolicy
    stored: bool = Field(description="false: the project has no policy of its own and the "
                                     "defaults apply")


# ---- change points (per series) -----------------------------------------------------------

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


# ---- sweeps and bisects -------------------------------------------------------------------

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
