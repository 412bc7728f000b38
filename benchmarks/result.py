"""The result document: one versioned JSON object per spec.

This is the contract between the measurement core and everything that stores or judges
results (workers, `POST /api/v1/results`, detection). Its version is
`benchmarks.schema_version.RESULT_SCHEMA_VERSION`; readers refuse versions they do not know.

The dataclasses here are what the runner writes; what a reader accepts is the typed schema
in `benchmarks.result_schema`, which `from_dict` applies. It is imported there and not at
the top: the child process that writes documents imports this module, and it must run
where only torch and the backend under test are installed (no pydantic).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from benchmarks import text_safety
from benchmarks.schema_version import RESULT_SCHEMA_VERSION

if TYPE_CHECKING:
    from benchmarks.result_schema import BenchResultDocument

Status = Literal["ok", "failed", "skipped"]


class ResultError(ValueError):
    """A result document that cannot be trusted; the message names the problem."""


def _finite_number(value: object) -> bool:
    """A JSON number a float can hold: not a string or bool, not NaN/inf, not 10**400."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def timing_mode_of(evidence: Mapping[str, Any]) -> str | None:
    """The timing mode a result's evidence records: `timing.mode` (set by the runner, the
    actual mode after any fallback), or for older documents "graphs" when both sides were
    graphed per `timing.cuda_graphs`; None when the evidence does not say."""
    timing = evidence.get("timing")
    if not isinstance(timing, Mapping):
        return None
    mode = timing.get("mode")
    if mode in ("graphs", "nographs"):
        return str(mode)
    graphs = timing.get("cuda_graphs")
    if isinstance(graphs, Mapping) and graphs:
        return "graphs" if all(v is True for v in graphs.values()) else "nographs"
    return None


@dataclass
class LatencySummary:
    """Per-inference latency statistics in milliseconds, from the raw samples."""

    n: int
    median_ms: float
    iqr_ms: float
    p05_ms: float
    p95_ms: float
    mean_ms: float


@dataclass
class Speedup:
    """Baseline median over candidate median, with a paired bootstrap CI."""

    value: float
    ci_low: float
    ci_high: float
    confidence: float = 0.95
    method: str = "paired-round-bootstrap"

    @property
    def half_width_rel(self) -> float:
        return (self.ci_high - self.ci_low) / 2 / self.value if self.value else math.inf


@dataclass
class Accuracy:
    rel_l2: float
    max_abs: float
    tolerance: float
    passed: bool


