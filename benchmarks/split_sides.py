"""One unit of a spec (`run_unit`): one child timing both sides, or, with
`options.sides == "split"`, two children alive together, one per side, taking turns round
by round under a referee (benchmarks.turns), joined into one result whose speedup pairs
their rounds (`join_sides`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import host, identity, stats
from benchmarks.children import Child, failed_result, process_spec, run_one, start_child
from benchmarks.clocks import SIDE_WALL_ROUNDS, WALL_CLOCK
from benchmarks.merging import same_model
from benchmarks.result import BenchResult, ResultError
from benchmarks.spec import (
    CHILD_SIDES,
    SIDE_OPTION,
    BenchSpec,
    model_digest_of,
)
from benchmarks.turns import TURN_ENV, Referee, RefereeTimeout, Side, SideEnded


def run_unit(
    spec: BenchSpec, index: int, *, timeout_s: float, python: str,
    env: dict[str, str] | None, cwd: str | None,
) -> BenchResult:
    """Measure unit `index` (0-based) of `spec`: one child process timing both sides, or,
    for `options.sides == "split"`, two children alive together, one per side, taking
    turns round by round under a referee (benchmarks.turns; baseline first in even units,
    candidate first in odd ones), joined into one result whose speedup pairs their rounds
    (`join_sides`). A child that does not end ok ends the unit with its reason, naming its
    side. Either way `fingerprint.host_load` says how busy other processes kept the host
    while the unit was timed (benchmarks.host)."""
    time.sleep(spec.timing.rest_seconds)  # the host rests before each unit (0: none)
    one = process_spec(spec, index)
    if spec.sides != "split":
        return run_one(one, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
    return _run_turns(one, index, timeout_s=timeout_s, python=python, env=env, cwd=cwd)


def _run_turns(
    one: BenchSpec, index: int, *, timeout_s: float, python: str,
    env: dict[str, str] | None, cwd: str | None,
) -> BenchResult:
    """A split unit: both sides' children at once, refereed (see run_unit)."""
    order = CHILD_SIDES if index % 2 == 0 else tuple(reversed(CHILD_SIDES))
    started = time.monotonic()
    # the two sides never time at once, so they share the one core a side would get
    pin = host.pin_cores(one.device, one.threads)
    children: dict[str, Child] = {}
    sides: list[Side] = []
    with tempfile.TemporaryDirectory(prefix="speedwatch-bench-") as tmp:
        try:
            not_started = _start_sides(one, order, Path(tmp), children, sides, python=python,
                                       env=env, cwd=cwd, pin=pin)
            if not_started is not None:
                return not_started
            deadline = started + 2 * timeout_s
            monitor = host.LoadMonitor(pids=lambda: [c.proc.pid for c in children.values()],
                                       cores=host.load_cores(one.device))
            ended: str | None = None
            refereed = None
            with monitor:
                try:
                    refereed = Referee(sides, one.timing, deadline=deadline).run()
                except SideEnded as exc:
                    ended = exc.side
                except RefereeTimeout:
                    ended = "timeout"
                if ended is None:
                    for child in children.values():
                        child.wait(max(1.0, deadline - time.monotonic()))
            if ended is not None or any(c.timed_out for c in children.values()):
                return _ended_early(one, children, ended, started, timeout_s)
            results = {name: child.finish(started) for name, child in children.items()}
        finally:
            for side_ends in sides:
                for fd in (side_ends.to_child, side_ends.from_child):
                    with contextlib.suppress(OSError):
                        os.close(fd)
            for child in children.values():
                child.kill()
    for side in order:
        if results[side].status != "ok":
            bad = results[side]
            bad.spec = one.to_dict()
            bad.reason = f"{side} side: {bad.reason or bad.status}"
            return bad
    try:
        joined = join_sides(one, results["baseline"], results["candidate"], order=list(order))
    except (stats.StatsError, ResultError) as exc:
        return failed_result(one, f"joining the two sides: {exc}", "", time.monotonic())
    assert refereed is not None
    load = monitor.load(refereed.started, refereed.finished)
    if load is not None:
        joined.fingerprint["host_load"] = load.to_dict()
    return joined


def _start_sides(one: BenchSpec, order: tuple[str, ...], tmp: Path, children: dict[str, Child],
                 sides: list[Side], *, python: str, env: dict[str, str] | None,
                 cwd: str | None, pin: list[int]) -> BenchResult | None:
    """Each side's child with its two turn pipes (into `children` and `sides`, so the caller
    closes and kills them whatever happens); a child that could not start is the unit's
    failure."""
    for side in order:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            child = start_child(
                replace(one, options={**one.options, SIDE_OPTION: side}),
                tmp / side, python=python, env=env, cwd=cwd, pin=pin,
                extra_env={TURN_ENV: f"{to_child_r},{from_child_w}"},
                pass_fds=(to_child_r, from_child_w))
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        if isinstance(child, BenchResult):  # could not start
            os.close(to_child_w)
            os.close(from_child_r)
            child.reason = f"{side} side: {child.reason}"
            child.spec = one.to_dict()
            return child
        children[side] = child
        sides.append(Side(side, child.proc.pid, to_child_w, from_child_r))
    return None


