"""The per-run verdict: one new cell against its series' baseline, from the raw samples.

A regression is a speedup drop whose confidence interval lies wholly below the baseline by
more than a threshold (default 3%). The interval is that of the RATIO new speedup /
baseline speedup, from a bootstrap over the rounds of both results:

- Each result's speedup is the ratio of pooled medians (eager over candidate), the number
  the result document reports (benchmarks.stats).
- Rounds are resampled, not single iterations: iterations of one round share the machine's
  momentary state, so treating them as independent would give a falsely narrow interval.
  Within one result the same round indices are drawn for eager and candidate (they ran back
  to back, so a slow moment cancels in the ratio); the two results are resampled
  independently, since they ran at different times.
- When the baseline is a history window (a median of past speedups, no raw samples), it is
  taken as a fixed reference and only the new result is resampled.

Results measured in several processes (`benchmarks.stats.combine_processes`) carry an
interval that includes the variance BETWEEN processes, which a round bootstrap cannot see
(two processes of one machine often disagree beyond their round CIs). When either side of a
comparison is such a result, the ratio's interval is built from the two results' own
intervals (log half-widths in quadrature, `benchmarks.stats.ratio_interval`), the same rule
adaptive measurement stops on, so a cell the worker called decided is judged decided here.

Verdicts: "regression" (the ratio's interval lies below 1 - threshold), "improvement"
(above 1 + threshold), "pass" (its lower end is at or above 1 - threshold: a drop beyond
the threshold is ruled out), otherwise "inconclusive": the interval straddles the
threshold. An inconclusive cell whose point estimate is past the threshold is `suspect`:
it is re-measured like a candidate regression (app.services.confirmation); one that is
not says so in its reasons. No verdict is a silent pass.

Accuracy failures count as regressions (a fast wrong answer is not a speedup), and failed
cells as errors; every verdict carries reasons a person can read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from benchmarks import identity
from benchmarks.result import BenchResult, Speedup
from benchmarks.stats import (
    PROCESSES_METHOD,
    Reference,
    StatsError,
    log_half_width,
    ratio_interval,
    round_bootstrap,
)

Rounds = Sequence[Sequence[float]]
CellVerdictKind = Literal["pass", "regression", "improvement", "inconclusive", "error"]
RunVerdictKind = Literal["pass", "regression", "inconclusive", "error"]
BaselineKind = Literal["previous", "pinned", "window"]

DEFAULT_THRESHOLD = 0.03


class VerdictError(ValueError):
    """Samples or settings that admit no verdict; the message says which."""


@dataclass(frozen=True)
class RatioEstimate:
    """New speedup over baseline speedup, with its bootstrap confidence interval."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    new_speedup: float
    baseline_speedup: float


@dataclass(frozen=True)
class Baseline:
    """What a new cell is compared with, and words that say what it is."""

    kind: BaselineKind
    description: str  # e.g. "the previous run on the branch (rev 3f2a1c)"
    speedup: float
    result: BenchResult | None = None  # raw samples when the baseline is one run


@dataclass(frozen=True)
class CellVerdict:
    verdict: CellVerdictKind
    reasons: tuple[str, ...]
    ratio: RatioEstimate | None = None
    suspect: bool = False
    """Point estimate beyond the threshold but the interval not wholly so: worth a re-measure."""
    host_drift: bool = False
    """Same software as the baseline, yet a change beyond the threshold: the host's drift,
    an operations matter (the runner is named in the reasons), never the code's regression."""

    @property
    def ok(self) -> bool:
        return self.verdict in ("pass", "improvement")


@dataclass(frozen=True)
class RunVerdict:
    verdict: RunVerdictKind
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class HistoryPoint:
    """One earlier result of the series, oldest first in a history."""

    revision: str
    result: BenchResult


# ---------------------------------------------------------------------------- bootstrap


