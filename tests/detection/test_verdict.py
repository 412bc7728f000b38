"""The per-run verdict on literal raw samples: when a drop is a regression, and when not."""

from __future__ import annotations

import math

import pytest

from app.detection.baselines import previous_baseline, select_baseline, window_baseline
from app.detection.verdict import combine, judge_cell, judge_intervals, judge_results, judge_samples
from app.detection.verdict_types import Baseline, CellVerdict, HistoryPoint, VerdictError
from benchmarks.result import Accuracy, BenchResult, Speedup
from benchmarks.stats import PROCESSES_METHOD, speedup_ci

# Ten rounds of five iterations; the wiggle is +-1%, and rounds differ by up to 3% from each
# other, out of step between the two sides, so the speedup varies from round to round.
WIGGLE = [1.00, 1.01, 0.99, 1.005, 0.995]


def rounds(latency_ms: float, phase: int, n_rounds: int = 10) -> list[list[float]]:
    return [[latency_ms * w * (1 + 0.01 * ((r + phase) % 4)) for w in WIGGLE]
            for r in range(n_rounds)]


def result(eager_ms: float, candidate_ms: float, *, accuracy_ok: bool = True,
           status: str = "ok", reason: str | None = None) -> BenchResult:
    eager, cand = rounds(eager_ms, phase=0), rounds(candidate_ms, phase=1)
    ok = status == "ok"
    return BenchResult(
        series_key="resnet18/onnxruntime/constant/fp32/b1/static/cpu",
        spec={},
        status=status,  # type: ignore[arg-type]
        reason=reason,
        baseline_samples_ms=eager if ok else [],
        candidate_samples_ms=cand if ok else [],
        speedup=speedup_ci(eager, cand, resamples=200) if ok else None,
        accuracy=Accuracy(rel_l2=1e-6 if accuracy_ok else 0.2, max_abs=1e-5,
                          tolerance=1e-3, passed=accuracy_ok) if ok else None,
    )


def previous(res: BenchResult) -> Baseline:
    baseline = previous_baseline([HistoryPoint("rev-a", res)])
    assert baseline is not None
    return baseline


def test_a_clear_drop_is_a_regression_with_its_numbers_in_the_reason() -> None:
    before = result(10.0, 5.0)  # speedup 2.0
    after = result(10.0, 6.25)  # speedup 1.6, 20% slower
    v = judge_cell(after, previous(before))
    assert v.verdict == "regression"
    assert v.ratio is not None
    assert v.ratio.ratio == pytest.approx(0.8, rel=1e-3)
    assert v.ratio.ci_high < 0.97
    assert "1.99x -> 1.59x (-20.0%" in v.reasons[0]
    assert "previous run on the branch (rev-a)" in v.reasons[0]


def test_overlapping_samples_pass() -> None:
    before = result(10.0, 5.0)
    after = result(10.0, 5.05)  # 1% slower, inside the 3% threshold
    v = judge_cell(after, previous(before))
    assert v.verdict == "pass"
    assert v.ok and not v.suspect
    assert v.ratio is not None
    assert v.ratio.ci_low < v.ratio.ratio < v.ratio.ci_high
    assert v.ratio.ci_high > 0.97


def test_a_clear_gain_is_an_improvement_and_still_ok() -> None:
    v = judge_cell(result(10.0, 4.0), previous(result(10.0, 5.0)))
    assert v.verdict == "improvement"
    assert v.ok


def test_threshold_is_settable() -> None:
    before, after = result(10.0, 5.0), result(10.0, 5.3)  # about 5.7% slower
    assert judge_cell(after, previous(before)).verdict == "regression"
    assert judge_cell(after, previous(before), threshold=0.10).verdict == "pass"


def test_an_undecided_large_drop_is_inconclusive_and_suspect_never_a_pass() -> None:
    """Point estimate 5% down, but rounds so noisy the CI reaches above 0.97: not decided,
    so not a pass; suspect, so detection sends it for a re-measure."""
    eager = [[10.0] * 5 for _ in range(4)]
    noisy_cand = [[4.0] * 5, [6.5] * 5, [5.0] * 5, [5.7] * 5]  # pooled median 5.35
    reference = (10.0 / 5.35) / 0.95
    v = judge_samples(eager, noisy_cand, reference, resamples=500)
    assert v.ratio is not None and v.ratio.ratio == pytest.approx(0.95)
    assert v.ratio.ci_high > 0.97
    assert v.verdict == "inconclusive" and not v.ok
    assert v.suspect
    assert "suspect" in v.reasons[0] and "re-measure" in v.reasons[0]


