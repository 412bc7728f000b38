"""The timing policy: how long and how often a cell is measured, each field declared once
with its bounds and what it means to a user (`Knob`). The API's request, the result
document's `spec.timing`, the project file's [timing] table, BenchSpec.validate and the
command-line flags are all made from this declaration (benchmarks.timing_schema,
cli.timing_flags); `default_timing` is what a cell gets when nobody says otherwise."""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmarks.build import BUILDS

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


def split_refused(sides: str | None, device: str) -> str | None:
    """Why `sides` cannot serve a cell on `device`, or None. Split sides are for CPU cells:
    on a GPU the two sides' processes share it, and a process's CUDA graphs run faster once
    another process makes a CUDA context on its GPU (eager ResNet50 at batch 1: 1.011 to
    0.893 ms on an H200, benchmarks.fingerprint.newer_gpu_processes), so the side whose
    context came first would be timed in another state than the other."""
    if sides != "split" or device == "cpu":
        return None
    return ("split is for CPU cells: on a GPU the two sides' processes would share it, and "
            "a process's CUDA graphs run up to 12% faster once another process makes a CUDA "
            "context on its GPU, so one side would be timed in another state; on a GPU "
            "both sides share each process (paired)")


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
