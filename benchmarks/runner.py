"""Measure one spec in this process: eager baseline vs the backend's candidate, paired.

Owns the order of a measurement (validate, availability, build, reference, compile,
accuracy, timing, statistics, memory, evidence, fingerprint) and the promise that a
backend problem never escapes as an exception: it becomes a result with status "failed"
(or "skipped" when the backend cannot run here) and a one-line reason.

What the result holds beyond timing:
- accuracy: candidate vs the eager fp32 reference (TF32 off); `evidence.baseline_accuracy`
  is eager at the spec's precision against the same reference, for scale.
- compile_seconds: `backend.compile` plus the first candidate call (lazy compilers such as
  torch.compile do their work there); the split is in `evidence.compile`.
- peak_memory_bytes: on CUDA the allocator peak (`max_memory_allocated`, reset per phase)
  during "baseline_build" (build, reference, first inference with cuDNN autotuning),
  "candidate_compile" (compile + first call), and one steady-state inference of each side,
  "baseline" and "candidate" (both models' weights are resident then). Memory a backend
  allocates outside PyTorch (ONNX Runtime, TensorRT) does not show there. On CPU, growth
  of the process's max RSS over the build phase and over compile + first candidate call;
  max RSS only rises, so "baseline"/"candidate" repeat those two.
- evidence.kernels_per_inference (CUDA): profiler-counted kernels per call, both sides,
  measured on the plain callables (not CUDA-graph replays).
- options["threads"] (runner-level): torch intra-op threads for both sides.
The runner calls the candidate under torch.inference_mode() (first call and timing alike).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from benchmarks import (
    build,
    build_cache,
    fingerprint,
    host,
    identity,
    launch_gate,
    launch_pin,
    prepared,
    stats,
)
from benchmarks.accuracy import compare
from benchmarks.after_timing import count_kernels, side_profiles
from benchmarks.backends import BackendUnavailable, get_backend
from benchmarks.clocks import CUDA_CLOCK, SIDE_WALL_ROUNDS, THREAD_CLOCK, WALL_CLOCK
from benchmarks.eager_model import eager_model, model_identity_of
from benchmarks.process_state import Peak, now_iso, one_line, process_age, process_start
from benchmarks.result import BenchResult
from benchmarks.spec import LATER_PROCESS_OPTION, BenchSpec, SpecError, profiled_here
from benchmarks.timing import capture_cuda_graph, time_paired
from benchmarks.turns import ChildTurns


class Phases:
    """Where a process's seconds went, phase by phase (`evidence.phases`): what to shorten
    when a cell takes long, and the build's share of it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        age = process_age()
        if age is not None:
            self.seconds["start"] = round(age, 3)
        self._mark = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._mark, 3)
        self._mark = now


def _failed_or_skipped(
    spec: BenchSpec, status: str, reason: str, device_class: str, started: str, t0: float,
    fp: dict[str, Any] | None = None, spec_dict: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
) -> BenchResult:
    """A result without a measurement. `model`: the fingerprint of a model of the user's
    built before the failure, so the result joins that model's series."""
    fp = dict(fp or {})
    if model:
        fp["model"] = model
    return BenchResult(
        series_key=spec.series_key(device_class, model_digest=(model or {}).get("digest")),
        spec=spec_dict if spec_dict is not None else spec.to_dict(),
        status=status,  # type: ignore[arg-type]
        reason=reason,
        fingerprint=fp or {},
        started_at=started,
        finished_at=now_iso(),
        duration_seconds=time.perf_counter() - t0,
    )