def test_an_interval_that_straddles_the_threshold_is_inconclusive_not_suspect() -> None:
    """A 1% drop measured too loosely to rule out 3%: the reason says to measure longer."""
    v = judge_intervals(Speedup(1.98, 1.90, 2.06), Speedup(2.00, 1.99, 2.01))
    assert v.verdict == "inconclusive" and not v.suspect
    assert "uncertain: a drop beyond 3% is not ruled out" in v.reasons[0]


def test_multi_process_results_are_judged_on_their_own_intervals() -> None:
    """Between-process variance is in a multi-process result's interval and not in its
    rounds: the verdict uses the intervals (log half-widths in quadrature)."""
    new = Speedup(1.90, 1.89, 1.91, method=PROCESSES_METHOD)
    old = Speedup(2.00, 1.99, 2.01, method=PROCESSES_METHOD)
    v = judge_intervals(new, old)
    assert v.verdict == "regression"
    assert v.ratio is not None and v.ratio.ratio == pytest.approx(0.95)
    half = math.sqrt(math.log(1.91 / 1.90) ** 2 + math.log(2.01 / 2.00) ** 2)
    assert v.ratio.ci_high == pytest.approx(0.95 * math.exp(half), rel=1e-3)
    # the same pair as documents goes through the interval rule, whatever their rounds say
    doc = result(10.0, 5.0)
    doc.speedup = new
    base = result(10.0, 5.0)
    base.speedup = old
    assert judge_results(doc, base).verdict == "regression"
    assert judge_results(doc, 2.0).verdict == "regression"


def test_accuracy_failure_is_a_regression_even_when_speed_holds() -> None:
    v = judge_cell(result(10.0, 5.0, accuracy_ok=False), previous(result(10.0, 5.0)))
    assert v.verdict == "regression"
    assert any(r.startswith("accuracy: rel_l2 0.2") and "passed in the baseline" in r
               for r in v.reasons)


def test_failed_cell_is_an_error_with_its_reason() -> None:
    v = judge_cell(result(10.0, 5.0, status="failed", reason="child killed (OOM)"),
                   previous(result(10.0, 5.0)))
    assert v.verdict == "error"
    assert v.reasons == ("cell failed: child killed (OOM)",)


def test_first_result_of_a_series_passes_for_lack_of_baseline() -> None:
    v = judge_cell(result(10.0, 5.0), None)
    assert v.verdict == "pass"
    assert "no baseline yet" in v.reasons[0]


def test_window_baseline_is_the_median_of_recent_speedups() -> None:
    history = [HistoryPoint(f"r{i}", result(10.0, c)) for i, c in
               enumerate([5.0, 5.0, 2.0, 5.0, 5.0])]  # one lucky run at 5x
    baseline = window_baseline(history, window=5)
    assert baseline is not None
    assert baseline.speedup == pytest.approx(2.0, rel=0.01)
    assert "median of the last 5 runs" in baseline.description
    assert judge_cell(result(10.0, 5.0), baseline).verdict == "pass"
    assert judge_cell(result(10.0, 6.0), baseline).verdict == "regression"


def test_previous_baseline_skips_failed_runs_and_pinned_needs_a_run() -> None:
    good = HistoryPoint("r1", result(10.0, 5.0))
    failed = HistoryPoint("r2", result(10.0, 5.0, status="failed", reason="hang"))
    chosen = select_baseline("previous", [good, failed])
    assert chosen is not None and "(r1)" in chosen.description
    assert select_baseline("previous", [failed]) is None
    with pytest.raises(VerdictError, match="needs a pinned run"):
        select_baseline("pinned", [good])
    pinned = select_baseline("pinned", [], pinned=good)
    assert pinned is not None and pinned.kind == "pinned"


def test_run_verdict_regression_wins_over_error_and_reasons_name_cells() -> None:
    ok = CellVerdict("pass", ("fine",))
    err = CellVerdict("error", ("cell failed: hang",))
    reg = CellVerdict("regression", ("speedup 2.00x -> 1.60x",))
    unsure = CellVerdict("inconclusive", ("uncertain",))
    run = combine({"a": ok, "b": err, "c": reg, "d": unsure})
    assert run.verdict == "regression"
    # not-ok cells first, then the passes: no reason is left out, not even a pass's
    assert run.reasons == ("b: cell failed: hang", "c: speedup 2.00x -> 1.60x",
                           "d: uncertain", "a: fine")
    assert combine({"a": ok, "b": err, "d": unsure}).verdict == "error"
    assert combine({"a": ok, "d": unsure}).verdict == "inconclusive"
    assert combine({"a": ok}).verdict == "pass"
    assert combine({"a": ok}).reasons == ("a: fine",)
    # nothing judged (every cell skipped) is no pass
    assert combine({}).verdict == "inconclusive"


def test_unpaired_rounds_are_refused() -> None:
    with pytest.raises(VerdictError, match="eager rounds but"):
        judge_samples([[1.0]] * 3, [[1.0]] * 2, 1.0)
