"""The benchmark spec: one matrix point, and the series key derived from it.

A spec is plain data (JSON round-trippable) so it can cross process and queue boundaries.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import operator
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmarks import model_ref
from benchmarks.build import BUILDS
from benchmarks.model_ref import BUILTIN_MODELS

# The built-in models; `model` may also name one of the user's (benchmarks.model_ref).
MODELS = BUILTIN_MODELS
BACKENDS = ("eager", "inductor", "onnxruntime", "tensorrt", "torch_tensorrt")
WEIGHTS = ("constant", "tensor", "refit")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
# int8: eager runs fp32; the candidate quantizes (ONNX Runtime static QDQ quantization with a
# seeded calibration set, TensorRT's INT8 flag with an entropy calibrator)
INT8_BACKENDS = ("onnxruntime", "tensorrt")
SHAPE_MODES = ("static", "dynamic")
DEVICES = ("cpu", "cuda")

# Optimization level: one axis, each backend's own scale. "default" is what the backend does
# when nobody says (ONNX Runtime: all; inductor: mode "default"; TensorRT and
# Torch-TensorRT: builder_optimization_level 3); naming the default explicitly is the same
# measurement and the same series.
OPT_LEVELS: dict[str, tuple[str, ...]] = {
    "eager": ("default",),
    "onnxruntime": ("default", "disabled", "basic", "extended", "layout", "all"),
    "inductor": ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead"),
    "tensorrt": ("default", "0", "1", "2", "3", "4", "5"),
    "torch_tensorrt": ("default", "0", "1", "2", "3", "4", "5"),
}
OPT_LEVEL_DEFAULTS = {"onnxruntime": "all", "tensorrt": "3", "torch_tensorrt": "3"}
ALL_OPT_LEVELS = tuple(dict.fromkeys(level for levels in OPT_LEVELS.values()
                                     for level in levels))

Weights = Literal["constant", "tensor", "refit"]
Precision = Literal["fp32", "fp16", "bf16"]
ShapeMode = Literal["static", "dynamic"]


class SpecError(ValueError):
    """A spec that cannot be measured; the message names the field."""


# Where a process finds its compiled kernels (TimingSpec.compile_cache); the one vocabulary
# the API, the result schema and the project file validate against.
CompileCache = Literal["process", "host"]
COMPILE_CACHES: tuple[CompileCache, ...] = typing.get_args(CompileCache)


@dataclass(frozen=True)
class Knob:
    """A timing field's bounds and what it means to a user: the one declaration the API's
    request schema (app.schemas.TimingIn), the result document's schema
    (benchmarks.timing_schema.TimingPolicyDocument) and `BenchSpec.validate` are made from.

    ge/gt/le/lt bound what the API accepts and what a stored spec may hold; `stored` widens
    the stored range where the harness's own values lie outside what a user may ask for
    (max_processes 0: no processes beyond `processes`); `choices` makes a text field a closed
    vocabulary; `description` is the API's, and a field that has one is a user's option:
    a flag of `bench`, `submit` and `demo` (named `flag`, else the field's name) and a key of
    the project file's [timing] table. `quiet_default`: a stored spec leaves the field out
    while it holds its default, so the documents and spec hashes of specs from before the
    field existed stay equal (every field added after the first release sets it)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    stored: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    description: str | None = None
    flag: str | None = None
    quiet_default: bool = False

    def refuses(self, value: float | str, *, stored: bool = True) -> str | None:
        """Why a stored spec (or, `stored=False`, a user's request) may not hold `value` (of
        the field's type), or None."""
        if isinstance(value, str):
            choices = self.choices or ()
            return None if value in choices else f"is not one of {', '.join(choices)}"
        if stored and self.stored is not None:
            lo, hi = self.stored
            return None if lo <= value <= hi else f"must be in [{lo:g}, {hi:g}]"
        for bound, holds, word in ((self.ge, operator.ge, ">="), (self.gt, operator.gt, ">"),
                                   (self.le, operator.le, "<="), (self.lt, operator.lt, "<")):
            if bound is not None and not holds(value, bound):
                return f"must be {word} {bound:g}"
        return None


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


def _of_kind(value: object, kind: type) -> bool:
    """JSON's types, strictly: no bool for a number, no text for anything else."""
    if kind is bool or kind is str:
        return isinstance(value, kind)
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)