def run_spec(spec: BenchSpec, *, slow_candidate: float = 0.0) -> BenchResult:
    """One measured result for `spec`; never raises for a bad spec or a backend problem.

    `slow_candidate` is a test-only fault (benchmarks.child passes it only when faults are
    allowed): each timed candidate call is stretched by that fraction of its own duration,
    a real and deterministic drop of the speedup, recorded in `evidence.fault`."""
    started, t0 = now_iso(), time.perf_counter()
    try:
        spec.validate()
    except SpecError as exc:
        return _failed_or_skipped(spec, "failed", f"invalid spec: {exc}",
                                  "cuda" if spec.device == "cuda" else "cpu", started, t0)
    if spec.timing.processes > 1:
        # Repeats inside one process share dynamo's cache, cuDNN's choices and the allocator:
        # they are not the independent processes the combined CI assumes.
        return _failed_or_skipped(
            spec, "failed", f"timing.processes={spec.timing.processes}: processes > 1 needs "
            "isolation (run_isolated or `speedwatch bench --isolate`)",
            "cuda" if spec.device == "cuda" else "cpu", started, t0)
    if spec.sides == "split" and spec.child_side is None:
        # This process would have to run both sides: the design exists to keep them apart.
        return _failed_or_skipped(
            spec, "failed", "options.sides=split times each side in processes of its own: "
            "it needs isolation (run_isolated or `speedwatch bench --isolate`)",
            "cuda" if spec.device == "cuda" else "cpu", started, t0)
    if spec.device == "cuda" and not torch.cuda.is_available():
        return _failed_or_skipped(spec, "skipped", "CUDA is not available here", "cuda",
                                  started, t0)
    device_class = fingerprint.device_class(spec.device)
    try:
        backend = get_backend(spec.backend)
        why_not = backend.unavailable_reason(spec)
    except ImportError as exc:
        why_not = f"backend {spec.backend} cannot be imported: {one_line(exc)}"
    except Exception as exc:
        return _failed_or_skipped(spec, "failed", f"availability check: {one_line(exc)}",
                                  device_class, started, t0)
    if why_not is not None:
        return _failed_or_skipped(spec, "skipped", why_not, device_class, started, t0,
                                  fp=_safe_collect(spec.device))
    model: dict[str, Any] = {}  # filled by _measure once a model of the user's is built
    try:
        return _measure(spec, backend, device_class, started, t0, slow_candidate, model)
    except BackendUnavailable as exc:
        return _failed_or_skipped(spec, "skipped", str(exc) or "backend unavailable",
                                  device_class, started, t0, fp=_safe_collect(spec.device),
                                  model=model)
    except _StageError as exc:
        if spec.device == "cuda":
            torch.cuda.empty_cache()
        return _failed_or_skipped(spec, "failed", f"{exc.stage}: {one_line(exc.cause)}",
                                  device_class, started, t0, fp=_safe_collect(spec.device),
                                  model=model)


