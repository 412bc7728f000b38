"""The result document as a typed schema: what `BenchResult.from_dict` and the API accept.

One schema for every reader, so a document the worker reads back from a child process and
one a client posts are held to the same rules. It lives in the measurement core (which the
API may import, never the reverse) and is imported only by readers: the child process that
writes documents never loads pydantic, since it runs in environments that hold only torch
and the backend under test (see `benchmarks/__init__.py`).

What it settles before any reader looks inside:
- every known field has a type, and numbers are finite (no NaN, no infinity, no integer a
  float cannot hold) and within the range a measurement can produce;
- lists and strings are bounded, so a hostile document costs bounded time and memory;
- the parts of `evidence` and `fingerprint` that are genuinely open-ended (backend evidence,
  new keys) are typed as `BoundedJson`: JSON values nested at most `MAX_JSON_DEPTH` levels,
  with bounded lists, maps and strings. Known keys are typed, because the service reads
  them (kernel counts, timing mode, adaptive outcome, installed packages).

What it leaves to `BenchSpec.validate` and the store (`app.services.common`): whether the
spec names a model and backend that exist, and whether the series key is the one the spec
and fingerprint give. A failed result of an invalid spec is a real document (the runner
writes one, reason "invalid spec: ...") and must still read back, so the spec's fields are
typed here but their values are not judged.

Values are kept as sent where the schema allows it (documents are hashed to recognise a
retry): sub-documents are dumped with `exclude_unset`, so absent keys stay absent. Numbers
typed as floats come back as floats (an integer 3 becomes 3.0).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from benchmarks import text_safety
from benchmarks.build import Builds
from benchmarks.schema_version import RESULT_SCHEMA_VERSION
from benchmarks.spec import CompileCache, SpecError, parse_series_key

# ---- bounds -------------------------------------------------------------------------------
# Generous against what the product writes, tight against abuse. The API's body limit
# (2 MiB by default) keeps posted documents far smaller still; these bounds also hold for
# documents read from files and child processes.

# Rounds per side, over all processes: the default timing writes at most 2000 rounds per
# GPU process and 8 processes (16,000), 200 per CPU process and 6 processes.
MAX_ROUNDS = 1_000_000
# Samples in one round (`iters_per_round`; the API allows up to 10,000).
MAX_ROUND_SAMPLES = 100_000
# Samples of one side in all: a bound on memory whatever the shape of the rounds.
MAX_SAMPLES_PER_SIDE = 5_000_000
MAX_PROCESSES = 64  # evidence.processes entries (the API allows 32 processes)
# A speedup is the ratio of the document's own medians (benchmarks.runner and isolation write
# exactly that; 165 stored documents agree to the last digit): beyond this, it contradicts them.
SPEEDUP_TOLERANCE = 1e-6
MAX_NAME = 200  # identifiers: keys, package names, versions, methods
MAX_LINE = 1_000  # one line of description: platform, CPU and GPU names, hostnames
MAX_PATH = 4_096  # a filesystem path
MAX_TEXT = 10_000  # free text: reasons, error messages, strings in open-ended evidence
MAX_STDERR_TAIL = 16_384  # benchmarks.isolation keeps 4 KiB of a child's output
MAX_SERIES_KEY = 300  # the store's column
MAX_TIMESTAMP = 40  # ISO 8601; the store's column
MAX_OPEN_KEYS = 256  # keys of evidence, fingerprint, spec options and other open maps
MAX_DISTRIBUTIONS = 4_096  # installed distributions one environment's identity lists
MAX_JSON_DEPTH = 8  # nesting of an open-ended value (a scalar is depth 0)
MAX_JSON_ITEMS = 1_000  # elements of a list, or keys of a map, inside an open-ended value
INT64 = 2**63 - 1  # integers a reader in any language (and PostgreSQL's bigint) can hold
# log of a ratio's half-width: exp() of more overflows a float (the verdict takes expm1)
MAX_LOG_HALF_WIDTH = 700.0


# A document `speedwatch bench --isolate --json` wrote (a tiny ResNet, ONNX Runtime against
# eager on a CPU, 3 processes each side alone): the API's example, and a test's.
DOCUMENT_EXAMPLE: dict[str, Any] = json.loads(
    Path(__file__).with_name("result_example.json").read_text(encoding="utf-8"))

# ---- value types --------------------------------------------------------------------------

def _safe_line(value: str) -> str:
    why = text_safety.problem(value, line=True)
    if why is not None:
        raise ValueError(why)
    return value


def _safe_text(value: str) -> str:
    why = text_safety.problem(value, line=False)
    if why is not None:
        raise ValueError(why)
    return value


SafeLine, SafeText = AfterValidator(_safe_line), AfterValidator(_safe_text)
Name = Annotated[str, Field(strict=True, max_length=MAX_NAME), SafeLine]
Line = Annotated[str, Field(strict=True, max_length=MAX_LINE), SafeLine]
FilePath = Annotated[str, Field(strict=True, max_length=MAX_PATH), SafeLine]
Text = Annotated[str, Field(strict=True, max_length=MAX_TEXT), SafeText]
def _iso_timestamp(value: str) -> str:
    """An ISO 8601 time, as the runner writes (datetime.isoformat); kept as written."""
    from datetime import datetime

    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 time") from None
    return value


Timestamp = Annotated[str, Field(strict=True, max_length=MAX_TIMESTAMP),
                      AfterValidator(_iso_timestamp)]
SeriesKey = Annotated[str, Field(strict=True, min_length=1, max_length=MAX_SERIES_KEY),
                      SafeLine]
DeviceClass = Annotated[str, Field(strict=True, min_length=1, max_length=100),  # the column
                        SafeLine]
StderrTail = Annotated[str, Field(strict=True, max_length=MAX_STDERR_TAIL), SafeText]
Method = Annotated[str, Field(strict=True, min_length=1, max_length=64),  # the column
                   SafeLine]

# strict: a bool or a string is not a number; allow_inf_nan=False: NaN and +-infinity are
# refused (Python's json module reads them, and 1e400, from a body); an integer no float
# holds (10**400) fails as "not a valid number", which errors.py spells out.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, lt=1)]
Int = Annotated[int, Field(strict=True, ge=-INT64 - 1, le=INT64)]
Count = Annotated[int, Field(strict=True, ge=0, le=INT64)]
LogHalfWidth = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0,
                                      le=MAX_LOG_HALF_WIDTH)]
Side = Literal["baseline", "candidate"]
TimingMode = Literal["graphs", "nographs"]


def _json_error(loc: tuple[int | str, ...], kind: str, message: str, value: Any) -> ValidationError:
    return ValidationError.from_exception_data("BoundedJson", [InitErrorDetails(
        type=PydanticCustomError(kind, message), loc=loc, input=value)])


def _check_json(value: Any, loc: tuple[int | str, ...], depth: int) -> None:
    """Refuse what is not a bounded JSON value, naming the place inside it; never recurses
    deeper than MAX_JSON_DEPTH, whatever it is given."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -INT64 - 1 <= value <= INT64:
            raise _json_error(loc, "json_int_range", "integer outside the 64-bit range", value)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _json_error(loc, "finite_number", "Input should be a finite number", value)
        return
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise _json_error(loc, "json_string_too_long",
                              f"string longer than {MAX_TEXT} characters", value)
        why = text_safety.problem(value, line=False)
        if why is not None:
            raise _json_error(loc, "unsafe_text", why, value[:100])
        return
    if isinstance(value, (list, dict)):
        if depth >= MAX_JSON_DEPTH:
            raise _json_error(loc, "json_too_deep",
                              f"nested deeper than {MAX_JSON_DEPTH} levels", value)
        if len(value) > MAX_JSON_ITEMS:
            raise _json_error(loc, "json_too_long",
                              f"more than {MAX_JSON_ITEMS} items", value)
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_json(item, (*loc, i), depth + 1)
            return
        for key, item in value.items():
            if not isinstance(key, str) or len(key) > MAX_NAME:
                raise _json_error((*loc, str(key)[:MAX_NAME]), "json_key",
                                  f"keys are strings of at most {MAX_NAME} characters", key)
            why = text_safety.problem(key, line=True)
            if why is not None:
                raise _json_error(loc, "unsafe_key", f"a key {why}", key[:100])
            _check_json(item, (*loc, key), depth + 1)
        return
    raise _json_error(loc, "json_type", "not a JSON value", value)