def _ended_early(one: BenchSpec, children: dict[str, Child], ended: str | None,
                 started: float, timeout_s: float) -> BenchResult:
    """The unit's failure when the turns timed out (`ended` "timeout" or a child timed out)
    or a side ended before the referee said stop."""
    if ended in (None, "timeout") or any(c.timed_out for c in children.values()):
        for child in children.values():
            child.kill()
        return failed_result(one, f"timed out after {2 * timeout_s:g}s (two sides taking "
                             "turns)", "", started)
    assert ended is not None
    children[ended].wait(30.0)
    for name, child in children.items():
        if name != ended:
            child.kill()
    result = children[ended].finish(started)
    if result.status == "ok":  # it stopped early of its own accord
        result = failed_result(one, "ended before the referee said stop", "", started)
    result.spec = one.to_dict()
    result.reason = f"{ended} side: {result.reason or result.status}"
    return result


def join_sides(spec: BenchSpec, baseline: BenchResult, candidate: BenchResult, *,
               order: list[str]) -> BenchResult:
    """One unit's result from the two children of a split measurement.

    Samples, summary and memory of each side from its own child; the speedup is the ratio
    of their medians with a paired round bootstrap (round i of the two children ran back
    to back under the referee: benchmarks.turns);
    accuracy, compile time, backend evidence and fingerprint from the candidate's child
    (it built both models), NVML readings from the first and last child; kernels per
    inference of each side from its own child; `evidence.sides` says which child timed
    what, when, in which order. Both sides must have been timed alike (CUDA graphs or not):
    otherwise the unit fails rather than compare a replayed side with a launched one.
    """
    same_model([baseline, candidate])
    sides_software = [identity.of(r.fingerprint) for r in (baseline, candidate)]
    if all(sides_software) and len({str(s["environment"]) for s in sides_software
                                    if s is not None}) > 1:
        raise ResultError("the two sides ran in different environments")
    tb = baseline.evidence.get("timing") or {}
    tc = candidate.evidence.get("timing") or {}
    if tb.get("mode") != tc.get("mode"):
        raise ResultError(f"the sides were timed differently (baseline {tb.get('mode')}, "
                          f"candidate {tc.get('mode')}): measure with sides=paired")
    policy = spec.timing
    base_rounds, cand_rounds = baseline.baseline_samples_ms, candidate.candidate_samples_ms
    base_summary, cand_summary = baseline.baseline, candidate.candidate
    fallback = None
    if tb.get("clock") != tc.get("clock"):
        # One side fell back to the wall clock (other threads of its process worked beside
        # the timed one): both sides are compared by the wall clock, which each child kept.
        base_rounds, cand_rounds = (_wall_rounds(tb, base_rounds, "baseline"),
                                    _wall_rounds(tc, cand_rounds, "candidate"))
        base_summary, cand_summary = stats.summary(base_rounds), stats.summary(cand_rounds)
        fallen = "baseline" if tb.get("clock") == WALL_CLOCK else "candidate"
        why = tb.get("clock_fallback") or tc.get("clock_fallback") or "no reason recorded"
        fallback = f"{fallen} side: {why}; both sides compared by the wall clock"
    speedup = stats.speedup_ci(base_rounds, cand_rounds,
                               resamples=policy.bootstrap_resamples, seed=policy.seed)
    evidence = dict(candidate.evidence)
    evidence["timing"] = _joined_timing(tb, tc, len(candidate.candidate_samples_ms), fallback)
    evidence["sides"] = {
        "order": order,
        **{name: {"rounds": len(samples), "timing_seconds": t.get("timing_seconds"),
                  "median_ms": summary.median_ms if summary else None,
                  "started_at": r.started_at, "finished_at": r.finished_at,
                  "window": t.get("window")}
           for name, r, samples, summary, t in (
               ("baseline", baseline, base_rounds, base_summary, tb),
               ("candidate", candidate, cand_rounds, cand_summary, tc))},
    }
    _each_side_its_own(evidence, baseline, candidate)
    first, last = (baseline, candidate) if order[0] == "baseline" else (candidate, baseline)
    fp = _joined_fingerprint(baseline, candidate, first, last, sides_software)
    peak = {**candidate.peak_memory_bytes}
    for key, value in baseline.peak_memory_bytes.items():
        peak[key] = max(peak.get(key, 0), value)
    mode = str(tc.get("mode") or spec.requested_timing_mode)
    joined = BenchResult(
        series_key=spec.series_key(str(fp.get("device_class") or spec.device), mode,
                                   model_digest=model_digest_of(fp)),
        spec=spec.to_dict(),
        status="ok",
        reason=candidate.reason,
        baseline_samples_ms=base_rounds,
        candidate_samples_ms=cand_rounds,
        baseline=base_summary,
        candidate=cand_summary,
        speedup=speedup,
        accuracy=candidate.accuracy,
        compile_seconds=candidate.compile_seconds,
        peak_memory_bytes=peak,
        evidence=evidence,
        fingerprint=fp,
        started_at=first.started_at,
        finished_at=last.finished_at,
        duration_seconds=(baseline.duration_seconds or 0.0)
        + (candidate.duration_seconds or 0.0),
    )
    joined.check()
    return joined


