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
    Field,
    PlainValidator,
    StrictBool,
    TypeAdapter,
    model_validator,
)
from pydantic_core import ErrorDetails

from benchmarks.document_values import (
    MAX_DISTRIBUTIONS,
    MAX_OPEN_KEYS,
    MAX_PROCESSES,
    MAX_ROUND_SAMPLES,
    MAX_ROUNDS,
    MAX_SAMPLES_PER_SIDE,
    SPEEDUP_TOLERANCE,
    Closed,
    Count,
    DeviceClass,
    FilePath,
    Fraction,
    Int,
    Line,
    LogHalfWidth,
    Method,
    Name,
    NameMap,
    NonNegative,
    Open,
    Positive,
    SchemaVersion,
    SeriesKey,
    ShortDigest,
    Side,
    StderrTail,
    Text,
    Timestamp,
    TimingMode,
    _raise_at,
)
from benchmarks.gpu_process_schema import GpuProcesses, LaunchPin
from benchmarks.spec import SpecError, parse_series_key
from benchmarks.timing_schema import TimingPolicyDocument
from benchmarks.vocabulary import AdaptiveMode, Outcome, StoppedBy

# A document `speedwatch bench --isolate --json` wrote (a tiny ResNet, ONNX Runtime against
# eager on a CPU, 3 processes each side alone): the API's example, and a test's.
DOCUMENT_EXAMPLE: dict[str, Any] = json.loads(
    Path(__file__).with_name("result_example.json").read_text(encoding="utf-8"))


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
    via: Name | None = None  # what a load read, where a backend loads in more than one way
    note: Text | None = None  # why the quicker way of loading was not taken


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
    host_other_cores: NonNegative | None = None  # fingerprint.host_load.other_cores
    build_fingerprint: Name | None = None
    sides: SidesEvidence | None = None
    build: BuildEvidence | None = None
    phases: PhaseSeconds | None = None
    timing_window: Annotated[list[NonNegative], Field(min_length=2, max_length=2)] | None = None
    prepared_ahead: PreparedAhead | None = None
    gpu_processes: GpuProcesses | None = None
    launch_pin: LaunchPin | None = None
    # "forked" from a warm server that had imported the harness (benchmarks.forkserver)
    process_start: Literal["forked", "fresh"] | None = None


class LaunchStates(Open):
    """A GPU cell whose processes timed in two kernel-launch states (benchmarks.launch_state):
    the speedup pools the slower state's; the others are kept here, whole."""

    # the faster processes' shift per kernel; null where every set-aside one changed state
    # while it timed
    shift_us_per_kernel: NonNegative | None = None
    pooled: Annotated[list[Count], Field(max_length=MAX_PROCESSES)]
    set_aside: Annotated[list[Count], Field(max_length=MAX_PROCESSES)]
    # those of set_aside whose rounds show both states
    changed_while_timing: Annotated[list[Count], Field(max_length=MAX_PROCESSES)] | None = None
    set_aside_processes: Annotated[list[ProcessEvidence], Field(max_length=MAX_PROCESSES)]


class Resolvable(Open):
    """The smallest change the runner decides at the cell's budget (a comparison's
    half-width), from the cell's own unit variance."""

    half_width: NonNegative | None = None
    budget_seconds: NonNegative | None = None
    unit_timing_seconds: NonNegative | None = None


class AdaptiveEvidence(Open):
    """How an adaptive measurement ended (benchmarks.adaptive.AdaptiveMeasurement); the
    verdict's notes do arithmetic on these."""

    outcome: Outcome | None = None
    stopped_by: StoppedBy | None = None
    mode: AdaptiveMode | None = None
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
    comparison_error: Text | None = None
    # one side of a pair of cells measured in turns (benchmarks.isolation)
    interleaved_pair: StrictBool | None = None
    # units measured again because another process made a CUDA context on their GPU
    gpu_remeasured: Annotated[list[Count], Field(max_length=MAX_PROCESSES)] | None = None


class BaselineProcess(Open):
    speedup: Positive | None = None
    baseline_median_ms: Positive | None = None
    candidate_median_ms: Positive | None = None


class ComparisonEvidence(Open):
    """The cell compared with its baseline's environment measured in the same session, in
    turns (benchmarks.adaptive): the verdict takes this ratio instead of one against the
    stored baseline when the environment is the baseline's."""

    mode: Name | None = None  # "interleaved"
    baseline_result_id: Count | None = None
    baseline_environment: Name | None = None  # the baseline's environment digest
    baseline_speedup: Positive | None = None
    baseline_measured_speedup: Positive | None = None
    baseline_ci: Annotated[list[Positive], Field(min_length=2, max_length=2)] | None = None
    baseline_processes: Annotated[list[BaselineProcess],
                                  Field(max_length=MAX_PROCESSES)] | None = None
    baseline_timing_seconds: NonNegative | None = None
    ratio: Positive | None = None
    ratio_ci: Annotated[list[Positive], Field(min_length=2, max_length=2)] | None = None
    basis: Name | None = None  # "candidate_side" or "speedups"
    shared_baseline_side: Name | None = None  # the eager side's identity both ran
    # the candidate sides' pairs adjusted by eager's (benchmarks.paired_units)
    control_variate: StrictBool | None = None
    pairs: Count | None = None
    threshold: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, lt=1)] | None = \
        None


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
    process_start: Literal["forked", "fresh"] | None = None
    gpu_processes: GpuProcesses | None = None
    launch_pin: LaunchPin | None = None
    fault: FaultEvidence | None = None
    processes: Annotated[list[ProcessEvidence], Field(max_length=MAX_PROCESSES)] | None = None
    ci_method: Method | None = None
    sides: SidesEvidence | None = None
    adaptive: AdaptiveEvidence | None = None
    comparison: ComparisonEvidence | None = None
    launch_states: LaunchStates | None = None


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


class HostLoadRecord(Open):
    """How busy other processes kept a CPU host while a result was timed (benchmarks.host;
    a unit's reading, or a merged result's over its units, benchmarks.merging)."""

    other_cores: NonNegative | None = None
    peak_cores: NonNegative | None = None
    seconds: NonNegative | None = None
    cores: Count | None = None
    threshold: NonNegative | None = None
    units: Count | None = None
    units_loaded: Count | None = None
    loaded: StrictBool | None = None
    # units timed again for the load: [{unit, other_cores}]
    remeasured: Annotated[list[dict[Name, NonNegative]], Field(max_length=MAX_PROCESSES)] | \
        None = None


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
    host_load: HostLoadRecord | None = None


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