def _bounded_json(value: Any) -> Any:
    _check_json(value, (), 0)
    return value


BoundedJson = Annotated[Any, PlainValidator(_bounded_json), WithJsonSchema({
    "description": f"any JSON value nested at most {MAX_JSON_DEPTH} levels: lists and maps "
                   f"of at most {MAX_JSON_ITEMS} items, strings of at most {MAX_TEXT} "
                   f"characters, finite numbers, 64-bit integers",
})]
NameMap = Annotated[dict[Name, Name], Field(max_length=MAX_OPEN_KEYS)]
ShortDigest = Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{12}$")]


def _version(value: int) -> int:
    if value != RESULT_SCHEMA_VERSION:
        raise ValueError(f"{value!r} is not supported (this server reads "
                         f"{RESULT_SCHEMA_VERSION})")
    return value


SchemaVersion = Annotated[int, Field(strict=True), AfterValidator(_version),
                          WithJsonSchema({"type": "integer", "const": RESULT_SCHEMA_VERSION})]


def _raise_at(loc: tuple[int | str, ...], kind: str, message: str, value: Any) -> None:
    """A model-level rule's error, placed on the field it is about."""
    raise ValidationError.from_exception_data("BenchResultDocument", [InitErrorDetails(
        type=PydanticCustomError(kind, message), loc=loc, input=value)])