class _StageError(Exception):
    """Carries which step failed, so the reason reads 'compile: ...' not just the error."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        super().__init__(stage)
        self.stage = stage
        self.cause = cause


def _safe_collect(device: str) -> dict[str, Any]:
    try:
        return fingerprint.collect(device)
    except Exception as exc:
        return {"error": one_line(exc)}


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    try:
        yield
    except (BackendUnavailable, _StageError):
        raise
    except Exception as exc:
        raise _StageError(name, exc) from exc


def _compile_candidate(
    spec: BenchSpec, backend: Any, model: torch.nn.Module, x: torch.Tensor,
    reference: torch.Tensor, tol: float, on_cuda: bool, evidence: dict[str, Any],
    peak: dict[str, int], model_identity: str | None, environment: dict[str, Any],
) -> tuple[Any, Any, float]:
    """Build (or load from the host's build cache) the candidate, run it once, check its
    accuracy and steady-state memory: (compiled, accuracy, compile seconds). Fills
    `evidence["compile"]`, `evidence["build"]` and `peak`."""
    with _stage("compile"):
        # A private copy: a backend that rewrites modules in place must not touch the baseline.
        candidate_model = copy.deepcopy(model)
        with Peak(on_cuda) as p_compile:
            tc = time.perf_counter()
            compiled, evidence["build"] = build_cache.built_or_loaded(
                spec, backend, candidate_model, x, lambda: copy.deepcopy(model),
                model_identity, environment=environment)
            if on_cuda:
                torch.cuda.synchronize()
            compile_call = time.perf_counter() - tc
    with _stage("first run"), Peak(on_cuda) as p_first:
        tf = time.perf_counter()
        with torch.inference_mode():
            candidate_out = compiled.run(x)
        if on_cuda:
            torch.cuda.synchronize()
        first_call = time.perf_counter() - tf
    # Lazy compilers (torch.compile) do their work in the first call: count it.
    evidence["compile"] = {"compile_call_seconds": compile_call, "first_call_seconds": first_call}
    peak["candidate_compile"] = max(p_compile.value, p_first.value) if on_cuda \
        else p_compile.value + p_first.value

    with _stage("accuracy"):
        accuracy = compare(candidate_out, reference, tol)
        del candidate_out

    with _stage("peak memory"):
        # Steady state, one inference per side, after autotuning and lazy compilation.
        with Peak(on_cuda) as p_steady, torch.inference_mode():
            model(x)
        peak["baseline"] = p_steady.value if on_cuda else peak["baseline_build"]
        with Peak(on_cuda) as p_cand, torch.inference_mode():
            compiled.run(x)
        peak["candidate"] = p_cand.value if on_cuda else peak["candidate_compile"]
    return compiled, accuracy, compile_call + first_call


@dataclass
class _Sides:
    """What a process prepared before its timing: the model (None once the candidate runs
    alone), its input, the candidate and its accuracy, and the interpreter's software."""

    model: Any
    x: Any
    compiled: Any
    accuracy: Any
    compile_seconds: float | None
    environment: dict[str, Any]
    # the processes holding a CUDA context on this GPU once this one had its own
    gpu_first: set[int] | None = None


def _measure(
    spec: BenchSpec, backend: Any, device_class: str, started: str, t0: float,
    slow_candidate: float = 0.0, model_info: dict[str, Any] | None = None,
) -> BenchResult:
    """Prepare, time, then gather the evidence: each phase lapped in `evidence.phases`."""
    on_cuda = spec.device == "cuda"
    evidence: dict[str, Any] = {}
    phases = Phases()
    peak: dict[str, int] = {}
    _set_process_options(spec, evidence)
    model_info = model_info if model_info is not None else {}

    prep = _prepare_sides(spec, backend, model_info, evidence, peak, phases, on_cuda)
    fns = _side_callables(prep, spec, slow_candidate, evidence)
    timed = _time_sides(spec, fns, prep, evidence, phases, on_cuda)
    samples = timed.samples

    with _stage("statistics"):
        base_summary = stats.summary(samples.baseline_ms) if samples.baseline_ms else None
        cand_summary = stats.summary(samples.candidate_ms) if samples.candidate_ms else None
        speedup = stats.speedup_ci(
            samples.baseline_ms, samples.candidate_ms,
            resamples=spec.timing.bootstrap_resamples, seed=spec.timing.seed,
        ) if spec.child_side is None else None

    _after_timing(spec, {name: fn for name, fn in fns.items() if name in timed.graphs}, prep,
                  evidence, phases, on_cuda)
    fp = fingerprint.finish(_safe_collect(spec.device), *timed.nvml)
    if prep.compiled is not None and prep.compiled.versions:
        fp["backend_versions"] = dict(prep.compiled.versions)
    if model_info:
        fp["model"] = dict(model_info)
    fp["software"] = _software(spec, prep.environment, model_info, evidence,
                               timed.distributions, spec.child_side)
    phases.lap("evidence")
    evidence["phases"] = phases.seconds
    evidence["process_start"] = process_start()
    accuracy = prep.accuracy
    reason = None
    if accuracy is not None and not accuracy.passed:
        reason = (f"accuracy: relative L2 error {accuracy.rel_l2:.3g} exceeds the "
                  f"{spec.precision} tolerance {accuracy.tolerance:.3g}")
    return BenchResult(
        series_key=spec.series_key(fp.get("device_class", device_class), timed.mode,
                                   model_digest=model_info.get("digest")),
        spec=spec.to_dict(),
        status="ok",
        reason=reason,
        baseline_samples_ms=samples.baseline_ms,
        candidate_samples_ms=samples.candidate_ms,
        baseline=base_summary,
        candidate=cand_summary,
        speedup=speedup,
        accuracy=accuracy,
        compile_seconds=prep.compile_seconds,
        peak_memory_bytes=peak,
        evidence=evidence,
        fingerprint=fp,
        started_at=started,
        finished_at=now_iso(),
        duration_seconds=time.perf_counter() - t0,
    )


def _prepare_sides(spec: BenchSpec, backend: Any, model_info: dict[str, Any],
                   evidence: dict[str, Any], peak: dict[str, int], phases: Phases,
                   on_cuda: bool) -> _Sides:
    """Build eager and compile the candidate (or the one side a split child times)."""
    # this interpreter's software, once: the build cache's key and the result's identity
    environment = identity.environment_identity()
    phases.lap("identity")
    with _stage("build"):
        model, x, reference, tol = eager_model(spec, model_info, environment, evidence, peak)
    phases.lap("model")
    side = spec.child_side  # None: both sides here; else one side of a split measurement
    # the weights are on the GPU: this process's own context is among these
    prep = _Sides(model, x, None, None, None, environment,
                  fingerprint.gpu_processes() if on_cuda else None)
    if side != "baseline":
        prep.compiled, prep.accuracy, prep.compile_seconds = _compile_candidate(
            spec, backend, model, x, reference, tol, on_cuda, evidence, peak,
            model_identity_of(spec, model_info), environment)
    if side == "candidate":
        # The candidate runs alone, as deployed: eager's weights leave the process (the
        # candidate holds its own copy) and eager is never called here.
        prep.model = None
        del model
    elif side == "baseline":
        with _stage("peak memory"), Peak(on_cuda) as p_steady, torch.inference_mode():
            model(x)
        peak["baseline"] = p_steady.value if on_cuda else peak["baseline_build"]
    phases.lap("compile")
    return prep


def _side_callables(prep: _Sides, spec: BenchSpec, slow_candidate: float,
                    evidence: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """The callables this process times: both, or the one side of a split child."""
    model, x, compiled = prep.model, prep.x, prep.compiled

    def baseline_fn() -> torch.Tensor:
        return model(x)

    def candidate_fn() -> torch.Tensor:
        return compiled.run(x)

    side = spec.child_side
    if slow_candidate > 0 and side != "baseline":
        candidate_fn = _slowed(candidate_fn, slow_candidate, spec, evidence)
    if side is None:
        return {"baseline": baseline_fn, "candidate": candidate_fn}
    return {side: baseline_fn if side == "baseline" else candidate_fn}


@dataclass
class _Timed:
    """A timing's samples, the sides captured as CUDA graphs, the mode, the distributions
    the timed code had loaded, and NVML's readings around it (for the fingerprint)."""

    samples: Any
    graphs: dict[str, bool]
    mode: str
    distributions: Any
    nvml: tuple[Any, Any]


def _time_sides(spec: BenchSpec, fns: dict[str, Callable[[], Any]], prep: _Sides,
                evidence: dict[str, Any], phases: Phases, on_cuda: bool) -> _Timed:
    """The turn, the capture, the pin and the timing itself."""
    # A child started ahead of its turn (benchmarks.prepared) waits here: everything before
    # prepares, everything after times or belongs to the timing (capture, counts, profiles).
    if prepared.wait_for_turn() > 0:
        phases.lap("gate")
    # no GPU process of the host ends from the capture to the timing's end (launch_gate)
    with launch_gate.timing() if on_cuda else contextlib.nullcontext() as gate_wait:
        if gate_wait is not None and gate_wait >= 0.001:
            phases.lap("launch_gate")
        return _capture_and_time(spec, fns, prep, evidence, phases, on_cuda)


def _capture_and_time(spec: BenchSpec, fns: dict[str, Callable[[], Any]], prep: _Sides,
                      evidence: dict[str, Any], phases: Phases, on_cuda: bool) -> _Timed:
    policy = spec.timing
    with _stage("cuda graph capture"):
        timed, graphs = _captured(dict(fns), prep.compiled, on_cuda and policy.cuda_graphs,
                                  evidence)
    mode = "graphs" if all(graphs.values()) and graphs else "nographs"
    phases.lap("capture")
    # The timed thread on its own core (benchmarks.host), pinned here and not at start:
    # compilers before this point may use every core.
    pinned = host.apply_pin()
    # One-thread CPU cells are timed by the thread's CPU time (benchmarks.timing).
    cpu_clock = THREAD_CLOCK if not on_cuda and spec.threads == 1 else WALL_CLOCK
    nvml_start = fingerprint.collect_nvml() if on_cuda else None
    # the children preparing beside this one (benchmarks.prepared) stop while it times
    quiet_wait = prepared.quiet_please()
    if on_cuda and launch_pin.enabled():
        # its graphs, captured now, into the faster launch state (benchmarks.launch_pin),
        # read while the children preparing beside it are stopped
        evidence["launch_pin"] = _pinned()
        phases.lap("launch_pin")
    gpu_before = fingerprint.gpu_processes() if prep.gpu_first is not None else None
    with _stage("timing"):
        samples = _time(spec, timed, spec.child_side, cpu_clock)
    nvml_end = fingerprint.collect_nvml() if on_cuda else None
    _record_gpu_processes(prep.gpu_first, gpu_before, evidence)
    prepared.timed()
    phases.lap("timing")
    if quiet_wait > 0:
        phases.seconds["quiet_wait"] = round(quiet_wait, 3)
    # what this process ran, read before passes that import more (the profile)
    timed_distributions = identity.loaded_distributions(prep.environment["distributions"])
    evidence["timing"] = _timing_record(samples, policy, graphs, mode, on_cuda, pinned,
                                        spec.child_side)
    return _Timed(samples, graphs, mode, timed_distributions, (nvml_start, nvml_end))


def _record_gpu_processes(first: set[int] | None, before: set[int] | None,
                          evidence: dict[str, Any]) -> None:
    """Whether another process made a CUDA context on this GPU while this one measured
    (benchmarks.fingerprint.newer_gpu_processes): its timing is then not that of a process
    alone on the GPU, and the cell measures the unit again (benchmarks.adaptive)."""
    if first is None:
        return
    after = fingerprint.gpu_processes()
    newer = fingerprint.newer_gpu_processes(first, before, after)
    if newer is not None:
        # the schema's gpu_process_schema.GpuProcesses; the child writes plain JSON
        evidence["gpu_processes"] = {"present": len(first), "newer": newer}


def _after_timing(spec: BenchSpec, sides: dict[str, Callable[[], Any]], prep: _Sides,
                  evidence: dict[str, Any], phases: Phases, on_cuda: bool) -> None:
    """Kernel counts, profiles and the build's record: passes after the timing, never a
    cause to lose the measurement."""
    # Kernels per inference are the first process's to count: a cell's merged result keeps
    # the first process's evidence (benchmarks.isolation), and the profiler costs a later
    # process a second or two for a number nobody reads. Each side's profile
    # (benchmarks.profile), in a pass after the timing, is the first process's too: it
    # explains a change; it never is one. A side profiled through torch.profiler on a GPU
    # counts its kernels in that same pass; the others are counted in a pass of their own.
    counted: dict[str, float] = {}
    if profiled_here(spec):
        with _stage("profile"):
            evidence.update(side_profiles(sides, prep.compiled, prep.x, on_cuda, counted))
        phases.lap("profile")
    if on_cuda and not spec.options.get(LATER_PROCESS_OPTION):
        try:
            evidence["kernels_per_inference"] = {
                name: counted[name] if name in counted else count_kernels(fn)
                for name, fn in sides.items()}
        except Exception as exc:  # evidence is a bonus; never lose the measurement over it
            evidence["kernels_per_inference_error"] = one_line(exc)
        phases.lap("kernels")
    if prep.compiled is not None:
        _add_build_evidence(prep.compiled, spec.timing.builds, evidence)


def _set_process_options(spec: BenchSpec, evidence: dict[str, Any]) -> None:
    """The runner-level options that set this process up for both sides alike."""
    threads = spec.options.get("threads")
    if threads is not None:
        # Both sides share the process's intra-op pool size (the ORT backend defaults its
        # pool to torch's), so pinning it keeps the comparison fair.
        torch.set_num_threads(int(threads))
    if spec.device == "cuda":
        # Best conv algorithms for eager too: the baseline is eager as people deploy it.
        # Runner-level option `cudnn_benchmark`, off by default (PyTorch's own default).
        # Measured on an H200 (experiments/process_spread.py, ResNet50 fp16 bs32,
        # inductor frozen, CUDA graphs, 4 processes each): with cuDNN timing its algorithms
        # in every process the speedup spread 2.11% between processes (CI +-0.03% each);
        # with heuristics it spread 0.09%, and both sides ran faster.
        benchmark = str(spec.options.get("cudnn_benchmark", False)).lower() in ("1", "true")
        torch.backends.cudnn.benchmark = benchmark
        evidence["cudnn_benchmark"] = benchmark


def _slowed(candidate_fn: Callable[[], torch.Tensor], slow_candidate: float, spec: BenchSpec,
            evidence: dict[str, Any]) -> Callable[[], torch.Tensor]:
    """The candidate with extra work, as a slower kernel does (the test-only fault): busy,
    not asleep (a sleep's wake-up latency would add noise of its own), and on the clock the
    cell is timed by. A one-thread CPU cell counts its thread's CPU time, and a wait to a
    wall-clock deadline does less work when a co-tenant preempts it: beside two busy
    co-tenants a 4.5% fault timed that way measured -2.9%."""
    work_clock = time.thread_time if spec.device != "cuda" and spec.threads == 1 \
        else time.perf_counter
    evidence["fault"] = {"slow_candidate": slow_candidate,
                         "clock": "thread" if work_clock is time.thread_time else "wall"}

    def slower() -> torch.Tensor:
        begin = work_clock()
        out = candidate_fn()
        until = begin + (work_clock() - begin) * (1 + slow_candidate)
        while work_clock() < until:
            pass
        return out
    return slower


def _pinned() -> dict[str, Any]:
    """benchmarks.launch_pin.pin on this process's GPU; its failure is a record, never a
    lost measurement (the cell's launch-state rule still sees the process)."""
    try:
        return launch_pin.pin(torch.cuda.current_device())
    except Exception as exc:
        return {"error": f"the launch pin failed: {one_line(exc)}"}


def _captured(timed: dict[str, Callable[[], Any]], compiled: Any, wanted: bool,
              evidence: dict[str, Any]) -> tuple[dict[str, Callable[[], Any]], dict[str, bool]]:
    """The sides as CUDA-graph replays where `wanted` and possible, and which are. Both
    sides replay graphs or neither does: a graphed eager against a launched candidate would
    measure launch overhead on one side only."""
    graphs = {name: False for name in timed}
    fallback: str | None = None
    if wanted:
        if "candidate" in timed and not compiled.cuda_graph_safe:
            fallback = "the backend says its program cannot be captured"
        else:
            try:
                with torch.inference_mode():
                    captured = {name: capture_cuda_graph(fn) for name, fn in timed.items()}
                timed = captured
                graphs = {name: True for name in timed}
            except Exception as exc:
                fallback = f"capture failed: {one_line(exc)}"
                torch.cuda.synchronize()
    if fallback is not None:
        evidence["cuda_graphs_fallback"] = fallback
    return timed, graphs


def _time(spec: BenchSpec, timed: dict[str, Callable[[], Any]], side: str | None,
          cpu_clock: str) -> Any:
    """Both sides in alternating rounds, or, in a split child, this side in turns with the
    other child (its samples filed under its own side)."""
    if side is None:
        return time_paired(timed["baseline"], timed["candidate"], spec.timing,
                           device=spec.device, cpu_clock=cpu_clock)
    samples = time_paired(timed[side], None, spec.timing, device=spec.device,
                          cpu_clock=cpu_clock, turns=ChildTurns.from_env())
    if side == "candidate":
        samples = replace(samples, baseline_ms=[], candidate_ms=samples.baseline_ms,
                          wall_baseline_ms=[], wall_candidate_ms=samples.wall_baseline_ms)
    return samples


def _timing_record(samples: Any, policy: Any, graphs: dict[str, bool], mode: str,
                   on_cuda: bool, pinned: Any, side: str | None) -> dict[str, Any]:
    """`evidence.timing`: how the rounds were timed and what stopped them."""
    return {
        "rounds": samples.rounds,
        "iters_per_round": max(1, policy.iters_per_round),
        "stopped_by": samples.stopped_by,
        "timing_seconds": samples.timing_seconds,
        "cuda_graphs": graphs,
        "mode": mode,
        "warmup_seconds": samples.warmup_seconds,
        "clock": CUDA_CLOCK if on_cuda else samples.clock,
        **({"clock_fallback": samples.clock_fallback} if samples.clock_fallback else {}),
        **({"wall": wall} if (wall := samples.wall_record()) else {}),
        **({"window": list(samples.window)} if samples.window else {}),
        **({"pinned_cores": pinned} if pinned else {}),
        **({"side": side} if side is not None else {}),
        # a split child's own wall rounds, for the join should the other side fall back to
        # the wall clock (benchmarks.split_sides.join_sides removes them)
        **({SIDE_WALL_ROUNDS: samples.wall_baseline_ms or samples.wall_candidate_ms}
           if side is not None and samples.clock == THREAD_CLOCK else {}),
    }


def _software(spec: BenchSpec, environment: dict[str, Any], model_info: dict[str, Any],
              evidence: dict[str, Any], timed_distributions: Any,
              side: str | None) -> dict[str, Any]:
    """What code ran (benchmarks.identity): equal identities, the same software; with each
    side's own, as this process ran it (a split child runs one side)."""
    model_id = identity.model_identity(spec.model_fields(), model_info.get("digest"))
    software = identity.software_identity(environment, model=model_id,
                                          build=evidence.get("build_fingerprint"))
    software["sides"] = {
        name: identity.side_identity(environment, name, loaded=timed_distributions,
                                     model=model_id, build=evidence.get("build_fingerprint"))
        for name in ((side,) if side is not None else ("baseline", "candidate"))}
    return software


def _add_build_evidence(compiled: Any, builds: str, evidence: dict[str, Any]) -> None:
    """The backend's own evidence and what its build chose, hashed (benchmarks.build):
    equal fingerprints, the same code."""
    evidence.update(compiled.evidence)
    evidence["build"] = {"mode": builds, **(evidence.get("build") or {})}
    if compiled.build_choices is not None:
        evidence["build_fingerprint"] = build.fingerprint(compiled.build_choices)
        evidence["build_choices"] = compiled.build_choices
