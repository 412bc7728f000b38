"""The per-run verdict: one new cell against its series' baseline, from the raw samples.

A regression is a speedup drop that is real (its confidence interval excludes no change) and
larger than a threshold (default 3%). The interval is that of the RATIO new speedup /
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

Verdicts, by the one rule `benchmarks.stats.classify_ratio`: "regression" (the ratio's
interval excludes 1 and its estimate is below 1 - threshold: a real drop, of a size that
matters), "improvement" (mirrored), "pass" (the interval's lower end is at or above
1 - threshold: a drop beyond the threshold is ruled out), otherwise "inconclusive". An
inconclusive cell whose point estimate is past the threshold is `suspect`:
it is re-measured like a candidate regression (app.services.confirmation); one that is
not says so in its reasons. No verdict is a silent pass.

Accuracy failures count as regressions (a fast wrong answer is not a speedup), and failed
cells as errors; every verdict carries reasons a person can read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from app.detection import launch_states
from app.detection.notes import (
    in_session_comparison,
    inconclusive_cause,
    measurement_notes,
    uneven_processes_note,
)
from app.detection.verdict_types import (
    DEFAULT_THRESHOLD,
    Baseline,
    CellVerdict,
    CellVerdictKind,
    RatioEstimate,
    Rounds,
    RunVerdict,
    RunVerdictKind,
    VerdictError,
    percent,
    signed_percent,
)
from benchmarks import identity
from benchmarks.result import BenchResult, Speedup
from benchmarks.stats import (
    PROCESSES_METHOD,
    Reference,
    StatsError,
    classify_ratio,
    log_half_width,
    ratio_interval,
    round_bootstrap,
)


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


def _check_threshold(threshold: float) -> None:
    if not 0 <= threshold < 1:
        raise VerdictError(f"threshold: {threshold} must be in [0, 1)")


def _classify(est: RatioEstimate, threshold: float, confidence: float,
              baseline_description: str, *, in_session: bool = False) -> CellVerdict:
    words = (
        f"speedup {est.baseline_speedup:.2f}x -> {est.new_speedup:.2f}x "
        f"({signed_percent(est.ratio - 1)}; {confidence:.0%} CI "
        f"{signed_percent(est.ci_low - 1)} to {signed_percent(est.ci_high - 1)}) "
        f"against {baseline_description}"
    )
    limit = percent(threshold)
    rule = classify_ratio(est.ratio, est.ci_low, est.ci_high, threshold)
    if rule == "regression":
        confirmed = (": confirmed by the two environments measured in turns"
                     if in_session else "")
        return CellVerdict("regression", (
            f"{words}: slower, past the {limit} threshold (the interval excludes no change)"
            f"{confirmed}",), est)
    if rule == "improvement":
        return CellVerdict("improvement", (
            f"{words}: faster, past the {limit} threshold (the interval excludes no change)",),
            est)
    if rule == "pass":
        return CellVerdict("pass", (f"{words}: no change beyond {limit}",), est)
    if est.ratio < 1 - threshold:
        return CellVerdict("inconclusive", (
            f"{words}: suspect: past the {limit} threshold, but the interval does not exclude "
            "no change (re-measure to confirm)",), est, suspect=True)
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
        speed = launch_states.between_runs(result, baseline, speed, threshold) or speed
        reasons.extend(speed.reasons)
    same = same_software_note(result, baseline, speed)
    if same is not None and not accuracy:
        # Nothing that decides the code changed: the measured difference is the host's, and
        # the speed line (its "not ruled out", its "measure longer") has nothing to judge.
        note, drift = same
        kept = [r for r in reasons if speed is None or r not in speed.reasons
                or r.startswith(launch_states.PREFIX)]
        return CellVerdict("pass", (*kept, note, *measurement_notes(result)),
                           speed.ratio if speed else None, False, host_drift=drift)
    reasons.extend(measurement_notes(result))
    if speed is not None and speed.verdict == "inconclusive":
        cause = inconclusive_cause(result, baseline, threshold)
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


def in_session_verdict(result: BenchResult, baseline: Baseline | None,
                       threshold: float) -> CellVerdict | None:
    """The verdict of a comparison measured in one session: the two environments' units in
    turns, so the drift between runs and the stored baseline's own width are not in it."""
    comparison = in_session_comparison(result, baseline)
    if comparison is None or result.speedup is None:
        return None
    assert baseline is not None
    ratio, ci, base = comparison.ratio, comparison.ratio_ci, comparison.baseline_speedup
    assert ratio is not None and ci is not None and base is not None  # all there, it checked
    low, high = ci
    est = RatioEstimate(ratio, min(low, ratio), max(high, ratio), 0.95, result.speedup.value,
                        base)
    pairs = comparison.pairs
    basis = ("; eager ran the same software in both, so the candidate sides' own times are "
             "compared" if comparison.basis == "candidate_side" else "")
    if basis and comparison.control_variate is True:
        basis += ", adjusted by eager's pair by pair for the host's moving speed"
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
    measured = (f"{signed_percent(est.ratio - 1)} [{signed_percent(est.ci_low - 1)}, "
                f"{signed_percent(est.ci_high - 1)}]")
    same = (f"same software as {baseline.description} (identity {new['digest']}: "
            "interpreter, installed distributions, harness, model and build all equal)")
    if speed.verdict in ("regression", "improvement"):
        runner = str(result.fingerprint.get("hostname") or "an unnamed runner")
        return (f"{same}: the measured {measured} is beyond what this host's noise explains: "
                f"host drift on runner {runner} (an operations matter, not a change of the "
                "code)", True)
    return f"{same}: the measured {measured} is the host's, not the code's", False


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