# ---- models -------------------------------------------------------------------------------

class Closed(BaseModel):
    """A part whose keys are all known: an unknown key is a mistake, refused."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """A part with known keys (typed) and room for more: any other key holds a bounded JSON
    value, at most MAX_OPEN_KEYS keys in all. Writers add evidence faster than readers learn
    it; refusing new keys would refuse a newer writer's documents."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"maxProperties": MAX_OPEN_KEYS})
    __pydantic_extra__: dict[str, BoundedJson] = Field(init=False)  # typed extra keys

    @model_validator(mode="before")
    @classmethod
    def _bounded_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if len(data) > MAX_OPEN_KEYS:
                raise ValueError(f"more than {MAX_OPEN_KEYS} keys")
            long = next((k for k in data if isinstance(k, str) and len(k) > MAX_NAME), None)
            if long is not None:
                raise ValueError(f"key {long[:40]!r}... is longer than {MAX_NAME} characters")
            for key in data:
                why = text_safety.problem(key, line=True) if isinstance(key, str) else None
                if why is not None:
                    raise ValueError(f"a key {why}")
        return data


class LatencySummaryDocument(Closed):
    """Per-inference latency statistics in milliseconds (benchmarks.stats.summary)."""

    n: Count
    median_ms: Positive
    iqr_ms: NonNegative
    p05_ms: Positive
    p95_ms: Positive
    mean_ms: Positive

    @model_validator(mode="after")
    def _ordered(self) -> LatencySummaryDocument:
        if not self.p05_ms <= self.median_ms <= self.p95_ms:
            raise ValueError("p05_ms <= median_ms <= p95_ms does not hold")
        return self


class SpeedupDocument(Closed):
    """Baseline median over candidate median, with its confidence interval."""

    value: Positive
    ci_low: Positive
    ci_high: Positive
    confidence: Fraction = 0.95
    method: Method = "paired-round-bootstrap"

    @model_validator(mode="after")
    def _ordered(self) -> SpeedupDocument:
        if not self.ci_low <= self.value <= self.ci_high:
            raise ValueError("ci_low <= value <= ci_high does not hold")
        return self