_SAMPLE_KEYS = frozenset({"baseline_samples_ms", "candidate_samples_ms"})  # numbers only


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return text_safety.cleaned(value)
    if isinstance(value, dict):
        return {text_safety.cleaned(k) if isinstance(k, str) else k: _clean(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clean(v) for v in value)
    return value


@dataclass
class BenchResult:
    series_key: str
    spec: dict[str, Any]
    status: Status
    reason: str | None = None
    schema_version: int = RESULT_SCHEMA_VERSION
    # raw per-iteration latencies in ms, one list per round, rounds interleaved
    # baseline/candidate in this order; round i of both lists was measured back to back.
    baseline_samples_ms: list[list[float]] = field(default_factory=list)
    candidate_samples_ms: list[list[float]] = field(default_factory=list)
    baseline: LatencySummary | None = None
    candidate: LatencySummary | None = None
    speedup: Speedup | None = None
    accuracy: Accuracy | None = None
    compile_seconds: float | None = None
    # peak memory: CUDA allocator peak on GPU, process max-RSS growth on CPU
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)
    # kernels_per_inference, onnx_node_counts{op:n}, trt_engine_layers, inductor_kernels, ...
    evidence: dict[str, Any] = field(default_factory=dict)
    # python, packages{name:version}, cuda, cudnn, driver, gpu, cpu, device_class,
    # nvml_start{...}, nvml_end{...}, throttled
    fingerprint: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None  # ISO 8601 UTC
    finished_at: str | None = None
    duration_seconds: float | None = None
    stderr_tail: str | None = None

    def timing_mode(self) -> str:
        """"graphs" or "nographs": what the result was timed with.

        `evidence.timing` when it says (`timing_mode_of`); for a result that never reached
        timing, what its spec asked for.
        """
        recorded = timing_mode_of(self.evidence if isinstance(self.evidence, dict) else {})
        if recorded is not None:
            return recorded
        spec = self.spec if isinstance(self.spec, dict) else {}
        policy = spec.get("timing")
        policy = policy if isinstance(policy, dict) else {}
        on_cuda = spec.get("device") == "cuda"
        return "graphs" if on_cuda and policy.get("cuda_graphs", True) is True else "nographs"

    def to_dict(self) -> dict[str, Any]:
        """The document, its text cleaned of what no stored string may hold (NUL, bidi
        overrides: benchmarks.text_safety): a reason or stderr tail quoting what a user's
        model printed must not get the whole document refused."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _SAMPLE_KEYS:
                out[f.name] = [list(r) for r in value]  # lists of numbers: a shallow copy each
            elif isinstance(value, (LatencySummary, Speedup, Accuracy)):
                out[f.name] = _clean(asdict(value))
            else:
                # _clean builds new lists and dicts as it goes: the copy asdict made first
                # (a third of an upload's time in the API, on raw samples) bought nothing
                out[f.name] = _clean(value)
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        """Parse and validate; raise ResultError with a message safe to show a client."""
        from pydantic import ValidationError

        from benchmarks.result_schema import BenchResultDocument, error_message, error_path

        try:
            document = BenchResultDocument.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            shown = "; ".join(f"{error_path(e['loc']) or 'result'}: {error_message(e)}"
                              for e in errors[:3])
            more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
            raise ResultError(shown + more) from None
        return cls.from_document(document)

    @classmethod
    def from_document(cls, document: BenchResultDocument) -> BenchResult:
        """The dataclass of a document the schema accepted: keys that were absent stay
        absent (the dataclasses' defaults fill the top level, as for any writer), so the
        document hashes as it was sent."""
        data = document.model_dump(exclude_unset=True)
        for name, typ in (("baseline", LatencySummary), ("candidate", LatencySummary),
                          ("speedup", Speedup), ("accuracy", Accuracy)):
            if data.get(name) is not None:
                data[name] = typ(**data[name])
        return cls(**data)

    def check(self) -> None:
        """Refuse numbers no measurement can produce (negative, NaN, inverted CI).

        For results built in this process (merged processes, joined sides), which never
        pass through the schema; a parsed document was held to all of this and more."""
        if self.status not in ("ok", "failed", "skipped"):
            raise ResultError(f"status: {self.status!r} is not ok, failed or skipped")
        for side, rounds in (("baseline_samples_ms", self.baseline_samples_ms),
                             ("candidate_samples_ms", self.candidate_samples_ms)):
            for r in rounds:
                for x in r:
                    if not _finite_number(x) or x <= 0:
                        raise ResultError(f"{side}: latency {x!r} is not a positive number")
        for name in ("baseline", "candidate"):
            s = getattr(self, name)
            if s is not None:
                for k, v in asdict(s).items():
                    if not _finite_number(v) or v < 0:
                        raise ResultError(f"{name}.{k}: {v!r:.40} is not a non-negative number")
        if self.speedup is not None:
            s = self.speedup
            vals = (s.value, s.ci_low, s.ci_high)
            if not all(_finite_number(v) and v > 0 for v in vals):
                raise ResultError("speedup: value and CI must be positive numbers")
            if not s.ci_low <= s.value <= s.ci_high:
                raise ResultError("speedup: ci_low <= value <= ci_high does not hold")
        if self.status == "ok" and self.speedup is None and self.child_side() is None:
            raise ResultError("status 'ok' needs a speedup")

    def child_side(self) -> str | None:
        """The one side timed when this is a child of a split measurement (its spec's
        `options._side`): an input to `merging.merge_processes`, never a result to store."""
        spec = self.spec if isinstance(self.spec, dict) else {}
        options = spec.get("options")
        side = options.get("_side") if isinstance(options, dict) else None
        return side if side in ("baseline", "candidate") else None

    @classmethod
    def from_json(cls, text: str) -> BenchResult:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResultError(f"result: not JSON ({exc.msg})") from None
        return cls.from_dict(data)
