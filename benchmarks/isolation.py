"""Run specs in child processes so that a crash, hang or OOM costs one result, not the
caller: the entry points a worker calls.

- `run_isolated`: one spec, in one child or in `spec.timing.processes` children one after
  another (never concurrently: they would time each other), merged into one result whose
  interval includes the variance between processes (benchmarks.merging). The first child
  that does not end ok ends the cell, its reason prefixed "process j of K:".
- `run_adaptive_interleaved`: several cells measured adaptively (benchmarks.adaptive),
  taking turns unit by unit so each cell's units spread over the run's stretch of machine
  time; optionally the next units prepared ahead (benchmarks.prepared).
- `run_interleaved`: two specs (a confirmation's candidate and baseline) alternating
  process by process.

Where the rest lives: one child supervised (benchmarks.children), a unit of one or two
children (benchmarks.split_sides), K results merged (benchmarks.merging), a cell measured
until decided (benchmarks.adaptive). None of these imports torch or the service: a worker
supervises benchmarks in environments (`python=`) that it does not share.

Test-only: spec option `_fault_process` (1-based) keeps `_fault` in that process's spec
only, so a failure of a later process can be tested for real.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from benchmarks import prepared, stats
from benchmarks.adaptive import AdaptiveMeasurement, timing_seconds
from benchmarks.children import failed_result
from benchmarks.merging import merge_processes
from benchmarks.result import BenchResult, ResultError
from benchmarks.result_schema import AdaptiveEvidence
from benchmarks.spec import (
    BenchSpec,
    SpecError,
)
from benchmarks.split_sides import run_unit
from benchmarks.stored_parts import written
from benchmarks.vocabulary import StoppedBy


def run_isolated(
    spec: BenchSpec,
    *,
    timeout_s: float,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> BenchResult:
    """Measure `spec` in child processes; always returns a result, never raises for a child.

    One child, or `spec.timing.processes` children one after another merged into one result
    (see the module docstring). `env` is merged over this process's environment (replacing
    it would drop PATH and the CUDA variables a benchmark needs). On a timeout the whole
    process group is killed.
    """
    k = spec.timing.processes
    if not isinstance(k, int) or k <= 1:  # one unit: a child, or a child per side joined
        unit = run_unit(spec, 0, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
        unit.spec = spec.to_dict()
        return unit
    started = time.monotonic()
    try:
        spec.validate()  # before K children, not K times inside them (processes <= 16)
    except SpecError as exc:
        return failed_result(spec, f"invalid spec: {exc}", "", started)
    results: list[BenchResult] = []
    for j in range(k):
        one = run_unit(spec, j, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
        if one.status != "ok":
            one.spec = spec.to_dict()
            one.reason = f"process {j + 1} of {k}: {one.reason or one.status}"
            return one
        results.append(one)
    try:
        return merge_processes(spec, results, started_monotonic=started)
    except (stats.StatsError, ResultError) as exc:
        return failed_result(spec, f"merging {k} processes: {exc}", "", started)


def run_adaptive_interleaved(
    measurements: Sequence[AdaptiveMeasurement],
    *,
    after_each: Callable[[int], None] | None = None,
    on_done: Callable[[int, BenchResult], None] | None = None,
) -> list[BenchResult]:
    """Step several measurements in turns, one child process each per turn; their results.

    Turn t runs the next process of every measurement not yet done, in list order on even
    turns and reversed on odd ones (A B C, C B A, A B C, ...). A cell's processes are then
    spread over the whole stretch of time the cells take together, beside the other
    cells' processes, instead of back to back: a drift of the machine over minutes
    reaches every cell alike and shows in each cell's between-process variance (its
    interval), where back-to-back processes would see one moment and cells measured
    minutes apart would disagree beyond their intervals. Measuring one cell after another
    cannot give that; it costs nothing extra, since the children are the same.

    `after_each(i)` is called after every child (i: the measurement that ran it); it may
    cancel any of the measurements (`AdaptiveMeasurement.cancel`). `on_done(i, result)`
    once when measurement i finishes, however it finished (its last child, a cancel, or
    an invalid spec before any child), so a caller can store it while the others go on.
    """
    reported: set[int] = set()

    def report() -> None:
        for k, finished in enumerate(measurements):
            if finished.done and k not in reported:
                reported.add(k)
                if on_done is not None:
                    on_done(k, finished.result())

    report()
    turn = 0
    with prepared.preparing(prepared.ahead_setting()) as preparer:
        while not all(m.done for m in measurements):
            order = list(range(len(measurements)))
            if turn % 2:
                order.reverse()
            for position, i in enumerate(order):
                m = measurements[i]
                if m.done:
                    continue
                if preparer is not None:
                    preparer.refill = partial(_prepare_ahead, preparer, measurements, turn,
                                              position)
                    preparer.refill()
                m.step()
                if after_each is not None:
                    after_each(i)
                report()
            turn += 1
    return [m.result() for m in measurements]


def _prepare_ahead(preparer: prepared.Preparer, measurements: Sequence[Any], turn: int,
                   position: int, turns: int = 3) -> None:
    """Start the children of the next units in the order their turns will come (this
    turn's rest, then the next ones'), as many as the preparer has room for; discard
    prepared children no longer among them (a cell decided, its unit spec changed)."""
    n = len(measurements)
    wanted: list[tuple[tuple[Any, ...], prepared.Launch]] = []
    counts = [0] * n
    for t in range(turn, turn + turns):
        order = list(range(n)) if t % 2 == 0 else list(reversed(range(n)))
        for i in order[position:] if t == turn else order:
            m = measurements[i]
            if m.done or not hasattr(m, "upcoming"):
                continue
            first = m.upcoming(0) if counts[i] > 0 and not m.processes else None
            unit = m.upcoming(counts[i], first_ready=first is not None
                              and preparer.is_ready(first[0]))
            counts[i] += 1
            if unit is not None:
                wanted.append(unit)
    preparer.keep_only({key for key, _ in wanted})
    for key, launch in wanted:
        preparer.start(key, launch)


def run_interleaved(
    spec: BenchSpec,
    pythons: list[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    after_each: Callable[[], None] | None = None,
    threshold: float | None = None,
) -> list[BenchResult]:
    """Measure `spec` once per interpreter, their child processes alternating.

    Process j of every interpreter runs before process j + 1 of any (A1, B1, A2, B2, ...
    for two), so each interpreter's result spans the same stretch of machine time and a
    drift of the machine hits all of them alike: what a comparison BETWEEN environments
    needs, where measuring one after the other would fold the drift into the difference.
    Each interpreter's `spec.timing.processes` children are merged as `run_isolated` merges
    them. The first child that does not end ok ends the measurement: its interpreter's
    result is that failure ("process j of K: ..."), the others' a failure that names it.
    `after_each` is called after every child (a caller's heartbeat: the whole takes
    len(pythons) * K children, longer than one cell).

    With `threshold` and two interpreters (a confirmation: the first the candidate, the
    second its baseline) the pair is measured adaptively, as `run_adaptive` measures a
    cell: after the K pairs, one more pair at a time while the candidate's speedup against
    the baseline's does not settle the comparison at `threshold` (`stats.decide`), up to
    `timing.max_processes` pairs and while either side's timing seconds stay under
    `timing.budget_seconds`. Three processes a side give t(2) intervals, 2.2 times 1.96's
    width: one slow process on a busy machine left a 58% drop "inconclusive" (-83% to +6%).
    Both results record `evidence.adaptive` (outcome, stopped_by, processes, the ratio).
    """
    k = max(1, spec.timing.processes)
    adaptive = threshold is not None and len(pythons) == 2
    k_max = max(k, spec.timing.max_processes) if adaptive else k
    started = time.monotonic()
    try:
        spec.validate()
    except SpecError as exc:
        return [failed_result(spec, f"invalid spec: {exc}", "", started) for _ in pythons]
    done: list[list[BenchResult]] = [[] for _ in pythons]
    decision: stats.Decision | None = None
    stopped_by: StoppedBy = "max_processes"
    for j in range(k_max):
        for i, python in enumerate(pythons):
            one = run_unit(spec, j, timeout_s=timeout_s, python=python, env=env, cwd=None)
            if after_each is not None:
                after_each()
            if one.status != "ok":
                one.spec = spec.to_dict()
                one.reason = f"process {j + 1} of {max(k, j + 1)}: {one.reason or one.status}"
                return [one if n == i else failed_result(
                    spec, f"stopped: the interleaved measurement with {pythons[i]} failed "
                    f"({one.reason})", "", started) for n in range(len(pythons))]
            done[i].append(one)
        if not adaptive or j + 1 < k or j + 1 >= k_max:
            continue
        assert threshold is not None
        decision = _pair_decision(spec, done, threshold, started)
        if decision is not None and decision.decided:
            stopped_by = "decided"
            break
        budget = spec.timing.budget_seconds
        if budget > 0 and max(timing_seconds(r) for r in done) >= budget:
            stopped_by = "budget"
            break
    merged = [_merged_or_failed(spec, results, started) for results in done]
    if adaptive and all(m.status == "ok" for m in merged):
        assert threshold is not None
        decision = _pair_decision(spec, done, threshold, started, merged)
        for m, results in zip(merged, done, strict=True):
            m.evidence["adaptive"] = _pair_record(decision, stopped_by, results, threshold)
    return merged


def _merged_or_failed(spec: BenchSpec, results: list[BenchResult],
                      started: float) -> BenchResult:
    try:
        return merge_processes(spec, results, started_monotonic=started)
    except (stats.StatsError, ResultError) as exc:
        return failed_result(spec, f"merging {len(results)} processes: {exc}", "", started)


def _pair_record(decision: stats.Decision | None, stopped_by: StoppedBy,
                 results: list[BenchResult], threshold: float) -> dict[str, Any]:
    """`evidence.adaptive` of each side of an adaptively interleaved pair."""
    return written(AdaptiveEvidence(
        outcome=decision.outcome if decision else None,
        stopped_by="decided" if decision and decision.decided else stopped_by,
        processes=len(results),
        timing_seconds=timing_seconds(results),
        threshold=threshold,
        ratio=decision.ratio if decision else None,
        ratio_ci=[decision.ratio_low, decision.ratio_high] if decision else None,
        interleaved_pair=True,
    ))


def _pair_decision(spec: BenchSpec, done: list[list[BenchResult]], threshold: float,
                   started: float, merged: list[BenchResult] | None = None
                   ) -> stats.Decision | None:
    """The candidate's merged speedup (done[0]) against the baseline's (done[1])."""
    try:
        cand, base = merged or [merge_processes(spec, r, started_monotonic=started)
                                for r in done]
    except (stats.StatsError, ResultError):
        return None
    if cand.speedup is None or base.speedup is None or base.speedup.value <= 0:
        return None
    reference = stats.Reference(threshold, base.speedup.value,
                                stats.log_half_width(base.speedup))
    return stats.decide(cand.speedup, reference)