class AccuracyDocument(Closed):
    rel_l2: NonNegative
    max_abs: NonNegative
    tolerance: NonNegative
    passed: StrictBool


class TimingPolicyDocument(Closed):
    """benchmarks.spec.TimingPolicy; whether the values are usable is BenchSpec.validate's
    question (and the runner's: a document of a refused policy records the refusal)."""

    warmup_iters: Int = 10
    rounds: Int = 30
    iters_per_round: Int = 10
    max_seconds: Number = 30.0
    min_rounds: Int = 5
    cuda_graphs: StrictBool = True
    warmup_seconds: Number = 1.0
    bootstrap_resamples: Int = 2000
    seed: Int = 0
    processes: Int = 1
    max_processes: Int = 0
    budget_seconds: Number = 0.0
    target_half_width: Number = 0.0
    compile_cache: CompileCache = "process"
    builds: Builds = "pinned"
    max_host_load: Number = 0.5
    profile: StrictBool = True


class SpecOptions(Open):
    """Backend and runner options. `threads` is read as an integer count by the series key."""

    threads: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = None


class SpecDocument(Closed):
    """benchmarks.spec.BenchSpec. Names and ranges are checked by BenchSpec.validate where a
    document is stored (the API answers 422 naming `result.spec`)."""

    model: Name = "resnet50"
    backend: Name = "onnxruntime"
    weights: Name = "constant"
    precision: Name = "fp32"
    batch_size: Int = 1
    shape_mode: Name = "static"
    opt_level: Name = "default"
    device: Name = "cpu"
    image_size: Int = 224
    width: Int = 64
    num_classes: Int = 1000
    seed: Int = 0
    options: SpecOptions = Field(default_factory=SpecOptions)
    timing: TimingPolicyDocument = Field(default_factory=TimingPolicyDocument)


class TimingEvidence(Open):
    """How the timed rounds were taken (benchmarks.runner; totals after a merge)."""

    rounds: Count | None = None
    iters_per_round: Count | None = None
    stopped_by: Name | None = None
    timing_seconds: NonNegative | None = None
    cuda_graphs: Annotated[dict[Side, StrictBool], Field(max_length=2)] | None = None
    mode: TimingMode | None = None
    warmup_seconds: NonNegative | None = None
    clock: Name | None = None
    side: Side | None = None


class KernelsPerInference(Closed):
    """GPU kernels launched per call of each side, as the profiler counts them: an average
    over a few calls, so a number, not necessarily an integer."""

    baseline: NonNegative | None = None
    candidate: NonNegative | None = None


_KERNEL_COUNT: TypeAdapter[int] = TypeAdapter(Count)
_KERNEL_AVERAGE: TypeAdapter[float] = TypeAdapter(NonNegative)


