"""A GPU comparison between two runs timed in different kernel-launch states.

A cell pools its processes of one launch state (benchmarks.launch_state), but a cell whose
every process timed in the faster state cannot tell, and its speedup is that state's: at
batch 1 to 8 on an H200 the state alone moves ResNet50's speedup by 1-4%, past the
verdict's threshold. Against the baseline run it shows: eager, the same software in both
runs, ran every kernel 0.1-1.0 us shorter (or longer). Such a verdict is not the code's: it
is made inconclusive, naming the state and what the speedup would be in the baseline's
state, unless it holds in that state too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.detection.verdict_types import Baseline, CellVerdict, RatioEstimate, signed_percent
from benchmarks import identity, launch_state
from benchmarks.result import BenchResult
from benchmarks.stats import classify_ratio

PREFIX = "launch state: "  # a reason of this module's; kept where the same software is judged


def _eager_software(result: BenchResult) -> Any:
    software = identity.of(result.fingerprint) or {}
    return (software.get("sides") or {}).get("baseline")


def between_runs(result: BenchResult, baseline: Baseline | None, speed: CellVerdict,
                 threshold: float) -> CellVerdict | None:
    """`speed` (a regression or an improvement against a stored baseline) again, where
    eager's shift between the runs is a launch state's; None where it is not."""
    if speed.verdict not in ("regression", "improvement") or speed.ratio is None \
            or baseline is None or baseline.result is None:
        return None
    old = baseline.result
    spec = result.spec if isinstance(result.spec, Mapping) else {}
    eager = _eager_software(result)
    if spec.get("device") != "cuda" or eager is None or eager != _eager_software(old):
        return None
    new_times, old_times = launch_state.unit_times(result), launch_state.unit_times(old)
    if new_times is None or old_times is None:
        return None
    shift = launch_state.between_runs(new_times, old_times)
    if shift is None:
        return None
    factor = launch_state.in_other_state(new_times, shift)
    est = speed.ratio
    moved = RatioEstimate(est.ratio * factor, est.ci_low * factor, est.ci_high * factor,
                          est.confidence, est.new_speedup * factor, est.baseline_speedup)
    rule = classify_ratio(moved.ratio, moved.ci_low, moved.ci_high, threshold)
    state = (f"{PREFIX}eager, the same software in both runs, ran every kernel "
             f"{abs(shift):.2f} us {'faster' if shift > 0 else 'slower'} than in "
             f"{baseline.description}, as a GPU process in the other kernel-launch state "
             f"does; in the baseline's state this run's speedup would be "
             f"{moved.new_speedup:.2f}x ({signed_percent(moved.ratio - 1)}; CI "
             f"{signed_percent(moved.ci_low - 1)} to {signed_percent(moved.ci_high - 1)})")
    if rule == speed.verdict:
        return CellVerdict(speed.verdict, (*speed.reasons, f"{state}: still a {rule}"), est,
                           speed.suspect)
    return CellVerdict("inconclusive", (
        *speed.reasons, f"{state}, which is not a {speed.verdict}: the two runs timed in "
        "different states, not different code; run it again"), est)