def speedup_ratio_ci(
    new_eager: Rounds,
    new_candidate: Rounds,
    baseline: tuple[Rounds, Rounds] | float,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioEstimate:
    """CI of new speedup / baseline speedup by bootstrap over the rounds of both results.

    `baseline` is either (eager rounds, candidate rounds) of one baseline result, or a
    fixed reference speedup (a history median), which is then not resampled.
    """
    if not 0 < confidence < 1:
        raise VerdictError(f"confidence: {confidence} must be in (0, 1)")
    if resamples < 10:
        raise VerdictError(f"resamples: {resamples} must be at least 10")
    if len(new_eager) != len(new_candidate):
        raise VerdictError(f"new result: {len(new_eager)} eager rounds but "
                           f"{len(new_candidate)} candidate rounds")
    if not isinstance(baseline, (int, float)) and len(baseline[0]) != len(baseline[1]):
        raise VerdictError(f"baseline result: {len(baseline[0])} eager rounds but "
                           f"{len(baseline[1])} candidate rounds")
    rng = np.random.default_rng(seed)
    try:
        new_speedup, new_boot = round_bootstrap(new_eager, new_candidate, rng=rng,
                                                resamples=resamples)
        if isinstance(baseline, (int, float)):
            if not math.isfinite(baseline) or baseline <= 0:
                raise VerdictError(f"baseline speedup {baseline!r} is not a positive number")
            base_speedup = float(baseline)
            base_boot: npt.NDArray[np.float64] | float = base_speedup
        else:
            base_speedup, base_boot = round_bootstrap(baseline[0], baseline[1], rng=rng,
                                                      resamples=resamples)
    except StatsError as exc:  # samples that admit no interval: the verdict's own error
        raise VerdictError(str(exc)) from exc
    ratios = new_boot / base_boot
    ratio = new_speedup / base_speedup
    alpha = (1 - confidence) / 2
    low, high = (float(q) for q in np.quantile(ratios, [alpha, 1 - alpha]))
    return RatioEstimate(
        ratio=ratio,
        ci_low=min(low, ratio),
        ci_high=max(high, ratio),
        confidence=confidence,
        new_speedup=new_speedup,
        baseline_speedup=base_speedup,
    )


# ---------------------------------------------------------------------------- verdicts


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def percent(fraction: float) -> str:
    """3% for 0.03, 0.5% for 0.005: a threshold as set, never rounded to 0%."""
    return f"{fraction * 100:.3g}%"


def _check_threshold(threshold: float) -> None:
    if not 0 <= threshold < 1:
        raise VerdictError(f"threshold: {threshold} must be in [0, 1)")


def _classify(est: RatioEstimate, threshold: float, confidence: float,
              baseline_description: str, *, in_session: bool = False) -> CellVerdict:
    words = (
        f"speedup {est.baseline_speedup:.2f}x -> {est.new_speedup:.2f}x "
        f"({_pct(est.ratio - 1)}; {confidence:.0%} CI {_pct(est.ci_low - 1)} to "
        f"{_pct(est.ci_high - 1)}) against {baseline_description}"
    )
    limit = percent(threshold)
    if est.ci_high < 1 - threshold:
        confirmed = (": confirmed by the two environments measured in turns"
                     if in_session else "")
        return CellVerdict("regression", (f"{words}: slower by more than {limit}{confirmed}",),
                           est)
    if est.ci_low > 1 + threshold:
        return CellVerdict("improvement", (f"{words}: faster by more than {limit}",), est)
    if est.ci_low >= 1 - threshold:
        return CellVerdict("pass", (f"{words}: no change beyond {limit}",), est)
    if est.ratio < 1 - threshold:
        return CellVerdict("inconclusive", (
            f"{words}: suspect: the drop is not certain beyond {limit} (re-measure to "
            "confirm)",), est, suspect=True)
    return CellVerdict("inconclusive", (
        f"{words}: uncertain: a drop beyond {limit} is not ruled out (measure longer: "
        "more processes or a larger timing budget)",), est)


def judge_samples(
    new_eager: Rounds,
    new_candidate: Rounds,
    baseline: tuple[Rounds, Rounds] | float,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    baseline_description: str = "the baseline",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> CellVerdict:
    """Verdict on raw per-round latencies (one process each): see the module docstring."""
    _check_threshold(threshold)
    est = speedup_ratio_ci(new_eager, new_candidate, baseline, confidence=confidence,
                           resamples=resamples, seed=seed)
    return _classify(est, threshold, confidence, baseline_description)


def judge_intervals(
    new: Speedup,
    baseline: Speedup | float,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    baseline_description: str = "the baseline",
) -> CellVerdict:
    """Verdict from two results' own intervals (multi-process results): module docstring."""
    _check_threshold(threshold)
    if isinstance(baseline, Speedup):
        reference = Reference(threshold, baseline.value, log_half_width(baseline))
    else:
        if not math.isfinite(baseline) or baseline <= 0:
            raise VerdictError(f"baseline speedup {baseline!r} is not a positive number")
        reference = Reference(threshold, float(baseline), 0.0)
    try:
        ratio, low, high = ratio_interval(new, reference)
    except StatsError as exc:
        raise VerdictError(str(exc)) from None
    assert reference.speedup is not None
    est = RatioEstimate(ratio, min(low, ratio), max(high, ratio), new.confidence, new.value,
                        reference.speedup)
    return _classify(est, threshold, new.confidence, baseline_description)


def _hierarchical(speedup: Speedup | None) -> bool:
    return speedup is not None and speedup.method == PROCESSES_METHOD


def judge_results(
    new: BenchResult,
    baseline: BenchResult | float,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    baseline_description: str = "the baseline",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> CellVerdict:
    """The speed verdict of `new` against a baseline result (or a fixed speedup), by the
    interval rule when either was measured in several processes, else the round bootstrap."""
    base_speedup = baseline.speedup if isinstance(baseline, BenchResult) else None
    if _hierarchical(new.speedup) or _hierarchical(base_speedup):
        if new.speedup is None:
            raise VerdictError("the new result has no speedup")
        ref: Speedup | float = base_speedup if base_speedup is not None else (
            baseline if not isinstance(baseline, BenchResult) else 0.0)
        return judge_intervals(new.speedup, ref, threshold=threshold,
                               baseline_description=baseline_description)
    if isinstance(baseline, BenchResult):
        ref_rounds: tuple[Rounds, Rounds] | float = (
            (baseline.baseline_samples_ms, baseline.candidate_samples_ms)
            if baseline.baseline_samples_ms and baseline.candidate_samples_ms
            else (baseline.speedup.value if baseline.speedup else 0.0))
    else:
        ref_rounds = baseline
    return judge_samples(new.baseline_samples_ms, new.candidate_samples_ms, ref_rounds,
                         threshold=threshold, baseline_description=baseline_description,
                         confidence=confidence, resamples=resamples, seed=seed)


def _accuracy_reason(result: BenchResult, baseline: Baseline | None) -> str | None:
    acc = result.accuracy
    if acc is None or acc.passed:
        return None
    before = baseline.result.accuracy if baseline and baseline.result else None
    history = ""
    if before is not None:
        history = " (it also failed in the baseline)" if not before.passed else \
            f" (it passed in the baseline: rel_l2 {before.rel_l2:.2g})"
    return (f"accuracy: rel_l2 {acc.rel_l2:.2g} against eager exceeds the tolerance "
            f"{acc.tolerance:.2g}{history}")


def judge_cell(
    result: BenchResult,
    baseline: Baseline | None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> CellVerdict:
    """Verdict of one result document against its baseline (None: first of its series)."""
    if result.status == "failed":
        return CellVerdict("error", (f"cell failed: {result.reason or 'no reason given'}",))
    if result.status == "skipped":
        return CellVerdict("pass", (f"skipped: {result.reason or 'no reason given'}",))
    reasons: list[str] = []
    accuracy = _accuracy_reason(result, baseline)
    if accuracy:
        reasons.append(accuracy)
    speed: CellVerdict | None = None
    if baseline is None:
        reasons.append("no baseline yet: nothing to compare the speedup with")
    elif not result.baseline_samples_ms or not result.candidate_samples_ms:
        return CellVerdict("error", (*reasons, "result has no raw samples to judge"))
    else:
        b = baseline.result
        reference: BenchResult | float = b if b is not None and b.speedup is not None \
            else baseline.speedup
        try:
            speed = in_session_verdict(result, baseline, threshold) or judge_results(
                result, reference, threshold=threshold,
                baseline_description=baseline.description, confidence=confidence,
                resamples=resamples, seed=seed,
            )
        except VerdictError as exc:
            return CellVerdict("error", (*reasons, f"cannot judge the samples: {exc}"))
        reasons.extend(speed.reasons)
    same = same_software_note(result, baseline, speed)
    if same is not None and not accuracy:
        # Nothing that decides the code changed: the measured difference is the host's, and
        # the speed line (its "not ruled out", its "measure longer") has nothing to judge.
        note, drift = same
        kept = [r for r in reasons if speed is None or r not in speed.reasons]
        return CellVerdict("pass", (*kept, note, *measurement_notes(result)),
                           speed.ratio if speed else None, False, host_drift=drift)
    reasons.extend(measurement_notes(result))
    if speed is not None and speed.verdict == "inconclusive":
        cause = undecided_cause(result, baseline, threshold)
        if cause:
            reasons.append(cause)
        uneven = uneven_processes_note(result)
        if uneven:
            reasons.append(uneven)
    ratio = speed.ratio if speed else None
    suspect = speed.suspect if speed else False
    if accuracy or (speed and speed.verdict == "regression"):
        return CellVerdict("regression", tuple(reasons), ratio, suspect)
    kind: CellVerdictKind = speed.verdict if speed else "pass"
    return CellVerdict(kind, tuple(reasons), ratio, suspect)


def in_session_comparison(result: BenchResult,
                          baseline: Baseline | None) -> Mapping[str, Any] | None:
    """The result's comparison with its baseline's environment measured in the same session
    (benchmarks.isolation: `evidence.comparison`), when it compared with this baseline's
    environment; None otherwise."""
    comparison = _mapping(_mapping(result.evidence).get("comparison"))
    if comparison.get("mode") != "interleaved" or baseline is None or baseline.result is None:
        return None
    old = identity.of(baseline.result.fingerprint)
    if old is None or comparison.get("baseline_environment") != old["environment"]:
        return None
    numbers = [comparison.get("ratio"), *(comparison.get("ratio_ci") or [None, None]),
               comparison.get("baseline_speedup")]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in numbers):
        return None
    return comparison


def in_session_verdict(result: BenchResult, baseline: Baseline | None,
                       threshold: float) -> CellVerdict | None:
    """The verdict of a comparison measured in one session: the two environments' units in
    turns, so the drift between runs and the stored baseline's own width are not in it."""
    comparison = in_session_comparison(result, baseline)
    if comparison is None or result.speedup is None:
        return None
    assert baseline is not None
    ratio = float(comparison["ratio"])
    low, high = (float(v) for v in comparison["ratio_ci"])
    est = RatioEstimate(ratio, min(low, ratio), max(high, ratio), 0.95, result.speedup.value,
                        float(comparison["baseline_speedup"]))
    pairs = comparison.get("pairs")
    basis = ("; eager ran the same software in both, so the candidate sides' own times are "
             "compared" if comparison.get("basis") == "candidate_side" else "")
    return _classify(est, threshold, 0.95,
                     f"{baseline.description}, its environment measured in turns with this "
                     f"one in the same session ({pairs} units each{basis})", in_session=True)


def same_software_note(result: BenchResult, baseline: Baseline | None,
                       speed: CellVerdict | None) -> tuple[str, bool] | None:
    """When `result` ran exactly the baseline's software (benchmarks.identity), what the
    verdict says instead of judging the code, and whether the change is host drift: a
    comparison interval wholly past the threshold, which the host's noise between two runs
    of one program should never give. None when the software differs or is unknown."""
    if baseline is None or baseline.result is None or speed is None or speed.ratio is None:
        return None
    new, old = identity.of(result.fingerprint), identity.of(baseline.result.fingerprint)
    if new is None or old is None or new["digest"] != old["digest"]:
        return None
    est = speed.ratio
    measured = f"{_pct(est.ratio - 1)} [{_pct(est.ci_low - 1)}, {_pct(est.ci_high - 1)}]"
    same = (f"same software as {baseline.description} (identity {new['digest']}: "
            "interpreter, installed distributions, harness, model and build all equal)")
    if speed.verdict in ("regression", "improvement"):
        runner = str(_mapping(result.fingerprint).get("hostname") or "an unnamed runner")
        return (f"{same}: the measured {measured} is beyond what this host's noise explains: "
                f"host drift on runner {runner} (an operations matter, not a change of the "
                "code)", True)
    return f"{same}: the measured {measured} is the host's, not the code's", False


def measurement_notes(result: BenchResult) -> list[str]:
    """How the result was measured, where a reader of the verdict must know it: a timing
    fallback, and how long the adaptive measurement took to decide (or that it did not)."""
    notes: list[str] = []
    evidence = result.evidence if isinstance(result.evidence, Mapping) else {}
    fallback = evidence.get("cuda_graphs_fallback")
    if fallback:
        notes.append(f"timed without CUDA graphs (fallback): {fallback}")
    adaptive = evidence.get("adaptive")
    if isinstance(adaptive, Mapping) and adaptive.get("processes"):
        k, seconds = adaptive.get("processes"), adaptive.get("timing_seconds") or 0.0
        stopped = adaptive.get("stopped_by")
        limit = "timing budget" if stopped == "budget" else "process limit"
        decided_wide = (adaptive.get("outcome") not in (None, "undecided")
                        and isinstance(adaptive.get("target_half_width"), (int, float))
                        and isinstance(adaptive.get("log_half_width"), (int, float)))
        interleaved = adaptive.get("mode") == "interleaved"
        how = (f"the same software as the baseline: {k} processes ({seconds:.1f} s of timing), "
               "nothing to decide" if stopped == "same_software" else
               f"decided after {k} units of each environment in turns ({seconds:.1f} s of "
               "timing)" if stopped == "decided" and interleaved else
               f"decided after {k} processes ({seconds:.1f} s of timing)"
               if stopped == "decided" else
               f"decided, but the CI half-width {math.expm1(adaptive['log_half_width']):.2%} "
               f"is above the {adaptive['target_half_width']:.2%} target: stopped at {k} "
               f"processes ({seconds:.1f} s of timing) by the {limit}"
               if decided_wide and stopped in ("budget", "max_processes") else
               f"not decided: stopped at {k} processes ({seconds:.1f} s of timing) by the "
               f"{limit}"
               if stopped in ("budget", "max_processes") else
               f"measured in {k} processes ({seconds:.1f} s of timing)")
        resolvable = _mapping(adaptive.get("resolvable"))
        half, budget = resolvable.get("half_width"), resolvable.get("budget_seconds")
        if isinstance(half, (int, float)) and isinstance(budget, (int, float)):
            how += (f"; this runner resolves +-{half:.1%} in {budget:g} s of timing (a "
                    "comparison's half-width, from this cell's own units)")
        notes.append(f"measurement: {how}")
    load = host_load_note(result)
    if load:
        notes.append(load)
    return notes


def host_load_note(result: BenchResult) -> str | None:
    """The CPU load guard's mark, in words: a result timed beside busy co-tenants is stored
    as such, never as a quiet measurement (benchmarks.host)."""
    fingerprint = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    load = fingerprint.get("host_load")
    if not isinstance(load, Mapping) or not load.get("loaded"):
        return None
    remeasured = load.get("remeasured") or []
    again = f", {len(remeasured)} re-measured" if remeasured else ""
    cores = f" of {load['cores']}" if load.get("cores") else ""
    why = ("a busy CPU can delay the work a GPU side launches from it"
           if _mapping(result.spec).get("device") == "cuda" else
           "a co-tenant sharing caches and memory bandwidth can bias a CPU speedup by "
           "several percent")
    return (f"host busy: other processes kept {float(load.get('other_cores') or 0):.1f}"
            f"{cores} cores busy while timing ({load.get('units_loaded')} of "
            f"{load.get('units')} units past the {float(load.get('threshold') or 0):g}-core "
            f"guard{again}); {why}")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _relative(log_half: float) -> str:
    return f"+-{math.expm1(log_half):.1%}"


# A process whose side ran this far from the processes' median (and past 4 robust standard
# deviations of them) is named in an undecided verdict. On this project's 2-core machine a
# demo re-run stayed undecided because in 1-3 of 6-11 processes eager ran 10-30% slow for
# the whole process while the candidate held still; one such process of eleven took an
# interval from about +-1% to +-4%.
UNEVEN_PROCESS_SHARE = 0.05


def uneven_processes_note(result: BenchResult) -> str | None:
    """The processes whose own level of one side moved, in words (None if none did or too
    few processes ran to tell): what widened an interval that stayed undecided."""
    units = [u for u in _mapping(result.evidence).get("processes") or []
             if isinstance(u, Mapping)]
    if len(units) < 4:
        return None
    backend = _mapping(result.spec).get("backend")
    found: list[tuple[float, str]] = []
    for key, side in (("baseline_median_ms", "eager"),
                      ("candidate_median_ms", str(backend or "the candidate"))):
        levels = [u.get(key) for u in units]
        if not all(isinstance(v, (int, float)) and v > 0 for v in levels):
            continue
        values = np.asarray(levels, dtype=float)
        median = float(np.median(values))
        spread = 1.4826 * float(np.median(np.abs(values - median)))
        for j, value in enumerate(values):
            off = value / median - 1
            if abs(off) > UNEVEN_PROCESS_SHARE and abs(value - median) > 4 * spread:
                found.append((abs(off), f"{side} {abs(off):.0%} {'slow' if off > 0 else 'fast'}"
                                        f" in process {j + 1} ({value:.1f} ms a call against "
                                        f"a median of {median:.1f})"))
    if not found:
        return None
    found.sort(key=lambda item: -item[0])
    named = "; ".join(text for _, text in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (f"uneven processes: {named}{more}, of {len(units)} processes; a process whose own "
            "level moved widens the interval: a quieter runner decides it")


def undecided_cause(result: BenchResult, baseline: Baseline | None,
                    threshold: float) -> str | None:
    """Why a comparison stayed undecided, and what would settle it, in one line: builds
    that chose differently, a busy host, a wide baseline, or the budget or process limit
    that ran out first."""
    evidence = result.evidence if isinstance(result.evidence, Mapping) else {}
    spec = result.spec if isinstance(result.spec, Mapping) else {}
    timing = _mapping(spec.get("timing"))
    build = _mapping(evidence.get("build"))
    if isinstance(build.get("distinct"), int) and build["distinct"] > 1:
        spread = build.get("spread")
        apart = f", their speedups {spread:.1%} apart" if isinstance(spread, float) else ""
        return (f"why undecided: its {build['distinct']} builds chose differently{apart} "
                "(builds as shipped): measure with --builds pinned, or allow more processes "
                "(--max-processes) to average over builds")
    fingerprint = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    load = fingerprint.get("host_load")
    if isinstance(load, Mapping) and load.get("loaded"):
        return (f"why undecided: the host was busy ({float(load.get('other_cores') or 0):.1f} "
                "other cores): re-run on a quiet runner, or give benchmarks cores of their "
                "own (SPEEDWATCH_BENCH_CORES)")
    if result.speedup is None:
        return None
    own = log_half_width(result.speedup)
    base = baseline.result.speedup if baseline and baseline.result else None
    if base is not None and log_half_width(base) > own \
            and in_session_comparison(result, baseline) is None:
        return (f"why undecided: the baseline's own interval ({_relative(log_half_width(base))}"
                f") is the wider one: pin a more precise run as the baseline, or let this "
                "run become the baseline")
    adaptive = _mapping(evidence.get("adaptive"))
    stopped = adaptive.get("stopped_by")
    k = adaptive.get("processes")
    width = f"the interval ({_relative(own)}) is too wide for a {percent(threshold)} threshold"
    would = what_would_decide(adaptive, threshold)
    if stopped == "budget":
        budget = timing.get("budget_seconds")
        return (f"why undecided: {width} when the timing budget ({budget:g} s) ran out at "
                f"{k} processes: raise --budget (or --max-seconds), or the threshold{would}"
                if isinstance(budget, (int, float)) else
                f"why undecided: {width}: raise --budget{would}")
    if stopped == "max_processes":
        return (f"why undecided: {width} at the process limit ({k}): raise --max-processes "
                f"(or --budget), or the threshold{would}")
    return f"why undecided: {width}: measure more processes (--processes), or raise the threshold"


def what_would_decide(adaptive: Mapping[str, Any], threshold: float) -> str:
    """What budget, or what threshold, would have decided an undecided comparison, from the
    measurement's own ratio and interval: its half-width shrinks as one over the square
    root of the units, so a budget (h / d)^2 times the spent one reaches the distance d
    between the ratio and the threshold's line; the threshold that decides it now is where
    its interval ends."""
    ratio, ci = adaptive.get("ratio"), adaptive.get("ratio_ci") or [None, None]
    spent, half = adaptive.get("timing_seconds"), adaptive.get("log_half_width")
    values = [ratio, *ci, spent, half]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
        return ""
    assert isinstance(ratio, (int, float)) and isinstance(spent, (int, float))
    assert isinstance(half, (int, float))
    distance = abs(math.log(ratio) - math.log1p(-threshold))
    out = ""
    if distance > 0:
        needed = spent * (half / distance) ** 2
        if needed < 100 * spent:
            out = f" (about {needed:.0f} s of timing would decide it"
    low, high = float(ci[0]), float(ci[1])
    decides = 1 - low if ratio >= 1 - threshold else 1 - high
    if 0 < decides < 1:
        out += (f"{'; ' if out else ' ('}a threshold of {decides:.1%} would "
                f"{'pass' if ratio >= 1 - threshold else 'call a regression'} it now)")
    elif out:
        out += ")"
    return out


NOTHING_MEASURED = "no cell was measured (every cell was skipped): nothing to judge"


def combine(cells: Mapping[str, CellVerdict]) -> RunVerdict:
    """Run verdict: regression if any cell regressed, else error if any failed, else
    inconclusive if any cell is undecided, else pass. A run with no judged cell (every cell
    skipped: the backend is not installed, the model does not export) is inconclusive, not
    a pass: CI must not go green on a run that measured nothing.

    Reasons are every cell's, each prefixed with its cell's label: the cells that are not
    ok first (they decide the verdict), then the others, so even a pass says what it rests
    on (no baseline yet, no change beyond the threshold, a timing fallback).
    """
    if not cells:
        return RunVerdict("inconclusive", (NOTHING_MEASURED,))
    bad = {label: v for label, v in cells.items() if not v.ok}
    good = {label: v for label, v in cells.items() if v.ok}
    reasons = tuple(f"{label}: {r}" for group in (bad, good)
                    for label, v in group.items() for r in v.reasons)
    kinds = {v.verdict for v in bad.values()}
    order: tuple[RunVerdictKind, ...] = ("regression", "error", "inconclusive")
    for kind in order:
        if kind in kinds:
            return RunVerdict(kind, reasons)
    return RunVerdict("pass", reasons)


# ---------------------------------------------------------------------------- baselines


def _usable(point: HistoryPoint) -> bool:
    return point.result.status == "ok" and point.result.speedup is not None


def previous_baseline(history: Sequence[HistoryPoint]) -> Baseline | None:
    """The latest usable result of the branch's history (oldest first), or None."""
    for point in reversed(history):
        if _usable(point):
            assert point.result.speedup is not None
            return Baseline("previous", f"the previous run on the branch ({point.revision})",
                            point.result.speedup.value, point.result)
    return None


def pinned_baseline(point: HistoryPoint) -> Baseline:
    """A run a person pinned as the reference; refused if it has no speedup."""
    if not _usable(point):
        raise VerdictError(f"pinned run {point.revision} has no usable speedup "
                           f"(status {point.result.status})")
    assert point.result.speedup is not None
    return Baseline("pinned", f"the pinned run ({point.revision})",
                    point.result.speedup.value, point.result)


def window_baseline(history: Sequence[HistoryPoint], window: int = 10) -> Baseline | None:
    """Median speedup of the last `window` usable results: steady against one lucky run."""
    if window < 1:
        raise VerdictError(f"window: {window} must be at least 1")
    values = [p.result.speedup.value for p in history if _usable(p) and p.result.speedup][-window:]
    if not values:
        return None
    return Baseline("window", f"the median of the last {len(values)} runs",
                    window_median(values))


def window_median(speedups: Sequence[float]) -> float:
    """The window policy's one rule: the median, the mean of the middle two for an even
    count (the default window is 10). The worker's decision reference uses it too, so a
    cell is measured against the number its verdict is judged against."""
    if not speedups:
        raise VerdictError("window: no speedups to take the median of")
    return float(np.median(speedups))


def select_baseline(
    kind: BaselineKind,
    history: Sequence[HistoryPoint],
    *,
    pinned: HistoryPoint | None = None,
    window: int = 10,
) -> Baseline | None:
    """The project's baseline policy applied to a series' history (oldest first)."""
    if kind == "previous":
        return previous_baseline(history)
    if kind == "pinned":
        if pinned is None:
            raise VerdictError("baseline policy 'pinned' needs a pinned run")
        return pinned_baseline(pinned)
    if kind == "window":
        return window_baseline(history, window)
    raise VerdictError(f"baseline policy {kind!r} is not previous, pinned or window")