def _kernels(value: Any) -> Any:
    """Per side ({baseline, candidate}: what the runner writes), or one number: a client's
    single count, which the evidence sentence reads too. A number keeps its type (an
    integer count stays an integer). Dispatched here rather than by a union, so that an
    error names the field itself and not the union's branches."""
    if isinstance(value, dict):
        return KernelsPerInference.model_validate(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _KERNEL_COUNT.validate_python(value)
    return _KERNEL_AVERAGE.validate_python(value)


Kernels = Annotated[Any, PlainValidator(
    _kernels, json_schema_input_type=KernelsPerInference | NonNegative)]


class CompileEvidence(Open):
    compile_call_seconds: NonNegative | None = None
    first_call_seconds: NonNegative | None = None


class BuildEvidence(Open):
    """Whether a process built its candidate or loaded it from the host's build cache,
    and how long that took (benchmarks.build_cache)."""

    mode: Name | None = None  # timing.builds: pinned or as-shipped
    distinct: Count | None = None  # build fingerprints among a cell's processes
    spread: NonNegative | None = None  # their speedups' (max - min) / median, if several
    source: Literal["built", "loaded"] | None = None
    seconds: NonNegative | None = None
    built_seconds: NonNegative | None = None
    cached: StrictBool | None = None
    stored: StrictBool | None = None
    key: Name | None = None
    why_uncached: Text | None = None
    problem: Text | None = None
    refused: Text | None = None


# where a process's seconds went (benchmarks.runner.Phases): "start", "identity", "model",
# "compile", "capture", "timing", ...
PhaseSeconds = Annotated[dict[Name, NonNegative], Field(max_length=32)]


class PreparedAhead(Open):
    """A process started ahead of its turn (benchmarks.prepared): how long its turn waited
    for it to be ready, and how many of the run's children prepared while it timed."""

    waited_for_ready_seconds: NonNegative | None = None
    prepared_beside: Count | None = None


class FaultEvidence(Open):
    slow_candidate: NonNegative | None = None
    clock: Name | None = None  # the clock its extra work is counted on: thread or wall


class SideEvidence(Open):
    rounds: Count | None = None
    timing_seconds: NonNegative | None = None
    median_ms: Positive | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class SidesEvidence(Open):
    """Which child of a split measurement timed which side, in which order."""

    order: Annotated[list[Side], Field(max_length=2)] | None = None
    baseline: SideEvidence | None = None
    candidate: SideEvidence | None = None


class ProcessEvidence(Open):
    """One process of a merged measurement (benchmarks.merging.merge_processes)."""

    speedup: Positive | None = None
    ci_low: Positive | None = None
    ci_high: Positive | None = None
    rounds: Count | None = None
    timing_seconds: NonNegative | None = None
    compile_seconds: NonNegative | None = None
    baseline_median_ms: Positive | None = None
    candidate_median_ms: Positive | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    sides: SidesEvidence | None = None
    build: BuildEvidence | None = None
    phases: PhaseSeconds | None = None
    timing_window: Annotated[list[NonNegative], Field(min_length=2, max_length=2)] | None = None
    prepared_ahead: PreparedAhead | None = None


class Resolvable(Open):
    """The smallest change the runner decides at the cell's budget (a comparison's
    half-width), from the cell's own unit variance."""

    half_width: NonNegative | None = None
    budget_seconds: NonNegative | None = None
    unit_timing_seconds: NonNegative | None = None


class AdaptiveEvidence(Open):
    """How an adaptive measurement ended (benchmarks.adaptive.AdaptiveMeasurement); the
    verdict's notes do arithmetic on these."""

    outcome: Literal["pass", "regression", "precise", "undecided"] | None = None
    stopped_by: Literal["decided", "max_processes", "budget", "fixed_processes",
                        "same_software"] | None = None
    # how the cell was compared: against the stored baseline ("adaptive"), not at all (the
    # baseline's very software: "same_software"), or with the baseline's environment
    # measured in the same session ("interleaved": evidence.comparison)
    mode: Literal["adaptive", "same_software", "interleaved"] | None = None
    resolvable: Resolvable | None = None
    processes: Annotated[int, Field(strict=True, ge=0, le=MAX_PROCESSES)] | None = None
    timing_seconds: NonNegative | None = None
    reference_speedup: Positive | None = None
    reference_log_half: LogHalfWidth | None = None
    threshold: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, lt=1)] | None = \
        None
    ratio: Positive | None = None
    # [low, high]; [null, null] without a reference speedup (nothing to take a ratio of)
    ratio_ci: Annotated[list[Positive | None], Field(min_length=2, max_length=2)] | None = None
    log_half_width: LogHalfWidth | None = None
    target_half_width: NonNegative | None = None
    reference_error: Text | None = None


