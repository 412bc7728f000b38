"""Request bodies: strict (unknown fields are refused), each field checked with an error
that names it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.schemas.common import (
    ID_MAX,
    BackendName,
    Label,
    ModelName,
    OptLevelName,
    PrecisionName,
    ProjectName,
    ShapeModeName,
    StrictModel,
    WeightsName,
)
from benchmarks.result_schema import DOCUMENT_EXAMPLE, BenchResultDocument
from benchmarks.timing_policy import split_refused
from benchmarks.timing_schema import optional_timing_field, timing_model


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


if TYPE_CHECKING:
    class TimingIn(StrictModel):
        """Overrides of the default timing (made from benchmarks.timing_policy.TimingPolicy)."""
else:
    TimingIn = timing_model(
        "TimingIn", StrictModel, lambda kind, _default, knob: optional_timing_field(kind, knob),
        module=__name__,
        doc="Overrides of the default timing (benchmarks.timing_policy.default_timing: "
            "adaptive\nover processes; CUDA graphs on a GPU); omitted fields keep the defaults.")


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
        'alternating (the GPU default, and the only design on a GPU: two processes on one '
        'GPU change each other\'s timing). A change starts a new series.')
    timing: TimingIn | None = None

    @field_validator("sides")
    @classmethod
    def _split_is_for_cpu(cls, sides: str | None, info: ValidationInfo) -> str | None:
        refused = split_refused(sides, str(info.data.get("device", "cpu")))
        if refused is not None:
            raise ValueError(refused)
        return sides


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


# documents in one batch upload: a CI job's matrix in one request (the body limit,
# SPEEDWATCH_MAX_BODY_BYTES, 2 MiB by default, holds about 150 CPU documents of 13 KB)
MAX_BATCH_RESULTS = 100


class ResultBatchIngest(StrictModel):
    """Results measured elsewhere, all of one project, revision and environment (a CI job's
    matrix): stored as if each were posted alone, for one request's cost."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "project": "vision", "revision": "v1.0", "branch": "main",
        "environment": {"pins": ["onnxruntime==1.22.0"]}, "results": [DOCUMENT_EXAMPLE]}]})

    project: ProjectName
    revision: Label
    branch: Label | None = None
    environment: EnvironmentIn
    results: list[BenchResultDocument] = Field(
        min_length=1, max_length=MAX_BATCH_RESULTS,
        description="BenchResult documents (what `speedwatch bench --json` writes), each "
        "checked whole before any is stored")


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


class TokenCreate(StrictModel):
    scope: Literal["read", "ci", "admin"]
    name: str | None = Field(default=None, min_length=1, max_length=100,
                             pattern=r"^[^\x00-\x1f\x7f]+$")
    projects: list[ProjectName] | None = Field(
        default=None, min_length=1, max_length=100,
        description="limit the token to these projects (they need not exist yet: a project "
                    "is created by its first run); left out: every project")