def _each_side_its_own(evidence: dict[str, Any], baseline: BenchResult,
                       candidate: BenchResult) -> None:
    """Kernel counts and profiles of each side from the child that timed it."""
    for key in ("kernels_per_inference", "profile", "profile_error"):
        merged = {side: value for side, r in (("baseline", baseline), ("candidate", candidate))
                  for name, value in (r.evidence.get(key) or {}).items() if name == side}
        evidence.pop(key, None)
        if merged:
            evidence[key] = merged


def _joined_timing(tb: dict[str, Any], tc: dict[str, Any], rounds: int,
                   fallback: str | None) -> dict[str, Any]:
    """The unit's timing record from each child's: the candidate's, with both sides' seconds,
    graphs, wall rounds and windows, and the clock both sides were compared by."""
    timing = {
        **tc,
        "rounds": rounds,
        "timing_seconds": float(tb.get("timing_seconds") or 0.0)
        + float(tc.get("timing_seconds") or 0.0),
        "cuda_graphs": {"baseline": (tb.get("cuda_graphs") or {}).get("baseline", False),
                        "candidate": (tc.get("cuda_graphs") or {}).get("candidate", False)},
    }
    if tb.get("wall") or tc.get("wall"):
        timing["wall"] = {
            **{k: v for k, v in (tb.get("wall") or {}).items() if k.startswith("baseline")},
            **{k: v for k, v in (tc.get("wall") or {}).items() if k.startswith("candidate")}}
    windows = [t["window"] for t in (tb, tc) if isinstance(t.get("window"), list)]
    if windows:
        timing["window"] = [min(w[0] for w in windows), max(w[1] for w in windows)]
    if tb.get("clock_fallback") and not tc.get("clock_fallback"):
        timing["clock_fallback"] = tb["clock_fallback"]
    if fallback is not None:
        timing.update(clock=WALL_CLOCK, clock_fallback=fallback)
        timing.pop("wall", None)  # the wall clock is the samples now
    timing.pop("side", None)
    timing.pop(SIDE_WALL_ROUNDS, None)
    return timing


def _joined_fingerprint(baseline: BenchResult, candidate: BenchResult, first: BenchResult,
                        last: BenchResult, sides_software: list[Any]) -> dict[str, Any]:
    """The candidate child's fingerprint, with each side's software from its own child and
    NVML's readings from the first and the last child."""
    fp = dict(candidate.fingerprint)
    base_sw, cand_sw = sides_software
    if base_sw is not None and cand_sw is not None:
        fp["software"] = {**cand_sw, "sides": {
            "baseline": (base_sw.get("sides") or {}).get("baseline"),
            "candidate": (cand_sw.get("sides") or {}).get("candidate")}}
    if "nvml_start" in first.fingerprint:
        fp["nvml_start"] = first.fingerprint["nvml_start"]
    if "nvml_end" in last.fingerprint:
        fp["nvml_end"] = last.fingerprint["nvml_end"]
    throttled = [r.fingerprint["throttled"] for r in (baseline, candidate)
                 if "throttled" in r.fingerprint]
    if throttled:
        fp["throttled"] = any(throttled)
    return fp


def _wall_rounds(timing: dict[str, Any], rounds: list[list[float]],
                 side: str) -> list[list[float]]:
    """A side's samples by the wall clock: its own samples where it was timed by it, else
    the wall rounds its child kept beside the CPU clock."""
    if timing.get("clock") == WALL_CLOCK:
        return rounds
    wall = timing.get(SIDE_WALL_ROUNDS)
    if not isinstance(wall, list) or len(wall) != len(rounds):
        raise ResultError(f"the {side} side was timed by its thread's CPU time and kept no "
                          "wall-clock rounds to compare with the other side's wall clock")
    return [[float(x) for x in r] for r in wall]