def _knob(default: Any, **knob: Any) -> Any:
    return field(default=default, metadata={"knob": Knob(**knob)})


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to measure.

    Rounds alternate baseline and candidate so that drift (thermal, noisy neighbours)
    hits both sides alike; each round times `iters_per_round` back-to-back calls. Each
    field is declared here once, with its bounds and its API description (`Knob`).
    """

    warmup_iters: int = _knob(10, ge=0, le=10_000, flag="warmup", description="warm-up calls "
                              "of each side before the timing")
    rounds: int = _knob(30, ge=1, le=100_000, description="timed rounds per process, at most "
                        "(each side's calls alternate round by round)")
    iters_per_round: int = _knob(10, ge=1, le=10_000, description="timed calls of each side "
                                 "per round")
    # stop adding rounds past this much timing wall time
    max_seconds: float = _knob(30.0, gt=0, le=3_600, description="timing seconds per process")
    min_rounds: int = _knob(5, ge=1, le=1_000, stored=(1, 100_000), description="rounds "
                            "timed even past max_seconds")
    # On a GPU both sides are timed as CUDA-graph replays unless the caller says otherwise
    # or capture is impossible (the result then records the fallback and its reason).
    # Without graphs the launch-bound path swings 1-9% between processes on an H100; with
    # them 0.01-0.1% (benchmarks/README.md). Ignored on the CPU.
    cuda_graphs: bool = _knob(
        True, description="GPU: time CUDA-graph replays (default true); a capture that fails "
        "falls back to plain launches, recorded in the result")
    # Warm-up runs for at least `warmup_iters` calls of each side AND at least this long:
    # a process that starts after an idle spell (cold caches, clocks ramping up, lazy
    # allocator growth) is not yet in the state the timed rounds assume.
    warmup_seconds: float = _knob(1.0, ge=0, le=600)
    bootstrap_resamples: int = _knob(2000, ge=100, le=100_000)
    seed: int = _knob(0, ge=0)
    # Independent processes that each measure the whole policy (rounds, max_seconds), run one
    # after another by `run_isolated`; the CI then includes the between-process variance
    # (stats.combine_processes), which one process cannot see. 1 = a single process.
    processes: int = _knob(1, ge=1, le=16, description="processes measured at least (default 3)")
    # Adaptive measurement (`adaptive.run_adaptive`): after `processes` processes, more
    # are added one at a time until the comparison with the reference is decided at the
    # threshold (stats.decide), `max_processes` ran, or the processes' timing seconds
    # reach `budget_seconds`. 0 = no more than `processes` / no budget.
    max_processes: int = _knob(
        0, ge=1, le=32, stored=(0, 32), description="adaptive: processes are added until the "
        "comparison with the baseline is decided, up to this many")
    budget_seconds: float = _knob(
        0.0, ge=0, le=3_600, flag="budget", description="adaptive: stop adding processes once "
        "their timing seconds reach this (0: no budget)")
    # Adaptive: a decided comparison stops only once the speedup's own CI half-width is at
    # most this fraction as well (0 = no such floor). Today's result is tomorrow's baseline,
    # and a baseline's width adds (in quadrature) to every comparison made against it, so
    # a cheap device (a GPU decides a 3% threshold after 3 processes) is asked for more.
    target_half_width: float = _knob(
        0.0, ge=0, lt=0.5, description="adaptive: a decided comparison stops only once the "
        "speedup's CI half-width is at most this fraction too (default 0.003 on a GPU, 0.015 "
        "on the CPU; 0 = none)")
    # A profile of each side (benchmarks.profile) in a pass after the timing, by the first
    # process of a cell only: what a regression's profile diff reads. Never timed.
    profile: bool = _knob(
        True, description="profile each side in an untimed pass after the timing (default "
        "true): what GET /api/v1/results/{id}/profile serves and a regression's profile diff "
        "reads")
    # Where a process's compiled kernels come from (inductor's on-disk cache: FX graphs and
    # the autotuning choices). "process": each process compiles afresh, so the interval
    # covers what a new compile may choose (on an H100, ResNet50 fp16 bs32's frozen build
    # ran 1.426-1.469 ms over 8 fresh compiles on one host; a shared cache repeats the first
    # choice and reports +-0.05%). "host": processes share the worker's cache: runtime
    # variance only (4 processes of that cell: +-0.08% against +-1.0% compiling afresh),
    # so a cell decides in fewer processes, blind to compile-to-compile changes (right for
    # one fixed CI host that never clears its cache). A compile takes about as long either
    # way (21 s against 24 s there): the time saved is the processes not needed.
    compile_cache: str = _knob(
        "process", choices=COMPILE_CACHES, quiet_default=True,
        description="\"process\" (default): each process compiles afresh, so the interval "
        "covers what a new compile may choose; \"host\": processes share the worker's "
        "compile cache (runtime variance only: tighter, so fewer processes; blind to a "
        "compile landing elsewhere)")
    # How builds make the choices a compiler makes by timing (benchmarks.build.BUILDS):
    # "pinned" (default) makes them deterministically or once per host through a tuning
    # cache, so a rebuild runs the same code; "as-shipped" leaves them to the compiler as
    # its users' production builds get them, and the interval covers the spread between
    # builds. On an H100 (ResNet50 fp16 bs32, inductor, fresh compiles): as shipped, six
    # builds chose six sets of Triton configs and ran 3.1% apart; pinned, 0.09%.
    builds: str = _knob(
        "pinned", choices=BUILDS, quiet_default=True,
        description="\"pinned\" (default): choices a compiler makes by timing (inductor's "
        "autotuning, cuDNN and ONNX Runtime algorithm search, TensorRT tactics) are made "
        "deterministically or once per host through a tuning cache, so a rebuild runs the "
        "same code (evidence.build_fingerprint says so); \"as-shipped\": each build times "
        "its own choices as a user's production build does, the interval covers the spread "
        "between builds (evidence.build.spread), and the series key says builds=as-shipped")
    # The CPU load guard (benchmarks.host): a CPU cell's unit during which other processes
    # kept more than this many cores busy (CPU seconds per second) is measured again, at
    # most `children.LOAD_REMEASURES` times a cell, and a load that stays is stored with
    # the result and named in its verdict, never passed off as a quiet measurement.
    max_host_load: float = _knob(
        0.5, gt=0, le=4096, quiet_default=True,
        description="CPU cells: other processes' busy cores (CPU seconds per second) past "
        "which a unit is measured again, at most twice a cell, and a load that stays is "
        "recorded and named in the verdict (default 0.5)")
    # A rest before each unit of a cell (benchmarks.split_sides.run_unit): for hosts that
    # throttle under back-to-back processes.
    rest_seconds: float = _knob(
        0.0, ge=0, le=600, quiet_default=True,
        description="seconds the host rests before each process of a cell is started (or "
        "each pair, one per side), so a passively cooled GPU or a laptop's CPU sheds the "
        "last process's heat; 0 (default): the next starts at once")

    def refused(self) -> str | None:
        """"timing.FIELD: why" for the first field a stored spec may not hold, or None."""
        for name, kind, _default, knob in timing_fields():
            value = getattr(self, name)
            why = knob.refuses(value) if _of_kind(value, kind) else f"must be {_KINDS[kind]}"
            if why is not None:
                return f"timing.{name}: {value!r} {why}"
        return None


@functools.cache
def timing_fields() -> tuple[tuple[str, type, Any, Knob], ...]:
    """(name, Python type, default, Knob) of each TimingPolicy field, in declaration order;
    read once (every `BenchSpec.validate` walks them)."""
    hints = typing.get_type_hints(TimingPolicy)
    return tuple((f.name, hints[f.name], f.default, f.metadata["knob"])
                 for f in dataclasses.fields(TimingPolicy))


def timing_flag(name: str) -> str:
    """The command-line flag of the timing field `name` (`--max-seconds`, `--warmup`)."""
    return "--" + (timing_knob(name).flag or name).replace("_", "-")


def user_timing_fields() -> tuple[str, ...]:
    """The timing fields a user may set (those the API describes), in declaration order."""
    return tuple(name for name, _kind, _default, knob in timing_fields() if knob.description)


def timing_knob(name: str) -> Knob:
    """The declaration of the timing field `name` (KeyError for no such field)."""
    for field_name, _kind, _default, knob in timing_fields():
        if field_name == name:
            return knob
    raise KeyError(name)


GPU_TARGET_HALF_WIDTH = 0.003
CPU_TARGET_HALF_WIDTH = 0.015


def default_sides(device: str) -> str:
    """How a cell's two sides share processes when nobody says (`SIDES`).

    CPU: "split". Next to a candidate running between its calls, eager ran slower than
    alone and slower beside ONNX Runtime constant than beside ONNX Runtime tensor (up to
    29% on a 32 MiB-L3 CPU, about 10% at batch 1 on this project's 260 MiB-L3 one), which
    moved constant-vs-tensor speedups by the artefact; timed alone, each side runs as it is
    deployed. GPU: "paired". On an H100 eager's median agreed within 0.1% beside frozen and
    unfrozen inductor (ResNet50 fp16), and pairing rounds in one process gives intervals
    of 0.02-0.2% that separate processes could not.
    """
    return "paired" if device == "cuda" else "split"


def default_timing(device: str) -> TimingPolicy:
    """The timing a cell gets when nobody says otherwise (service cells, `speedwatch bench`).

    Adaptive, over processes: a single process's interval describes its own rounds, not
    what a second run will say (two runs of one spec on this project's CPU landed 4%
    apart, each with a +-1% CI). So a cell is measured in at least 3 processes (the
    interval's t quantile is 12.7 with 2, 4.3 with 3) of a few seconds each, and more are
    added until the comparison with its baseline is decided, within a budget.
    GPU: CUDA-graph replays, 2 s per process (3 processes decide a 3% threshold in about
    6 s of timing on an H100), and a decided cell also reaches a CI half-width of 0.3%
    (`GPU_TARGET_HALF_WIDTH`: three H100 processes gave 0.02-0.18% in 7 of 8 cells, 0.45%
    in one; a fourth process narrows the t interval by about a third). CPU: units of two
    children taking turns (sides=split, benchmarks.turns), 1.5 s of timing a side, at most
    16 units or 45 s of timing. Short units and many of them: on a shared 2-core
    virtual machine the unit-to-unit spread (the processes' own levels, eager's CPU time per call
    moving 84-97 ms between processes) outweighs what longer units gain, and only more
    processes narrow it. A decided CPU cell also reaches a half-width of 1.5%
    (`CPU_TARGET_HALF_WIDTH`, half the default 3% threshold, what a first result must reach
    to judge the next one) or its budget: three units decided a pass at +-4% on a busy
    host, and a baseline that wide leaves the next run undecided.
    """
    if device == "cuda":
        return TimingPolicy(warmup_iters=20, rounds=2000, iters_per_round=10, max_seconds=2.0,
                            min_rounds=5, cuda_graphs=True, processes=3, max_processes=8,
                            budget_seconds=16.0, target_half_width=GPU_TARGET_HALF_WIDTH)
    return TimingPolicy(warmup_iters=5, rounds=200, iters_per_round=5, max_seconds=1.5,
                        min_rounds=5, processes=3, max_processes=16, budget_seconds=45.0,
                        target_half_width=CPU_TARGET_HALF_WIDTH)


@dataclass(frozen=True)
class BenchSpec:
    model: str = "resnet50"
    backend: str = "onnxruntime"
    weights: str = "constant"
    precision: str = "fp32"
    batch_size: int = 1
    shape_mode: str = "static"
    device: str = "cpu"
    image_size: int = 224
    width: int = 64  # channels of the stem; 64 is the standard ResNet
    num_classes: int = 1000
    seed: int = 0
    # the backend's optimization level (OPT_LEVELS), "default" for its own default
    opt_level: str = "default"
    # backend-specific settings passed through (e.g. timing_cache)
    options: dict[str, Any] = field(default_factory=dict)
    timing: TimingPolicy = field(default_factory=TimingPolicy)

    def validate(self) -> BenchSpec:
        try:
            # Absolute `file:` paths are the local bench's; the API refuses them itself.
            model_ref.parse(self.model, allow_absolute=True)
        except model_ref.ModelRefError as exc:
            raise SpecError(f"model: {exc}") from None
        checks: list[tuple[str, object, tuple[object, ...]]] = [
            ("backend", self.backend, BACKENDS),
            ("weights", self.weights, WEIGHTS),
            ("precision", self.precision, PRECISIONS),
            ("shape_mode", self.shape_mode, SHAPE_MODES),
            ("device", self.device, DEVICES),
        ]
        for name, value, allowed in checks:
            if value not in allowed:
                raise SpecError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
        for name, value, lo, hi in [
            ("batch_size", self.batch_size, 1, 1024),
            ("image_size", self.image_size, 32, 1024),
            ("width", self.width, 4, 256),
            ("num_classes", self.num_classes, 1, 100_000),
        ]:
            if not isinstance(value, int) or not lo <= value <= hi:
                raise SpecError(f"{name}: {value!r} must be an integer in [{lo}, {hi}]")
        if self.sides not in SIDES:
            raise SpecError(f"options.sides: {self.sides!r} is not one of {', '.join(SIDES)}")
        if self.child_side is not None and self.child_side not in CHILD_SIDES:
            raise SpecError(f"options.{SIDE_OPTION}: {self.child_side!r} is not one of "
                            f"{', '.join(CHILD_SIDES)}")
        refused = self.timing.refused()
        if refused is not None:
            raise SpecError(refused)
        if self.weights == "refit" and self.backend not in ("tensorrt", "torch_tensorrt"):
            raise SpecError("weights: 'refit' exists only for the tensorrt backends")
        levels = OPT_LEVELS.get(self.backend, ("default",))
        if self.opt_level not in levels:
            raise SpecError(f"opt_level: {self.opt_level!r} is not a level of {self.backend} "
                            f"({', '.join(levels)})")
        if self.precision == "int8" and self.backend not in INT8_BACKENDS:
            raise SpecError(f"precision: 'int8' exists only for {', '.join(INT8_BACKENDS)}")
        return self

    @property
    def opt_level_key(self) -> str:
        """The level as the series key names it: "default" also for the default named."""
        if self.opt_level == OPT_LEVEL_DEFAULTS.get(self.backend):
            return "default"
        return self.opt_level

    @property
    def model_label(self) -> str:
        """Model name plus any non-default geometry: results of other geometry never compare.

        For a model of the user's this is the name alone, as the API predicts it; the
        result's key adds the fingerprint (`label_with`)."""
        return self.label_with(None)

    def label_with(self, model_digest: str | None) -> str:
        """The model's segment of the series key. A built-in model is named with its
        non-default geometry (`-w`, `-i`, `-c`) and never a digest: its code is this
        package's, versioned with it. Any other model is its reference plus "@" and the
        digest of its architecture and input shapes (benchmarks.own_models), which only
        the host that built it can compute; image_size, width and num_classes do not
        apply to it (its factory or archive decides)."""
        try:
            ref: model_ref.ModelRef | None = model_ref.parse(self.model, allow_absolute=True)
        except model_ref.ModelRefError:
            ref = None  # an invalid spec's failed result is still filed under its name
        if ref is not None and not ref.builtin:
            return ref.label(model_digest)
        label = self.model
        if self.width != 64:
            label += f"-w{self.width}"
        if self.image_size != 224:
            label += f"-i{self.image_size}"
        if self.num_classes != 1000:
            label += f"-c{self.num_classes}"
        return label

    @property
    def threads(self) -> int | None:
        """CPU threads both sides use (runner option), None for the library's default."""
        value = self.options.get("threads")
        return None if value is None else int(value)

    @property
    def sides(self) -> str:
        """"split" when each side is timed in processes of its own, else "paired"."""
        return str(self.options.get("sides", "paired"))

    @property
    def child_side(self) -> str | None:
        """The one side a child of a split measurement times, None for both."""
        side = self.options.get(SIDE_OPTION)
        return None if side is None else str(side)

    @property
    def requested_timing_mode(self) -> str:
        """"graphs" when a GPU cell asks for CUDA-graph replays, else "nographs"."""
        return "graphs" if self.device == "cuda" and self.timing.cuda_graphs else "nographs"

    def series_key(self, device_class: str, timing_mode: str | None = None,
                   model_digest: str | None = None) -> str:
        """Stable key of everything that must stay equal for two results to compare.

        `device_class` comes from the fingerprint ("cpu", "nvidia-h100", ...), not the spec,
        because the same spec runs on different hardware. `timing_mode` is what the result
        was timed with (a GPU cell whose capture failed falls back to "nographs"); None
        means what the spec asks for. `model_digest` is the fingerprint of a model of the
        user's (`model_digest_of` the result's fingerprint); None before it is known.
        Package versions are never part of it: comparing them along a series is the
        product.
        """
        return series_key(
            model=self.label_with(model_digest),
            backend=self.backend,
            weights=self.weights,
            precision=self.precision,
            batch_size=self.batch_size,
            shape_mode=self.shape_mode,
            device_class=device_class,
            threads=self.threads,
            timing_mode=timing_mode or self.requested_timing_mode,
            options=measurement_options(self.options, self.opt_level_key, self.timing.builds),
        )

    def model_fields(self) -> dict[str, Any]:
        """The fields that build a built-in model (its part of benchmarks.identity)."""
        return {"model": self.model, "width": self.width, "image_size": self.image_size,
                "num_classes": self.num_classes, "seed": self.seed}

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if data["opt_level"] == "default":
            del data["opt_level"]  # documents and spec hashes from before the axis stay equal
        for name, _kind, default, knob in timing_fields():
            if knob.quiet_default and data["timing"][name] == default:
                del data["timing"][name]  # likewise for the timing fields added later
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSpec:
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"unknown spec fields: {', '.join(sorted(unknown))}")
        timing = data.pop("timing", None) or {}
        tfields = {f.name for f in dataclasses.fields(TimingPolicy)}
        bad = set(timing) - tfields
        if bad:
            raise SpecError(f"unknown timing fields: {', '.join(sorted(bad))}")
        return cls(**data, timing=TimingPolicy(**timing))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


TIMING_MODES = ("graphs", "nographs")


def model_digest_of(fingerprint: Any) -> str | None:
    """The model digest a result's fingerprint records (`fingerprint.model.digest`), None
    when it records none; raises SpecError for one that cannot be a digest (it becomes
    part of a series key)."""
    model = fingerprint.get("model") if isinstance(fingerprint, dict) else None
    if not isinstance(model, dict) or model.get("digest") is None:
        return None
    try:
        return model_ref.check_digest(model["digest"])
    except model_ref.ModelRefError as exc:
        raise SpecError(f"fingerprint.model.digest: {exc}") from None

# How the two sides share processes (spec option "sides"; absent = "paired"):
# - "paired": both sides in every process, rounds alternating (benchmarks.timing.time_paired).
# - "split": each process times ONE side, the other is never run there; processes of the
#   two sides alternate (baseline, candidate, candidate, baseline, ...) and adjacent ones
#   are paired. Eager then runs as it is deployed, alone: next to a candidate that runs
#   between its calls, eager on this project's CPUs ran up to 29% slower beside ONNX
#   Runtime constant than beside ONNX Runtime tensor, an artefact inside the speedup.
#   The option is in the series key (a change of design starts a new series).
SIDES = ("paired", "split")
# Harness-internal option: the side a child process of a split measurement times. Never
# in a stored result's spec (the merged result carries the cell's own spec).
SIDE_OPTION = "_side"
# Harness-internal: set on the spec of a cell's second and later processes, whose evidence a
# merged result does not keep (benchmarks.children.process_spec).
LATER_PROCESS_OPTION = "_later_process"
CHILD_SIDES = ("baseline", "candidate")
# Spec options that only steer the harness or tests, never what is measured.
_NOT_MEASUREMENT_OPTIONS = {"threads"}


def profiled_here(spec: BenchSpec) -> bool:
    """Whether this process takes the profile pass (benchmarks.profile): profiling is on
    and this is a cell's first process (later processes' profiles would be thrown away:
    a merged result keeps the first process's evidence)."""
    return spec.timing.profile and not spec.options.get(LATER_PROCESS_OPTION)


def harness_option(name: str) -> bool:
    """Whether a spec option is the harness's (how the sides share processes, and anything
    starting with "_": test faults, the side a split child times, a later process), never a
    setting a backend should read or refuse."""
    return name == "sides" or name.startswith("_")


def measurement_options(options: dict[str, Any], opt_level: str = "default",
                        builds: str = "pinned") -> str:
    """Options that change what is measured, as one stable key segment ("" for none).

    `threads` has its own segment; options starting with "_" are harness-internal (test
    faults, the side a split child times); `sides=paired`, the default, adds nothing. A
    non-default optimization level joins the segment as `opt_level=<level>`, so every series
    measured before the axis existed keeps its key. Builds as shipped join it as
    `builds=as-shipped`: their speedup is another quantity (a fresh build's, spread over
    what its autotuner may pick; on an H100 3-5% slower at batch 32 than pinned builds),
    so a switch starts a new series rather than a false change.
    """
    items = sorted(
        [(str(k), v) for k, v in options.items()
         if k not in _NOT_MEASUREMENT_OPTIONS and not str(k).startswith("_")
         and not (k == "sides" and v == "paired")]  # the default design: no segment
        + ([("opt_level", opt_level)] if opt_level != "default" else [])
        + ([("builds", builds)] if builds != "pinned" else [])
    )
    return ",".join(f"{k}={json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v}"
                    for k, v in items)


def series_key(
    *,
    model: str,
    backend: str,
    weights: str,
    precision: str,
    batch_size: int,
    shape_mode: str,
    device_class: str,
    threads: int | None = None,
    timing_mode: str = "nographs",
    options: str = "",
) -> str:
    """model/backend/weights/precision/bsN/shape/device/tN|tauto/graphs|nographs[/options]."""
    key = (
        f"{model}/{backend}/{weights}/{precision}/bs{batch_size}/{shape_mode}/{device_class}"
        f"/{'tauto' if threads is None else f't{threads}'}/{timing_mode}"
    )
    return f"{key}/{options}" if options else key


SERIES_KEY_FIELDS = ("model", "backend", "weights", "precision", "batch_size", "shape_mode",
                     "device_class", "threads", "timing_mode", "options")
_KEY_SHAPE = "model/backend/weights/precision/bsN/shape/device/tN|tauto/graphs|nographs[/options]"


def parse_series_key(key: str) -> dict[str, str | int | None]:
    """The axes of a key; raises SpecError naming the expected shape."""
    parts = key.split("/", 9)
    ok = (
        len(parts) in (9, 10)
        and parts[4].startswith("bs") and parts[4][2:].isdigit()
        and (parts[7] == "tauto" or (parts[7].startswith("t") and parts[7][1:].isdigit()))
        and parts[8] in TIMING_MODES
        and all(parts)
    )
    if not ok:
        raise SpecError(f"series_key: {key!r} is not {_KEY_SHAPE}")
    out: dict[str, str | int | None] = dict(zip(SERIES_KEY_FIELDS, parts, strict=False))
    out["batch_size"] = int(parts[4][2:])
    out["threads"] = None if parts[7] == "tauto" else int(parts[7][1:])
    out["options"] = parts[9] if len(parts) == 10 else ""
    return out