class EvidenceDocument(Open):
    """What explains a speedup and how it was measured. Backend evidence (onnx_node_counts,
    trt_*, inductor_kernels, torch_trt_*, ...) is open-ended: bounded JSON."""

    timing: TimingEvidence | None = None
    kernels_per_inference: Kernels | None = None
    kernels_per_inference_error: Text | None = None
    cuda_graphs_fallback: Text | None = None
    cudnn_benchmark: StrictBool | None = None
    baseline_accuracy: AccuracyDocument | None = None
    compile: CompileEvidence | None = None
    build: BuildEvidence | None = None
    phases: PhaseSeconds | None = None
    fault: FaultEvidence | None = None
    processes: Annotated[list[ProcessEvidence], Field(max_length=MAX_PROCESSES)] | None = None
    ci_method: Method | None = None
    sides: SidesEvidence | None = None
    adaptive: AdaptiveEvidence | None = None


class NvmlReading(Open):
    """Clocks, temperature, power and throttling read from NVML (benchmarks.fingerprint)."""

    sm_clock_mhz: Count | None = None
    mem_clock_mhz: Count | None = None
    max_sm_clock_mhz: Count | None = None
    temperature_c: Int | None = None
    power_w: NonNegative | None = None
    power_limit_w: NonNegative | None = None
    clock_event_reasons: Count | None = None
    throttle_reasons: Annotated[list[Name], Field(max_length=64)] | None = None
    throttled: StrictBool | None = None


class EnvironmentRecord(Open):
    """What the worker asked for beside what it found (workers.tasks)."""

    requested: Annotated[list[Name], Field(max_length=64)] | None = None
    interpreter: Name | None = None
    python: FilePath | None = None


class ModelInput(Closed):
    shape: Annotated[list[Count], Field(max_length=16)]
    dtype: Name


class ModelRecord(Open):
    """A model of the user's as the child built it (benchmarks.own_models): `digest` goes
    into the series key, so it is exactly 12 lowercase hex digits and nothing else."""

    reference: Name | None = None
    kind: Literal["factory", "torchvision", "timm", "pt2"] | None = None
    digest: Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{12}$")] | None = None
    fingerprint: Name | None = None
    inputs: Annotated[list[ModelInput], Field(max_length=16)] | None = None
    parameters: Count | None = None
    source: FilePath | None = None


class SoftwareIdentity(Open):
    """What code ran (benchmarks.identity): equal digests, the same software."""

    digest: ShortDigest | None = None
    environment: ShortDigest | None = None
    interpreter: Line | None = None
    harness: ShortDigest | None = None
    variables: Annotated[dict[Name, Text], Field(max_length=MAX_OPEN_KEYS)] | None = None
    model: Name | None = None
    build: Name | None = None
    distributions: Annotated[dict[Name, Name], Field(max_length=MAX_DISTRIBUTIONS)] | None = None
    # each side's own software as its process ran it (benchmarks.identity.side_identity)
    sides: Annotated[dict[Side, ShortDigest | None], Field(max_length=2)] | None = None


class FingerprintDocument(Open):
    """What the result ran on. `packages` become the installed versions the service shows
    and compares, so they are names and version strings, nothing else."""

    device_class: DeviceClass | None = None
    device: Name | None = None
    packages: NameMap | None = None
    backend_versions: NameMap | None = None
    python: Name | None = None
    implementation: Name | None = None
    platform: Line | None = None
    hostname: Line | None = None
    cpu: Line | None = None
    cpu_count: Count | None = None
    torch_threads: Count | None = None
    cuda: Name | None = None
    cudnn: Count | None = None
    gpu: Line | None = None
    compute_capability: Name | None = None
    gpu_memory_bytes: Count | None = None
    driver: Name | None = None
    torch_error: Text | None = None
    error: Text | None = None
    nvml_start: NvmlReading | None = None
    nvml_end: NvmlReading | None = None
    throttled: StrictBool | None = None
    environment: EnvironmentRecord | None = None
    model: ModelRecord | None = None
    software: SoftwareIdentity | None = None


Round = Annotated[list[Positive], Field(min_length=1, max_length=MAX_ROUND_SAMPLES)]
Rounds = Annotated[list[Round], Field(max_length=MAX_ROUNDS)]


