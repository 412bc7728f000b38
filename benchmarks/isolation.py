"""Run one spec in a child process so that a crash, hang or OOM costs one result, not the caller.

The child is `python -m benchmarks.child SPEC.json OUT.json` in its own process group (the
session leader of a new session), so a timeout kills it together with anything it spawned
(inductor compile workers, ORT threads are in-process but helpers are not). Its stdout and
stderr go to one log file rather than a pipe: a chatty compiler cannot fill a pipe buffer
and stall the child, and memory stays bounded however much it prints.

The child asks the kernel to kill it when this process dies (`child.die_with_supervisor`):
a worker that is SIGKILLed does not leave a benchmark running in a session of its own.

This module imports neither torch nor the service: a worker process can supervise
benchmarks in environments (`python=`) that it does not share.

With `spec.timing.processes = K > 1` the spec is measured in K child processes, one after
another (never concurrently: they would time each other), each with processes=1 and bootstrap
seed `timing.seed + j`, and the K results are merged into ONE result (`merge_processes`):

- samples: process 1's rounds, then process 2's, ...; pairing is kept round by round.
  Summaries are of the pooled samples; the speedup is `stats.combine_processes`, whose CI
  includes the between-process variance.
- evidence: process 1's, plus `processes` (one entry per process: its own speedup and CI,
  rounds, timing and compile seconds, medians, start and end) and `ci_method`;
  `evidence.timing.rounds` and `timing_seconds` are totals over the processes.
- compile_seconds: process 1's. Later processes may hit compile caches on disk warmed by
  the first, so theirs is not the cost a single run pays; all are in `evidence.processes`.
- peak memory: the maximum per phase; accuracy: the process with the largest error.
- fingerprint: process 1's, with `nvml_start` from process 1 and `nvml_end` from the last;
  `throttled` if any process saw throttling.
- The first process that does not end ok ends the cell: the result is that process's
  status (failed or skipped) with the reason prefixed "process j of K:"; the remaining
  processes are not run. `timeout_s` applies to each process.

Test-only: spec option `_fault_process` (1-based) keeps `_fault` in that process's spec
only, so a failure of a later process can be tested for real.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import build, fingerprint, host, identity, prepared, stats
from benchmarks.clocks import SIDE_WALL_ROUNDS, WALL_CLOCK
from benchmarks.result import Accuracy, BenchResult, ResultError
from benchmarks.spec import (
    CHILD_SIDES,
    LATER_PROCESS_OPTION,
    SIDE_OPTION,
    BenchSpec,
    SpecError,
    TimingPolicy,
    model_digest_of,
)
from benchmarks.turns import TURN_ENV, Referee, RefereeTimeout, Side, SideEnded

STDERR_TAIL_BYTES = 4096
# The CPU load guard: units of one cell measured again because other processes kept the
# host busier than timing.max_host_load (benchmarks.host), at most this many a cell; and
# how long to wait for the host to calm down before each.
LOAD_REMEASURES = 2
LOAD_WAIT_S = 3.0
_OOM_PATTERNS = re.compile(r"out of memory|MemoryError|OutOfMemoryError|std::bad_alloc",
                           re.IGNORECASE)
# The directory that holds the `benchmarks` package: put first on the child's PYTHONPATH so
# an interpreter from another environment runs this very code.
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def _tail(path: Path, limit: int = STDERR_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return text if size <= limit else "..." + text


def _last_error_line(tail: str) -> str | None:
    """The 'SomeError: message' line Python prints last in a traceback, if there is one."""
    for line in reversed(tail.strip().splitlines()):
        line = line.strip()
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:300]
    return None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _failed(spec: BenchSpec, reason: str, tail: str, started: float) -> BenchResult:
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    elapsed = time.monotonic() - started
    try:
        device_class = fingerprint.device_class(spec.device)
    except Exception:
        device_class = "cuda" if spec.device == "cuda" else "cpu"
    return BenchResult(
        series_key=spec.series_key(device_class),
        spec=spec.to_dict(),
        status="failed",
        reason=reason,
        started_at=(now - dt.timedelta(seconds=elapsed)).isoformat(timespec="milliseconds"),
        finished_at=now.isoformat(timespec="milliseconds"),
        duration_seconds=elapsed,
        stderr_tail=tail or None,
    )


def explain_exit(returncode: int, tail: str) -> str:
    """A one-line reason for a child that ended without a valid result."""
    if returncode < 0:
        name = _signal_name(-returncode)
        if -returncode == signal.SIGKILL:
            return f"killed by signal {name} (likely out of memory: the OOM killer sends SIGKILL)"
        return f"killed by signal {name}"
    error = _last_error_line(tail)
    if _OOM_PATTERNS.search(error if error else tail[-1000:]):
        return f"out of memory (exit code {returncode}): {error or 'see stderr tail'}"
    if returncode != 0:
        return f"child exited with code {returncode}: {error or 'see stderr tail'}"
    return "child exited without writing a result"


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
    if (not isinstance(k, int) or k <= 1) and spec.sides != "split":
        return _run_one(spec, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
    if not isinstance(k, int) or k <= 1:  # one unit: a child per side, joined
        unit = _run_unit(spec, 0, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
        unit.spec = spec.to_dict()
        return unit
    started = time.monotonic()
    try:
        spec.validate()  # before K children, not K times inside them (processes <= 16)
    except SpecError as exc:
        return _failed(spec, f"invalid spec: {exc}", "", started)
    results: list[BenchResult] = []
    for j in range(k):
        one = _run_unit(spec, j, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
        if one.status != "ok":
            one.spec = spec.to_dict()
            one.reason = f"process {j + 1} of {k}: {one.reason or one.status}"
            return one
        results.append(one)
    try:
        return merge_processes(spec, results, started_monotonic=started)
    except (stats.StatsError, ResultError) as exc:
        return _failed(spec, f"merging {k} processes: {exc}", "", started)


ReferenceFor = Callable[[BenchResult], "stats.Reference | None"]


def run_adaptive(
    spec: BenchSpec,
    *,
    reference_for: ReferenceFor,
    timeout_s: float,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    after_each: Callable[[], None] | None = None,
) -> BenchResult:
    """Measure `spec` in child processes until its comparison is decided; one result.

    Runs `spec.timing.processes` children (at least 1), then adds one at a time while the
    merged speedup does not settle its comparison with the reference (`stats.decide`),
    up to `timing.max_processes` and while the children's timing seconds stay under
    `timing.budget_seconds` (0: no budget). With `timing.target_half_width` > 0 a decided
    comparison stops only once the speedup's CI half-width is that narrow too (the result
    will be the next run's baseline). `reference_for` is asked once, with the first
    child's result (its series key names the device class the cell really ran on), for
    the baseline to decide against; None means "nothing to decide": exactly
    `timing.processes` children run. Its errors are not the measurement's: they are
    recorded and the cell is measured as if there were no reference.

    The result is `merge_processes` of the children, with `evidence.adaptive`: the outcome
    ("pass", "regression", "precise", "undecided"), why it stopped ("decided",
    "max_processes", "budget"), the processes and timing seconds it took, the reference
    and the ratio's interval. Failures end the cell as in `run_isolated`.
    """
    measurement = AdaptiveMeasurement(spec, reference_for=reference_for, timeout_s=timeout_s,
                                      python=python, env=env, cwd=cwd)
    while not measurement.done:
        measurement.step()
        if after_each is not None:
            after_each()
    return measurement.result()


BaselinePythonFor = Callable[["stats.Reference"], "str | None"]
# Units of a cell are allocated rounds by Kalibera and Jones's rule (stats.optimal_rounds)
# once this many have shown the cell's variance components; never fewer rounds than this.
ALLOCATION_MIN_ROUNDS = 3
# A comparison measured in one session is the verdict itself: it aims at a narrower
# half-width than a cell's own (at most this one) and may spend this many times the cell's
# budget (two environments measured in turns; 3 minutes of timing at the CPU default).
COMPARISON_TARGET_HALF_WIDTH = 0.01
COMPARISON_BUDGET_FACTOR = 4


class AdaptiveMeasurement:
    """`run_adaptive` one child process at a time, so that several cells can take turns.

    `step()` runs the next child and updates the decision; `done` says whether another
    child is wanted; `result()` is what `run_adaptive` returns. Between steps nothing
    runs, so a caller may interleave the steps of many measurements
    (`run_adaptive_interleaved`).

    What the first unit's software identity (benchmarks.identity) says against the
    reference's decides how the cell goes on:

    - the same software as the baseline: nothing can have changed but the host, so there is
      nothing to decide; the cell measures its minimum units and stops ("same_software");
    - another environment, on a CPU, with `baseline_python_for` able to name the baseline's
      interpreter: both environments are measured in this session, their units in turns
      (baseline 1, candidate 2, baseline 2, ...), until the ratio of the two speedups is
      decided at the threshold and COMPARISON_TARGET_HALF_WIDTH, or
      COMPARISON_BUDGET_FACTOR times the budget is spent: the drift of the host between runs
      minutes or days apart, and the stored baseline's own width, leave the comparison
      ("interleaved"). Where every unit's eager side ran the same software (its side
      identity), the ratio is of the candidate sides' own times (`stats.compare_levels`),
      else of the speedups (`stats.compare_units`). On a GPU a build reproduces to 0.1%
      across processes and hosts, so the stored baseline serves;
    - otherwise the cell is decided against the stored reference, as before.

    After `timing.processes` units the cell's own variance components (the units' levels,
    the rounds' noise) and costs (a unit's start, a round) set the rounds of the units that
    follow (`stats.optimal_rounds`): `evidence.allocation`.
    """

    def __init__(self, spec: BenchSpec, *, reference_for: ReferenceFor, timeout_s: float,
                 python: str = sys.executable, env: dict[str, str] | None = None,
                 cwd: str | None = None,
                 baseline_python_for: BaselinePythonFor | None = None) -> None:
        self.spec = spec
        self._unit_spec = spec
        self._reference_for = reference_for
        self._baseline_python_for = baseline_python_for
        self._timeout_s, self._python, self._env, self._cwd = timeout_s, python, env, cwd
        policy = spec.timing
        self._k_min = max(1, policy.processes)
        self._k_max = max(self._k_min, policy.max_processes)
        self._started = time.monotonic()
        self._results: list[BenchResult] = []
        self._walls: list[float] = []
        self._reference: stats.Reference | None = None
        self._reference_error: str | None = None
        self._merged: BenchResult | None = None
        self._decision: stats.Decision | None = None
        self._stopped_by = "max_processes"
        self._final: BenchResult | None = None
        self._remeasured: list[dict[str, Any]] = []
        self._mode = "adaptive"  # "same_software", "interleaved"
        self._base_python: str | None = None
        self._base_results: list[BenchResult] = []
        self._comparison: stats.UnitsComparison | None = None
        self._comparison_base: BenchResult | None = None
        self._shared_side: str | None = None
        self._comparison_error: str | None = None
        self._allocation: dict[str, Any] | None = None
        try:
            spec.validate()
        except SpecError as exc:
            self._final = _failed(spec, f"invalid spec: {exc}", "", self._started)

    @property
    def done(self) -> bool:
        return self._final is not None

    @property
    def processes(self) -> int:
        """Children measured so far (ok ones)."""
        return len(self._results)

    def step(self) -> None:
        """Measure one more unit; afterwards `done` may be true."""
        if self._final is not None:
            return
        if self._mode == "interleaved" and len(self._base_results) < len(self._results):
            self._step_baseline()
            return
        spec, j = self.spec, len(self._results)
        began = time.monotonic()
        one = _run_unit(self._unit_spec, j, timeout_s=self._timeout_s, python=self._python,
                        env=self._env, cwd=self._cwd)
        if not self._accept(one, j):
            return
        self._results.append(one)
        self._walls.append(time.monotonic() - began)
        if j == 0:
            self._look_up_reference(one)
        if len(self._results) < self._k_min:
            return
        self._allocate()
        if self._mode == "interleaved":
            return  # decided after the baseline's unit of this turn
        try:
            self._merged = self._merge(self._results)
        except (stats.StatsError, ResultError) as exc:
            self._final = _failed(spec, f"merging {len(self._results)} processes: {exc}", "",
                                  self._started)
            return
        policy = spec.timing
        if self._mode == "same_software":  # nothing to decide: the minimum units, then stop
            self._stopped_by = "same_software"
            self._finish()
            return
        if self._reference is not None and self._merged.speedup is not None:
            self._decision = stats.decide(self._merged.speedup, self._reference)
            if self._decision.decided and _precise_enough(self._decision,
                                                          policy.target_half_width):
                self._stopped_by = "decided"
                self._finish()
                return
        if policy.budget_seconds > 0 and _timing_seconds(self._results) >= policy.budget_seconds:
            self._stopped_by = "budget"
            self._finish()
            return
        if len(self._results) >= self._k_max:
            self._finish()

    def upcoming(self, n: int, *, first_ready: bool = False,
                 ) -> tuple[tuple[Any, ...], prepared.Launch] | None:
        """The key and launcher of this cell's `n`-th next unit (0: the next), for a
        child started ahead of its turn (benchmarks.prepared), or None where it is not
        known yet or not to be prepared ahead: a unit after the first waits until the
        first has stored its build (`first_ready`: it reached its gate, or it is done;
        it would build again otherwise), and one unit at most
        is started beyond the minimum, where the cell may stop before it."""
        if self._final is not None or self._mode == "interleaved" \
                or not prepared.quiet_build(self._unit_spec):
            return None
        j = len(self._results) + n
        if (j >= 1 and not self._results and not first_ready) or j >= self._k_max \
                or (j >= self._k_min and n > 0):
            return None
        one = process_spec(self._unit_spec, j)
        return (unit_key(one, self._python, self._env, self._cwd),
                _gated_launch(one, self._python, self._env, self._cwd))

    def _accept(self, one: BenchResult, j: int, side: str = "") -> bool:
        """False when the unit ends the cell (a failure) or is to be measured again (the
        load guard)."""
        if one.status != "ok":
            one.spec = self.spec.to_dict()
            if j > 0 or side:  # say that earlier processes were fine
                one.reason = (f"{side}process {j + 1} (after {j} ok): "
                              f"{one.reason or one.status}")
            self._final = one
            return False
        return not self._too_busy(one, j)

    def _merge(self, results: list[BenchResult]) -> BenchResult:
        spec = self.spec
        if len(results) > 1:
            return merge_processes(spec, results, started_monotonic=self._started)
        only = results[0]  # one process: its own result, filed under the cell's spec
        fp = dict(only.fingerprint)
        load = host_load_of([only], spec.timing.max_host_load)
        if load is not None:
            fp["host_load"] = load
        return replace(only, spec=spec.to_dict(), evidence=dict(only.evidence), fingerprint=fp)

    def _look_up_reference(self, first: BenchResult) -> None:
        """The reference to decide against, and what the first unit's software says of it."""
        try:
            self._reference = self._reference_for(first)
        except Exception as exc:  # a lookup problem must not cost the measurement
            self._reference_error = f"{type(exc).__name__}: {exc}"[:300]
        reference = self._reference
        if reference is None:
            self._k_max = self._k_min
            return
        software = identity.of(first.fingerprint)
        if software is None:
            return
        if reference.software is not None and software["digest"] == reference.software:
            self._mode = "same_software"
            return
        if (self.spec.device != "cpu" or reference.speedup is None
                or reference.environment in (None, software["environment"])
                or self._baseline_python_for is None):
            return
        try:
            python = self._baseline_python_for(reference)
        except Exception as exc:  # the stored baseline still serves
            self._comparison_error = f"{type(exc).__name__}: {exc}"[:300]
            return
        if python:
            self._mode, self._base_python = "interleaved", python

    def _step_baseline(self) -> None:
        """The baseline environment's unit of this turn, then the pair's decision."""
        j = len(self._base_results)
        assert self._base_python is not None
        one = _run_unit(self._unit_spec, j, timeout_s=self._timeout_s,
                        python=self._base_python, env=self._env, cwd=self._cwd)
        if not self._accept(one, j, side="baseline environment: "):
            return
        self._base_results.append(one)
        if len(self._base_results) < self._k_min:
            return
        policy = self.spec.timing
        try:
            cand = self._merge(self._results)
            base = self._merge(self._base_results)
            if cand.speedup is None or base.speedup is None:
                raise stats.StatsError("a side has no speedup")
            self._shared_side = _shared_baseline_side(self._results + self._base_results)
            if self._shared_side is not None:
                # eager ran the very same software in both environments: compare the
                # candidate sides' own times, leaving eager's process spread out
                self._comparison = stats.compare_levels(
                    [r.candidate_samples_ms for r in self._results],
                    [r.candidate_samples_ms for r in self._base_results],
                    resamples=policy.bootstrap_resamples, seed=policy.seed)
            else:
                self._comparison = stats.compare_units(
                    [r.speedup for r in self._results if r.speedup is not None],
                    [r.speedup for r in self._base_results if r.speedup is not None],
                    cand.speedup.value / base.speedup.value)
        except (stats.StatsError, ResultError) as exc:
            self._final = _failed(self.spec, f"comparing with the baseline's environment: "
                                  f"{exc}", "", self._started)
            return
        self._merged = cand
        threshold = self._reference.threshold if self._reference else 0.0
        c = self._comparison
        limit = 1 - threshold
        outcome = "regression" if c.high < limit else "pass" if c.low >= limit else "undecided"
        self._decision = stats.Decision(outcome, c.ratio, c.low, c.high, c.log_half)
        self._comparison_base = base
        # as a cell decided against a stored baseline: decided, and as precise as the target
        if self._decision.decided and _precise_enough(self._decision,
                                                      _comparison_target(policy)):
            self._stopped_by = "decided"
            self._finish()
            return
        spent = _timing_seconds(self._results) + _timing_seconds(self._base_results)
        if policy.budget_seconds > 0 \
                and spent >= COMPARISON_BUDGET_FACTOR * policy.budget_seconds:
            self._stopped_by = "budget"
            self._finish()
            return
        if len(self._base_results) >= self._k_max:
            self._finish()

    def _allocate(self) -> None:
        """Rounds per unit from the cell's variance components, once, after its minimum
        units (Kalibera and Jones): a unit's start is paid once, its rounds each time."""
        if self._allocation is not None or self.spec.device != "cpu":
            return
        units = [r for r in self._results if r.speedup is not None]
        if len(units) < 2:
            return
        rounds = [len(r.baseline_samples_ms) for r in units]
        timing = [_timing_seconds([r]) for r in units]
        round_seconds = sum(timing) / max(1, sum(rounds))
        unit_seconds = max(0.0, sum(self._walls[:len(units)]) / len(units)
                           - sum(timing) / len(units))
        try:
            speedups = [r.speedup for r in units if r.speedup is not None]
            var_round = stats.round_variance(speedups, rounds)
            logs = [math.log(s.value) for s in speedups]
            within = float(sum(var_round / max(1, n) for n in rounds) / len(rounds))
            var_unit = max(0.0, _sample_variance(logs) - within)
        except stats.StatsError:
            return
        best = stats.optimal_rounds(unit_seconds, round_seconds, var_round, var_unit)
        policy = self.spec.timing
        # At most a sixth of the budget in one unit: six more units must fit, or the cell's
        # interval would rest on the few units its first estimate (2 degrees of freedom)
        # favoured.
        cap = policy.rounds if policy.budget_seconds <= 0 else max(
            ALLOCATION_MIN_ROUNDS, int(policy.budget_seconds / 6 / round_seconds))
        chosen = int(min(policy.rounds, cap, max(ALLOCATION_MIN_ROUNDS, policy.min_rounds,
                                                 math.ceil(best or policy.rounds))))
        self._allocation = {
            "unit_seconds": round(unit_seconds, 3), "round_seconds": round(round_seconds, 4),
            "unit_variance": var_unit, "round_variance": var_round,
            "optimal_rounds": None if best is None else round(best, 2),
            "rounds_per_unit": chosen, "after_units": len(units),
        }
        # a side's share of a round, so that max_seconds does not cut the rounds chosen
        side_seconds = round_seconds / 2 if self.spec.sides == "split" else round_seconds
        self._unit_spec = replace(self.spec, timing=replace(
            policy, rounds=chosen, min_rounds=min(policy.min_rounds, chosen),
            max_seconds=max(policy.max_seconds, 1.25 * chosen * side_seconds)))

    def _too_busy(self, one: BenchResult, j: int) -> bool:
        """The CPU load guard: drop a unit timed beside a co-tenant past the threshold and
        measure it again (after giving the host a moment), while re-measures are left;
        after that a loaded unit is kept, and the result says so (merge_processes)."""
        threshold = self.spec.timing.max_host_load
        load = (one.fingerprint.get("host_load") or {}).get("other_cores")
        if self.spec.device != "cpu" or not isinstance(load, (int, float)) \
                or load <= threshold or len(self._remeasured) >= LOAD_REMEASURES:
            return False
        self._remeasured.append({"unit": j + 1, "other_cores": load})
        host.wait_for_quiet(threshold, LOAD_WAIT_S)
        return True

    def result(self) -> BenchResult:
        if self._final is None:
            raise RuntimeError("the measurement is not done: call step() until done")
        return self._final

    def cancel(self, reason: str) -> None:
        """End the measurement before its next child: its result is a failure saying
        `reason` (a cancelled sweep, say). The processes measured so far are dropped, since
        a cell stopped half way would read as one measured to its decision."""
        if self._final is None:
            self._final = _failed(self.spec, f"{reason} (after {len(self._results)} "
                                  "processes)", "", self._started)

    def _resolvable(self) -> dict[str, Any] | None:
        """The smallest change this runner decides at the cell's budget: the half-width a
        comparison of two such measurements reaches (one interleaved comparison: its
        pairs), from the cell's own unit variance and timing per unit."""
        budget = self.spec.timing.budget_seconds
        units = [r for r in self._results if r.speedup is not None]
        if budget <= 0 or len(units) < 2:
            return None
        per_unit = _timing_seconds(units) / len(units)
        try:
            if self._comparison is not None:
                per_pair = per_unit + _timing_seconds(self._base_results) / max(
                    1, len(self._base_results))
                half = stats.resolvable_half_width(self._comparison.pair_variance, per_pair,
                                                   COMPARISON_BUDGET_FACTOR * budget,
                                                   units=self._comparison.pairs, sides=1)
                spent = COMPARISON_BUDGET_FACTOR * budget
            else:
                half = stats.resolvable_half_width(
                    stats.unit_variance([r.speedup for r in units if r.speedup is not None]),
                    per_unit, budget, units=len(units), sides=2)
                spent = budget
        except stats.StatsError:
            return None
        if half is None:
            return None
        return {"half_width": half, "budget_seconds": spent,
                "unit_timing_seconds": round(per_unit, 3)}

    def _finish(self) -> None:
        merged, decision, reference = self._merged, self._decision, self._reference
        assert merged is not None
        base_spent = _timing_seconds(self._base_results)
        merged.evidence["adaptive"] = {
            "outcome": decision.outcome if decision else None,
            "stopped_by": self._stopped_by if reference is not None else "fixed_processes",
            "processes": len(self._results),
            "timing_seconds": _timing_seconds(self._results) + base_spent,
            "reference_speedup": reference.speedup if reference else None,
            "reference_log_half": reference.log_half if reference else None,
            "threshold": reference.threshold if reference else None,
            "ratio": decision.ratio if decision else None,
            "ratio_ci": [decision.ratio_low, decision.ratio_high] if decision else None,
            "log_half_width": decision.log_half if decision else None,
            "target_half_width": (_comparison_target(self.spec.timing)
                                  if self._comparison is not None
                                  else self.spec.timing.target_half_width) or None,
            "mode": self._mode,
            **({"resolvable": r} if (r := self._resolvable()) else {}),
            **({"reference_error": self._reference_error} if self._reference_error else {}),
            **({"comparison_error": self._comparison_error}
               if self._comparison_error else {}),
        }
        if self._allocation is not None:
            merged.evidence["allocation"] = self._allocation
        if self._comparison is not None and reference is not None:
            base = self._comparison_base
            assert base is not None and base.speedup is not None
            merged.evidence["comparison"] = {
                "mode": "interleaved",
                "baseline_result_id": reference.result_id,
                "baseline_environment": reference.environment,
                # the baseline environment's speedup on the comparison's basis: over the
                # shared eager level when eager was the same software (this result's
                # speedup over the ratio), else as it measured itself
                "baseline_speedup": (merged.speedup.value / self._comparison.ratio
                                     if self._shared_side and merged.speedup
                                     else base.speedup.value),
                "baseline_measured_speedup": base.speedup.value,
                "baseline_ci": [base.speedup.ci_low, base.speedup.ci_high],
                "baseline_processes": [
                    {"speedup": r.speedup.value if r.speedup else None,
                     "baseline_median_ms": r.baseline.median_ms if r.baseline else None,
                     "candidate_median_ms": r.candidate.median_ms if r.candidate else None}
                    for r in self._base_results],
                "baseline_timing_seconds": base_spent,
                "ratio": self._comparison.ratio,
                "ratio_ci": [self._comparison.low, self._comparison.high],
                # "candidate_side": eager was the same software in both (its side identity),
                # so the ratio is of the candidate sides' times; "speedups" otherwise
                "basis": "candidate_side" if self._shared_side else "speedups",
                **({"shared_baseline_side": self._shared_side} if self._shared_side else {}),
                "pairs": self._comparison.pairs,
                "threshold": reference.threshold,
            }
        if self._remeasured and isinstance(merged.fingerprint.get("host_load"), dict):
            merged.fingerprint["host_load"]["remeasured"] = self._remeasured
        self._final = merged


