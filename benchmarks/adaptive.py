"""Measure a cell until its comparison is decided (`run_adaptive`, `AdaptiveMeasurement`):
units one at a time, the cell's variance components setting the rounds of later units,
the software identity deciding whether there is anything to decide, and, on a CPU, the
baseline's environment measured in turns with the candidate's in the same session."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks import host, identity, launch_pin, launch_state, paired_units, prepared, stats
from benchmarks.children import (
    LOAD_REMEASURES,
    LOAD_WAIT_S,
    _gated_launch,
    failed_result,
    process_spec,
    unit_key,
)
from benchmarks.merging import host_load_of, merge_processes, process_record
from benchmarks.result import BenchResult, ResultError
from benchmarks.result_schema import (
    AdaptiveEvidence,
    BaselineProcess,
    ComparisonEvidence,
    LaunchStates,
    Resolvable,
)
from benchmarks.spec import BenchSpec, SpecError
from benchmarks.split_sides import run_unit
from benchmarks.stored_parts import written
from benchmarks.timing_policy import TimingPolicy
from benchmarks.vocabulary import AdaptiveMode, StoppedBy

ReferenceFor = Callable[[BenchResult], "stats.Reference | None"]
# devices whose processes time in kernel-launch states (benchmarks.launch_state)
LAUNCH_STATE_DEVICES = ("cuda",)


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
      identity), the ratio is of the candidate sides' own times (`paired_units.compare_levels`),
      else of the speedups (`paired_units.compare_units`). On a GPU a build reproduces to 0.1%
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
        self._stopped_by: StoppedBy = "max_processes"
        self._final: BenchResult | None = None
        self._remeasured: list[dict[str, Any]] = []
        self._gpu_remeasured: list[int] = []
        self._mode: AdaptiveMode = "adaptive"
        self._base_python: str | None = None
        self._base_results: list[BenchResult] = []
        self._comparison: paired_units.UnitsComparison | None = None
        self._comparison_base: BenchResult | None = None
        self._shared_side: str | None = None
        self._comparison_error: str | None = None
        self._allocation: dict[str, Any] | None = None
        try:
            spec.validate()
        except SpecError as exc:
            self._final = failed_result(spec, f"invalid spec: {exc}", "", self._started)

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
        one = run_unit(self._unit_spec, j, timeout_s=self._timeout_s, python=self._python,
                        env=self._env, cwd=self._cwd)
        if not self._accept(one, j):
            return
        self._results.append(one)
        self._walls.append(time.monotonic() - began)
        if j == 0:
            self._look_up_reference(one)
        pooled = self._pooled()
        # units set aside in another launch state count against the guards' allowance
        if len(pooled) < self._k_min \
                and len(self._results) < max(self._k_min + LOAD_REMEASURES, self._k_max):
            return
        self._allocate()
        if self._mode == "interleaved":
            return  # decided after the baseline's unit of this turn
        try:
            self._merged = self._merge(pooled)
        except (stats.StatsError, ResultError) as exc:
            self._final = failed_result(spec, f"merging {len(pooled)} processes: {exc}", "",
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
        if policy.budget_seconds > 0 and timing_seconds(self._results) >= policy.budget_seconds:
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
        return not (self._too_busy(one, j) or self._gpu_shared(one, j))

    def _merge(self, results: list[BenchResult]) -> BenchResult:
        spec = self.spec
        if len(results) > 1:
            merged = merge_processes(spec, results, started_monotonic=self._started)
        else:
            only = results[0]  # one process: its own result, filed under the cell's spec
            fp = dict(only.fingerprint)
            load = host_load_of([only], spec.timing.max_host_load)
            if load is not None:
                fp["host_load"] = load
            merged = replace(only, spec=spec.to_dict(), evidence=dict(only.evidence),
                             fingerprint=fp)
        first = self._results[0] if self._results else results[0]
        if results[0] is not first and isinstance(first.evidence, dict):
            # the cell's first process was set aside (another launch state): what only a
            # first process records (its kernel counts, its profiles) is still the cell's
            for key, value in first.evidence.items():
                merged.evidence.setdefault(key, value)
        return merged

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
        one = run_unit(self._unit_spec, j, timeout_s=self._timeout_s,
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
                self._comparison = paired_units.compare_levels(
                    [r.candidate_samples_ms for r in self._results],
                    [r.candidate_samples_ms for r in self._base_results],
                    candidate_env_eager=[r.baseline_samples_ms for r in self._results],
                    baseline_env_eager=[r.baseline_samples_ms for r in self._base_results],
                    resamples=policy.bootstrap_resamples, seed=policy.seed)
            else:
                self._comparison = paired_units.compare_units(
                    [r.speedup for r in self._results if r.speedup is not None],
                    [r.speedup for r in self._base_results if r.speedup is not None],
                    cand.speedup.value / base.speedup.value)
        except (stats.StatsError, ResultError) as exc:
            self._final = failed_result(self.spec, f"comparing with the baseline's environment: "
                                  f"{exc}", "", self._started)
            return
        self._merged = cand
        threshold = self._reference.threshold if self._reference else 0.0
        c = self._comparison
        outcome = stats.classify_ratio(c.ratio, c.low, c.high, threshold)
        self._decision = stats.Decision(outcome, c.ratio, c.low, c.high, c.log_half)
        self._comparison_base = base
        # as a cell decided against a stored baseline: decided, and as precise as the target
        if self._decision.decided and _precise_enough(self._decision,
                                                      _comparison_target(policy)):
            self._stopped_by = "decided"
            self._finish()
            return
        spent = timing_seconds(self._results) + timing_seconds(self._base_results)
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
        timing = [timing_seconds([r]) for r in units]
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

    def _launch_states(self) -> launch_state.CellStates | None:
        """The cell's processes by kernel-launch state (benchmarks.launch_state), on a GPU,
        where the cell counted its kernels."""
        if self.spec.device not in LAUNCH_STATE_DEVICES:
            return None
        return launch_state.of_results(self._results)

    def _pooled(self) -> list[BenchResult]:
        """The units the cell's speedup pools: all but those set aside by launch state (kept
        in `evidence.launch_states`)."""
        states = self._launch_states()
        return self._results if states is None else [self._results[j] for j in states.pooled]

    def _gpu_shared(self, one: BenchResult, j: int) -> bool:
        """The GPU guard: a unit during which another process made a CUDA context on its
        GPU timed a GPU in another state than a process alone finds it
        (benchmarks.fingerprint.newer_gpu_processes): measured again, while re-measures
        are left (LOAD_REMEASURES a cell); after that it is kept, and the verdict says so
        (app.detection.notes)."""
        evidence = one.evidence if isinstance(one.evidence, dict) else {}
        record = evidence.get("gpu_processes")
        newer = record.get("newer") if isinstance(record, dict) else None
        if launch_pin.held(evidence.get("launch_pin")):  # pinned graphs stay as they are
            return False
        # children prepared ahead (benchmarks.prepared) make contexts beside every unit:
        # measuring again would meet them again, so their units are only marked
        if not isinstance(newer, int) or newer <= 0 or prepared.active() is not None \
                or len(self._gpu_remeasured) >= LOAD_REMEASURES:
            return False
        self._gpu_remeasured.append(j + 1)
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
            self._final = failed_result(self.spec, f"{reason} (after {len(self._results)} "
                                  "processes)", "", self._started)

    def _resolvable(self) -> Resolvable | None:
        """The smallest change this runner decides at the cell's budget: the half-width a
        comparison of two such measurements reaches (one interleaved comparison: its
        pairs), from the cell's own unit variance and timing per unit."""
        budget = self.spec.timing.budget_seconds
        units = [r for r in self._pooled() if r.speedup is not None]
        if budget <= 0 or len(units) < 2:
            return None
        per_unit = timing_seconds(units) / len(units)
        try:
            if self._comparison is not None:
                per_pair = per_unit + timing_seconds(self._base_results) / max(
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
        return Resolvable(half_width=half, budget_seconds=spent,
                          unit_timing_seconds=round(per_unit, 3))

    def _finish(self) -> None:
        merged, decision, reference = self._merged, self._decision, self._reference
        assert merged is not None
        base_spent = timing_seconds(self._base_results)
        merged.evidence["adaptive"] = written(AdaptiveEvidence(
            outcome=decision.outcome if decision else None,
            stopped_by=self._stopped_by if reference is not None else "fixed_processes",
            processes=len(self._results),
            timing_seconds=timing_seconds(self._results) + base_spent,
            reference_speedup=reference.speedup if reference else None,
            reference_log_half=reference.log_half if reference else None,
            threshold=reference.threshold if reference else None,
            ratio=decision.ratio if decision else None,
            ratio_ci=[decision.ratio_low, decision.ratio_high] if decision else None,
            log_half_width=decision.log_half if decision else None,
            target_half_width=(_comparison_target(self.spec.timing)
                               if self._comparison is not None
                               else self.spec.timing.target_half_width) or None,
            mode=self._mode,
            resolvable=self._resolvable(),
            reference_error=self._reference_error or None,
            comparison_error=self._comparison_error or None,
            gpu_remeasured=self._gpu_remeasured or None,
        ), unless_none=("resolvable", "reference_error", "comparison_error", "gpu_remeasured"))
        if self._allocation is not None:
            merged.evidence["allocation"] = self._allocation
        if self._comparison is not None and reference is not None:
            base = self._comparison_base
            assert base is not None and base.speedup is not None
            merged.evidence["comparison"] = written(ComparisonEvidence(
                mode="interleaved",
                baseline_result_id=reference.result_id,
                baseline_environment=reference.environment,
                # the baseline environment's speedup on the comparison's basis: over the
                # shared eager level when eager was the same software (this result's
                # speedup over the ratio), else as it measured itself
                baseline_speedup=(merged.speedup.value / self._comparison.ratio
                                  if self._shared_side and merged.speedup
                                  else base.speedup.value),
                baseline_measured_speedup=base.speedup.value,
                baseline_ci=[base.speedup.ci_low, base.speedup.ci_high],
                baseline_processes=[BaselineProcess(
                    speedup=r.speedup.value if r.speedup else None,
                    baseline_median_ms=r.baseline.median_ms if r.baseline else None,
                    candidate_median_ms=r.candidate.median_ms if r.candidate else None)
                    for r in self._base_results],
                baseline_timing_seconds=base_spent,
                ratio=self._comparison.ratio,
                ratio_ci=[self._comparison.low, self._comparison.high],
                # "candidate_side": eager was the same software in both (its side identity),
                # so the ratio is of the candidate sides' times; "speedups" otherwise
                basis="candidate_side" if self._shared_side else "speedups",
                # the candidate sides' pairs adjusted by eager's (paired_units.compare_levels)
                control_variate=self._comparison.control_variate,
                shared_baseline_side=self._shared_side,
                pairs=self._comparison.pairs,
                threshold=reference.threshold,
            ), unless_none=("shared_baseline_side",))
        states = self._launch_states()
        if states is not None:
            aside = sorted(states.faster + states.changed)
            merged.evidence["launch_states"] = written(LaunchStates.model_validate({
                "shift_us_per_kernel": (None if states.shift_us is None
                                        else round(states.shift_us, 4)),
                "pooled": [j + 1 for j in states.pooled],
                "set_aside": [j + 1 for j in aside],
                "changed_while_timing": [j + 1 for j in states.changed],
                "set_aside_processes": [process_record(self._results[j]) for j in aside]}))
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


def _comparison_target(policy: TimingPolicy) -> float:
    """The half-width an in-session comparison aims at: the cell's target, at most
    COMPARISON_TARGET_HALF_WIDTH (0: none, as the cell's)."""
    target = policy.target_half_width
    return min(target, COMPARISON_TARGET_HALF_WIDTH) if target > 0 else 0.0


def _precise_enough(decision: stats.Decision, target_half_width: float) -> bool:
    """Whether a decided comparison also meets the policy's width floor (0: none)."""
    return target_half_width <= 0 or decision.log_half <= math.log1p(target_half_width)


def timing_seconds(results: list[BenchResult]) -> float:
    total = 0.0
    for r in results:
        timing = r.evidence.get("timing") if isinstance(r.evidence, dict) else None
        if isinstance(timing, dict) and isinstance(timing.get("timing_seconds"), (int, float)):
            total += float(timing["timing_seconds"])
    return total