class BenchResultDocument(Closed):
    """A benchmarks.result.BenchResult document, schema version 1."""

    series_key: SeriesKey
    spec: SpecDocument
    status: Literal["ok", "failed", "skipped"]
    reason: Text | None = None
    schema_version: SchemaVersion
    baseline_samples_ms: Rounds = Field(
        default_factory=list, description="per-iteration latencies, one list per round; "
        "round i of both sides was measured back to back")
    candidate_samples_ms: Rounds = Field(default_factory=list)
    baseline: LatencySummaryDocument | None = None
    candidate: LatencySummaryDocument | None = None
    speedup: SpeedupDocument | None = None
    accuracy: AccuracyDocument | None = None
    compile_seconds: NonNegative | None = None
    peak_memory_bytes: Annotated[dict[Name, Count], Field(max_length=MAX_OPEN_KEYS)] = Field(
        default_factory=dict)
    evidence: EvidenceDocument = Field(default_factory=EvidenceDocument)
    fingerprint: FingerprintDocument = Field(default_factory=FingerprintDocument)
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    duration_seconds: NonNegative | None = None
    stderr_tail: StderrTail | None = None

    @model_validator(mode="after")
    def _whole(self) -> BenchResultDocument:
        for side in ("baseline_samples_ms", "candidate_samples_ms"):
            total = sum(len(r) for r in getattr(self, side))
            if total > MAX_SAMPLES_PER_SIDE:
                _raise_at((side,), "too_many_samples",
                          f"{total} samples; at most {MAX_SAMPLES_PER_SIDE} per side", total)
        self._agrees_with_itself()
        child_side = self.spec.options.model_extra.get("_side") if self.spec.options.model_extra \
            else None
        if self.status == "ok" and self.speedup is None and child_side not in (
                "baseline", "candidate"):
            # A child of a split measurement times one side: it has no speedup, and is an
            # input to benchmarks.isolation, never a result to store (the store says so).
            _raise_at(("speedup",), "speedup_missing", "status 'ok' needs a speedup", None)
        return self

    def _agrees_with_itself(self) -> None:
        """A document whose figures contradict each other is refused, naming the field: the
        speedup is the ratio of its own medians (the runner writes exactly that), a count is
        the number of samples it summarises, only a measured result has a speedup, and the
        series is of the spec's device."""
        if self.status != "ok" and self.speedup is not None:
            _raise_at(("speedup",), "speedup_without_result",
                      f"a {self.status} result has no speedup", None)
        for side in ("baseline", "candidate"):
            summary: LatencySummaryDocument | None = getattr(self, side)
            total = sum(len(r) for r in getattr(self, f"{side}_samples_ms"))
            if summary is not None and total and summary.n != total:
                _raise_at((side, "n"), "count_mismatch",
                          f"n is {summary.n}, the document holds {total} samples", summary.n)
        if self.speedup is not None and self.baseline is not None \
                and self.candidate is not None:
            own = self.baseline.median_ms / self.candidate.median_ms
            if not math.isfinite(own) or abs(self.speedup.value / own - 1) > SPEEDUP_TOLERANCE:
                _raise_at(("speedup", "value"), "speedup_mismatch",
                          f"{self.speedup.value:.6g} is not the ratio of the document's own "
                          f"medians ({own:.6g})", self.speedup.value)
        try:
            key_device = str(parse_series_key(self.series_key)["device_class"])
        except SpecError:
            return  # a key of another shape: the store refuses it, naming series_key
        if (key_device == "cpu") != (self.spec.device == "cpu"):
            _raise_at(("series_key",), "device_mismatch",
                      f"a {key_device} series for a spec on device {self.spec.device!r}",
                      self.series_key)



def error_message(error: ErrorDetails) -> str:
    """One error as a client reads it: pydantic's message, said plainly where it misleads."""
    kind = error.get("type")
    value = error.get("input")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        return "a number no float holds (too large)"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def error_path(loc: tuple[int | str, ...] | list[int | str], prefix: str = "") -> str:
    """("evidence", "processes", 0, "speedup") -> "evidence.processes[0].speedup"."""
    name = prefix
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += ("." if name else "") + str(part)
    return name