def _shared_baseline_side(units: list[BenchResult]) -> str | None:
    """The baseline side's identity when every unit's baseline side ran the same software,
    else None (benchmarks.identity.side_identity)."""
    digests = set()
    for unit in units:
        software = identity.of(unit.fingerprint) or {}
        digests.add((software.get("sides") or {}).get("baseline"))
    if len(digests) != 1:
        return None
    only = digests.pop()
    return only if isinstance(only, str) else None


def _sample_variance(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        raise stats.StatsError("a variance needs at least two values")
    mean = sum(values) / n
    return sum((v - mean) ** 2 for v in values) / (n - 1)


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


def _comparison_target(policy: TimingPolicy) -> float:
    """The half-width an in-session comparison aims at: the cell's target, at most
    COMPARISON_TARGET_HALF_WIDTH (0: none, as the cell's)."""
    target = policy.target_half_width
    return min(target, COMPARISON_TARGET_HALF_WIDTH) if target > 0 else 0.0


def _precise_enough(decision: stats.Decision, target_half_width: float) -> bool:
    """Whether a decided comparison also meets the policy's width floor (0: none)."""
    return target_half_width <= 0 or decision.log_half <= math.log1p(target_half_width)


def _timing_seconds(results: list[BenchResult]) -> float:
    total = 0.0
    for r in results:
        timing = r.evidence.get("timing") if isinstance(r.evidence, dict) else None
        if isinstance(timing, dict) and isinstance(timing.get("timing_seconds"), (int, float)):
            total += float(timing["timing_seconds"])
    return total


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
        return [_failed(spec, f"invalid spec: {exc}", "", started) for _ in pythons]
    done: list[list[BenchResult]] = [[] for _ in pythons]
    decision: stats.Decision | None = None
    stopped_by = "max_processes"
    for j in range(k_max):
        for i, python in enumerate(pythons):
            one = _run_unit(spec, j, timeout_s=timeout_s, python=python, env=env, cwd=None)
            if after_each is not None:
                after_each()
            if one.status != "ok":
                one.spec = spec.to_dict()
                one.reason = f"process {j + 1} of {max(k, j + 1)}: {one.reason or one.status}"
                return [one if n == i else _failed(
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
        if budget > 0 and max(_timing_seconds(r) for r in done) >= budget:
            stopped_by = "budget"
            break
    merged: list[BenchResult] = []
    for results in done:
        try:
            merged.append(merge_processes(spec, results, started_monotonic=started))
        except (stats.StatsError, ResultError) as exc:
            merged.append(_failed(spec, f"merging {len(results)} processes: {exc}", "",
                                  started))
    if adaptive and all(m.status == "ok" for m in merged):
        assert threshold is not None
        decision = _pair_decision(spec, done, threshold, started, merged)
        for m, results in zip(merged, done, strict=True):
            m.evidence["adaptive"] = {
                "outcome": decision.outcome if decision else None,
                "stopped_by": "decided" if decision and decision.decided else stopped_by,
                "processes": len(results),
                "timing_seconds": _timing_seconds(results),
                "threshold": threshold,
                "ratio": decision.ratio if decision else None,
                "ratio_ci": [decision.ratio_low, decision.ratio_high] if decision else None,
                "interleaved_pair": True,
            }
    return merged


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


def process_spec(spec: BenchSpec, index: int) -> BenchSpec:
    """The spec child `index` (0-based) measures: one process, its own bootstrap seed."""
    options = dict(spec.options)
    fault_process = options.pop("_fault_process", None)
    if fault_process is not None and fault_process != index + 1:
        options.pop("_fault", None)
    if index > 0:
        options[LATER_PROCESS_OPTION] = True
    return replace(spec, options=options,
                   timing=replace(spec.timing, processes=1, max_processes=0,
                                  seed=spec.timing.seed + index))


def _worst_accuracy(results: list[BenchResult]) -> Accuracy | None:
    accs = [r.accuracy for r in results if r.accuracy is not None]
    return max(accs, key=lambda a: (not a.passed, a.rel_l2)) if accs else None


def merge_processes(
    spec: BenchSpec, results: list[BenchResult], *, started_monotonic: float,
) -> BenchResult:
    """One result from the ok results of K processes of `spec` (module docstring: how)."""
    policy = spec.timing
    first, last = results[0], results[-1]
    _same_model(results)
    speedup = stats.combine_processes(
        [(r.baseline_samples_ms, r.candidate_samples_ms) for r in results],
        resamples=policy.bootstrap_resamples, seed=policy.seed,
    )
    base = [rd for r in results for rd in r.baseline_samples_ms]
    cand = [rd for r in results for rd in r.candidate_samples_ms]
    per_process: list[dict[str, Any]] = []
    for r in results:
        timing = r.evidence.get("timing", {}) if isinstance(r.evidence, dict) else {}
        per_process.append({
            "speedup": r.speedup.value if r.speedup else None,
            "ci_low": r.speedup.ci_low if r.speedup else None,
            "ci_high": r.speedup.ci_high if r.speedup else None,
            "rounds": len(r.baseline_samples_ms),
            "timing_seconds": timing.get("timing_seconds"),
            "compile_seconds": r.compile_seconds,
            "baseline_median_ms": r.baseline.median_ms if r.baseline else None,
            "candidate_median_ms": r.candidate.median_ms if r.candidate else None,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            **({"host_other_cores": r.fingerprint["host_load"].get("other_cores")}
               if isinstance(r.fingerprint.get("host_load"), dict) else {}),
            **({"build_fingerprint": r.evidence["build_fingerprint"]}
               if isinstance(r.evidence, dict) and r.evidence.get("build_fingerprint") else {}),
            **({"sides": r.evidence["sides"]} if isinstance(r.evidence, dict)
               and "sides" in r.evidence else {}),
            **({"build": r.evidence["build"]} if isinstance(r.evidence, dict)
               and isinstance(r.evidence.get("build"), dict) else {}),
            **({"phases": r.evidence["phases"]} if isinstance(r.evidence, dict)
               and isinstance(r.evidence.get("phases"), dict) else {}),
            # when it timed, on the host's monotonic clock: children prepared ahead time
            # one at a time, and this shows it
            **({"timing_window": list(timing["window"])}
               if isinstance(timing.get("window"), list) else {}),
            **({"prepared_ahead": r.evidence["prepared_ahead"]} if isinstance(r.evidence, dict)
               and isinstance(r.evidence.get("prepared_ahead"), dict) else {}),
        })
    evidence = dict(first.evidence)
    if isinstance(evidence.get("timing"), dict):
        timing = dict(evidence["timing"])
        timing["rounds"] = len(base)
        timing["timing_seconds"] = sum(p["timing_seconds"] or 0.0 for p in per_process)
        evidence["timing"] = timing
    evidence["processes"] = per_process
    evidence["ci_method"] = speedup.method
    _merge_builds(evidence, per_process)
    fp = dict(first.fingerprint)
    software = _merged_software(results, evidence.get("build_fingerprint"))
    if software is not None:
        fp["software"] = software
    if "nvml_end" in last.fingerprint:
        fp["nvml_end"] = last.fingerprint["nvml_end"]
    throttled = [r.fingerprint["throttled"] for r in results if "throttled" in r.fingerprint]
    if throttled:
        fp["throttled"] = any(throttled)
    load = host_load_of(results, policy.max_host_load)
    if load is not None:
        fp["host_load"] = load
    peak: dict[str, int] = {}
    for r in results:
        for key, value in r.peak_memory_bytes.items():
            peak[key] = max(peak.get(key, 0), value)
    reasons = [f"process {j + 1}: {r.reason}" for j, r in enumerate(results) if r.reason]
    merged = BenchResult(
        series_key=first.series_key,
        spec=spec.to_dict(),
        status="ok",
        reason="; ".join(reasons) or None,
        baseline_samples_ms=base,
        candidate_samples_ms=cand,
        baseline=stats.summary(base),
        candidate=stats.summary(cand),
        speedup=speedup,
        accuracy=_worst_accuracy(results),
        compile_seconds=first.compile_seconds,
        peak_memory_bytes=peak,
        evidence=evidence,
        fingerprint=fp,
        started_at=first.started_at,
        finished_at=last.finished_at,
        duration_seconds=time.monotonic() - started_monotonic,
    )
    merged.check()
    return merged


def _merge_builds(evidence: dict[str, Any], per_process: list[dict[str, Any]]) -> None:
    """Whether the processes ran one build: a single fingerprint stays the result's; several
    (builds as shipped, each timing its own choices) give the result a fingerprint of the
    set, and `evidence.build` counts them and gives the spread of the processes' speedups
    (max - min over the median): what a fresh build may cost or gain."""
    prints = [p.get("build_fingerprint") for p in per_process]
    known = [fp for fp in prints if fp]
    if not known:
        return
    distinct = sorted(set(known))
    build_record = dict(evidence.get("build") or {})
    build_record["distinct"] = len(distinct)
    if len(distinct) > 1:
        evidence["build_fingerprint"] = build.fingerprint(distinct)
        speedups = [p["speedup"] for p in per_process if isinstance(p.get("speedup"), float)]
        if len(speedups) > 1:
            middle = sorted(speedups)[len(speedups) // 2]
            build_record["spread"] = (max(speedups) - min(speedups)) / middle
    evidence["build"] = build_record


def _merged_software(results: list[BenchResult], build_fp: Any) -> dict[str, Any] | None:
    """The merged result's identity: the processes' environment with the merged build
    fingerprint. Processes of one cell run one interpreter, so their environments agree;
    one that does not (an environment changed under a running cell) refuses the merge."""
    found = [identity.of(r.fingerprint) for r in results]
    if any(s is None for s in found):
        return None
    environments = {str(s["environment"]) for s in found if s is not None}
    if len(environments) > 1:
        raise ResultError("the environment changed between the processes of one cell "
                          f"({', '.join(sorted(environments))}): its samples are of "
                          "different software")
    first = found[0]
    assert first is not None
    merged = identity.with_build(first, build_fp if isinstance(build_fp, str) else None)
    if first.get("sides"):
        merged["sides"] = first["sides"]
    return merged


def host_load_of(results: list[BenchResult], threshold: float) -> dict[str, Any] | None:
    """The host's load over the units of one result: the mean and peak of other processes'
    busy cores, and how many units were timed past the guard's threshold (`loaded`: any)."""
    loads = [r.fingerprint["host_load"] for r in results
             if isinstance(r.fingerprint.get("host_load"), dict)
             and isinstance(r.fingerprint["host_load"].get("other_cores"), (int, float))]
    if not loads:
        return None
    over = sum(1 for x in loads if x["other_cores"] > threshold)
    return {
        "other_cores": round(sum(x["other_cores"] for x in loads) / len(loads), 3),
        "peak_cores": round(max(float(x.get("peak_cores") or x["other_cores"])
                                for x in loads), 3),
        "cores": loads[0].get("cores"),
        "threshold": threshold,
        "units": len(loads),
        "units_loaded": over,
        "loaded": over > 0,
    }


def _same_model(results: list[BenchResult]) -> None:
    """Refuse to merge processes that built different models (a factory that does not
    build the same model each time): their samples would not measure one thing. Raises
    ResultError naming the digests."""
    try:
        digests = [model_digest_of(r.fingerprint) for r in results]
    except SpecError as exc:
        raise ResultError(str(exc)) from None
    if len(set(digests)) > 1:
        raise ResultError("the model's fingerprint differs between processes ("
                          + ", ".join(str(d) for d in digests) + "): its factory does not "
                          "build the same architecture and input shapes each time")


def _run_unit(
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
    one = process_spec(spec, index)
    if spec.sides != "split":
        return _run_one(one, timeout_s=timeout_s, python=python, env=env, cwd=cwd)
    return _run_turns(one, index, timeout_s=timeout_s, python=python, env=env, cwd=cwd)


def _run_turns(
    one: BenchSpec, index: int, *, timeout_s: float, python: str,
    env: dict[str, str] | None, cwd: str | None,
) -> BenchResult:
    """A split unit: both sides' children at once, refereed (see _run_unit)."""
    order = CHILD_SIDES if index % 2 == 0 else tuple(reversed(CHILD_SIDES))
    started = time.monotonic()
    # the two sides never time at once, so they share the one core a side would get
    pin = host.pin_cores(one.device, one.threads)
    children: dict[str, _Child] = {}
    sides: list[Side] = []
    with tempfile.TemporaryDirectory(prefix="speedwatch-bench-") as tmp:
        try:
            for side in order:
                to_child_r, to_child_w = os.pipe()
                from_child_r, from_child_w = os.pipe()
                try:
                    child = _launch(
                        replace(one, options={**one.options, SIDE_OPTION: side}),
                        Path(tmp) / side, python=python, env=env, cwd=cwd, pin=pin,
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
            if ended == "timeout" or any(c.timed_out for c in children.values()):
                for child in children.values():
                    child.kill()
                return _failed(one, f"timed out after {2 * timeout_s:g}s (two sides taking "
                               "turns)", "", started)
            if ended is not None:
                children[ended].wait(30.0)
                for name, child in children.items():
                    if name != ended:
                        child.kill()
                result = children[ended].finish(started)
                if result.status == "ok":  # it stopped early of its own accord
                    result = _failed(one, "ended before the referee said stop", "", started)
                result.spec = one.to_dict()
                result.reason = f"{ended} side: {result.reason or result.status}"
                return result
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
        return _failed(one, f"joining the two sides: {exc}", "", time.monotonic())
    assert refereed is not None
    load = monitor.load(refereed.started, refereed.finished)
    if load is not None:
        joined.fingerprint["host_load"] = load.to_dict()
    return joined


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
    _same_model([baseline, candidate])
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
    evidence["timing"] = {
        **tc,
        "rounds": len(candidate.candidate_samples_ms),
        "timing_seconds": float(tb.get("timing_seconds") or 0.0)
        + float(tc.get("timing_seconds") or 0.0),
        "cuda_graphs": {"baseline": (tb.get("cuda_graphs") or {}).get("baseline", False),
                        "candidate": (tc.get("cuda_graphs") or {}).get("candidate", False)},
    }
    if tb.get("wall") or tc.get("wall"):
        evidence["timing"]["wall"] = {
            **{k: v for k, v in (tb.get("wall") or {}).items() if k.startswith("baseline")},
            **{k: v for k, v in (tc.get("wall") or {}).items() if k.startswith("candidate")}}
    windows = [t["window"] for t in (tb, tc) if isinstance(t.get("window"), list)]
    if windows:
        evidence["timing"]["window"] = [min(w[0] for w in windows), max(w[1] for w in windows)]
    for key in ("clock_fallback",):
        if tb.get(key) and not tc.get(key):
            evidence["timing"][key] = tb[key]
    if fallback is not None:
        evidence["timing"].update(clock=WALL_CLOCK, clock_fallback=fallback)
        evidence["timing"].pop("wall", None)  # the wall clock is the samples now
    evidence["timing"].pop("side", None)
    evidence["timing"].pop(SIDE_WALL_ROUNDS, None)
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
    for key in ("kernels_per_inference", "profile", "profile_error"):
        # each side's own child counted and profiled its side
        merged = {side: value for side, r in (("baseline", baseline), ("candidate", candidate))
                  for name, value in (r.evidence.get(key) or {}).items() if name == side}
        evidence.pop(key, None)
        if merged:
            evidence[key] = merged
    first, last = (baseline, candidate) if order[0] == "baseline" else (candidate, baseline)
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


COMPILE_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR",)


def _fresh_compile_caches(child_env: dict[str, str], tmp: Path,
                          explicit: dict[str, str] | None) -> None:
    """Give each process compile caches of its own, so processes are independent samples.

    Inductor keeps its FX-graph and autotuning results on disk (/tmp/torchinductor_<user>
    by default), so the later processes of a run reuse the kernels the first one chose: the
    CI over processes then leaves out compile-time variance. On an H100 this hid it: dynamic
    shapes compiled on one machine gave 1.459x [1.459, 1.460] at batch 8 and 1.319x [1.316,
    1.321] on a fresh one (results/nvidia-h100-2026-11-25-issue17/). A cache the
    caller names in `env` is kept: sharing it is then a choice, not an accident. Triton's
    cache stays shared: it holds compiled binaries keyed by kernel source, no choices, and
    with it fresh too two dynamic-shape specs did not finish in 580 s on the H100 where four
    specs with shared caches took 490 s. Inductor puts Triton's cache inside its own
    directory unless TRITON_CACHE_DIR names one, so that is set here to the host's (beside
    its tuning caches; the binaries are keyed by source, compiler and device): without it a
    process's fresh directory recompiled every kernel. `timing.compile_cache` "host" skips
    this.
    """
    for name in COMPILE_CACHE_VARIABLES:
        if explicit is None or name not in explicit:
            child_env[name] = str(tmp / name.lower())
    if "TRITON_CACHE_DIR" not in child_env:
        child_env["TRITON_CACHE_DIR"] = str(build.tuning_cache_dir().parent / "triton")


def _host_tuning_cache(spec: BenchSpec, child_env: dict[str, str],
                       explicit: dict[str, str] | None) -> None:
    """Pinned builds of inductor's max-autotune modes time their candidates once per host:
    every process reads and adds to one inductor cache in the host's tuning directory
    (benchmarks.build.tuning_cache_dir), whose entries inductor keys by its version, the
    device and the graph. A cache the caller names in `env` is kept."""
    from benchmarks.backends.inductor import AUTOTUNE_MODES

    if spec.backend != "inductor" or spec.timing.builds != "pinned" \
            or spec.opt_level not in AUTOTUNE_MODES:
        return
    if explicit is None or "TORCHINDUCTOR_CACHE_DIR" not in explicit:
        child_env["TORCHINDUCTOR_CACHE_DIR"] = str(build.tuning_cache_dir() / "inductor")


class _Child:
    """One benchmark child process: started by `_launch`, ended by `finish`."""

    def __init__(self, spec: BenchSpec, proc: subprocess.Popen[bytes], out_path: Path,
                 log_path: Path) -> None:
        self.spec, self.proc, self.out_path, self.log_path = spec, proc, out_path, log_path
        self.timed_out = False

    def wait(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()

    def kill(self) -> None:
        """The child and anything it spawned (compile workers) must not outlive it."""
        _kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def finish(self, started: float, timeout_s: float | None = None) -> BenchResult:
        """Its result document, or a failure saying how it ended."""
        self.kill()
        tail = _tail(self.log_path)
        if self.timed_out:
            return _failed(self.spec, f"timed out after {timeout_s or 0:g}s", tail, started)
        returncode = self.proc.returncode
        if returncode == 0 and self.out_path.exists():
            try:
                result = BenchResult.from_json(self.out_path.read_text(encoding="utf-8"))
            except (ResultError, OSError, UnicodeDecodeError) as exc:
                return _failed(self.spec, f"child wrote an invalid result: {exc}", tail,
                               started)
            if result.status != "ok" and result.stderr_tail is None and tail:
                result.stderr_tail = tail
            return result
        return _failed(self.spec, explain_exit(returncode, tail), tail, started)


def _launch(
    spec: BenchSpec, workdir: Path, *, python: str, env: dict[str, str] | None,
    cwd: str | None, pin: list[int], extra_env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> _Child | BenchResult:
    """Start `python -m benchmarks.child` for `spec` in its own session (its files under
    `workdir`), or the failure saying why it could not start."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ)
    if env:
        child_env.update(env)
    child_env["SPEEDWATCH_SUPERVISOR_PID"] = str(os.getpid())  # see child.die_with_supervisor
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_ROOT, child_env.get("PYTHONPATH", "")) if p
    )
    child_env[host.PIN_ENV] = ",".join(str(c) for c in pin)
    child_env.update(extra_env or {})
    spec_path, out_path, log_path = (workdir / n for n in ("spec.json", "out.json",
                                                           "child.log"))
    spec_path.write_text(spec.to_json(), encoding="utf-8")
    if spec.timing.compile_cache == "process":
        _fresh_compile_caches(child_env, workdir, env)
    _host_tuning_cache(spec, child_env, env)
    cmd = [python, "-m", "benchmarks.child", str(spec_path), str(out_path)]
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=child_env, cwd=cwd,
                                    start_new_session=True, pass_fds=pass_fds)
        except OSError as exc:
            return _failed(spec, f"cannot start {python}: {exc}", "", started)
    return _Child(spec, proc, out_path, log_path)


def unit_key(spec: BenchSpec, python: str, env: dict[str, str] | None,
             cwd: str | None) -> tuple[Any, ...]:
    """What names one unit's child: a child prepared ahead serves only this very unit."""
    return (spec.to_json(), python, tuple(sorted((env or {}).items())), cwd)


def _gated_launch(one: BenchSpec, python: str, env: dict[str, str] | None,
                  cwd: str | None) -> prepared.Launch:
    """How the preparer starts the child of unit `one` (benchmarks.prepared): with its
    gate's pipes, and kept off the core the timing child is pinned to."""
    def launch(workdir: Path, extra_env: dict[str, str],
               fds: tuple[int, ...]) -> _Child | BenchResult:
        pin = host.pin_cores(one.device, one.threads)
        child = _launch(one, workdir, python=python, env=env, cwd=cwd, pin=pin,
                        extra_env=extra_env, pass_fds=fds)
        if isinstance(child, _Child):
            host.keep_off(child.proc.pid, pin)  # the timing child's core is its own
        return child

    return launch


def _run_one(
    spec: BenchSpec,
    *,
    timeout_s: float,
    python: str,
    env: dict[str, str] | None,
    cwd: str | None,
) -> BenchResult:
    started = time.monotonic()
    preparer = prepared.active()
    if preparer is not None:
        key = unit_key(spec, python, env, cwd)
        if not preparer.has(key) and prepared.quiet_build(spec):
            preparer.start(key, _gated_launch(spec, python, env, cwd), force=True)
        ready = preparer.take(key)
        if ready is not None:
            return _run_prepared(ready, preparer, spec, timeout_s)
        # a child whose build times on the device: nobody prepares beside it
        with preparer.paused_for():
            return _run_alone(spec, started, timeout_s=timeout_s, python=python, env=env,
                              cwd=cwd)
    return _run_alone(spec, started, timeout_s=timeout_s, python=python, env=env, cwd=cwd)


def _run_alone(spec: BenchSpec, started: float, *, timeout_s: float, python: str,
               env: dict[str, str] | None, cwd: str | None) -> BenchResult:
    with tempfile.TemporaryDirectory(prefix="speedwatch-bench-") as tmp:
        child = _launch(spec, Path(tmp), python=python, env=env, cwd=cwd,
                        pin=host.pin_cores(spec.device, spec.threads))
        if isinstance(child, BenchResult):
            return child
        proc = child.proc
        monitor = host.LoadMonitor(pids=lambda: [proc.pid], cores=host.load_cores(spec.device))
        with monitor:
            child.wait(timeout_s)
        result = child.finish(started, timeout_s)
    return _with_host_load(result, monitor)


# how often a turn looks at its child's words, its exit and the children to start
_TURN_POLL_S = 0.25


def _run_prepared(ready: prepared.Prepared, preparer: prepared.Preparer, spec: BenchSpec,
                  timeout_s: float) -> BenchResult:
    """A unit whose child was started ahead: its turn once it is at its gate, the others
    stopped while it times (benchmarks.prepared). Meanwhile children whose turns come later
    start. They are this run's own processes (`evidence.prepared_ahead` counts them), not
    another tenant's load."""
    child, proc = ready.child, ready.child.proc
    deadline = ready.launched + timeout_s
    waited = time.monotonic()
    while not ready.poll_ready(_TURN_POLL_S):
        if proc.poll() is not None:
            break  # it ended before its gate: finish() says how
        if time.monotonic() > deadline:
            child.timed_out = True
            break
        preparer.refill()
    turn_began = time.monotonic()
    if ready.ready:
        preparer.seen_ready(ready.key)  # its build is stored: the cell's next units may load it
    beside = len(preparer.pids())
    monitor = host.LoadMonitor(pids=lambda: [proc.pid, *preparer.pids()],
                               cores=host.load_cores(spec.device))
    try:
        if ready.ready:
            ready.go()
            preparer.timing_pid = proc.pid
            deadline = time.monotonic() + timeout_s
            with monitor:
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        child.timed_out = True
                        break
                    word = ready.word(_TURN_POLL_S)
                    if word == "quiet":
                        preparer.pause()
                        ready.go()
                    elif word == "timed":
                        preparer.resume()
                    elif word == "":  # its end of the pipe closed: it is ending
                        try:
                            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                        except subprocess.TimeoutExpired:
                            child.timed_out = True
                    if not preparer.paused:
                        preparer.refill()
        result = child.finish(ready.launched, timeout_s)
    finally:
        preparer.resume()
        preparer.timing_pid = None
        ready.close()
        ready.workdir.cleanup()
    if result.status == "ok" and isinstance(result.evidence, dict):
        result.evidence["prepared_ahead"] = {
            "waited_for_ready_seconds": round(turn_began - waited, 3),
            "prepared_beside": beside}
    if child.timed_out or not ready.ready:
        return result
    return _with_host_load(result, monitor)


def _with_host_load(result: BenchResult, monitor: host.LoadMonitor) -> BenchResult:
    window = (result.evidence.get("timing") or {}).get("window") \
        if isinstance(result.evidence, dict) else None
    if result.status == "ok":
        load = monitor.load(*window) if isinstance(window, list) and len(window) == 2 \
            else monitor.load()
        if load is not None:
            result.fingerprint["host_load"] = load.to_dict()
    return result
