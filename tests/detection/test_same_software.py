"""What the verdict says when it knows what changed: nothing (the same software), or another
environment measured in turns with the baseline's in one session."""

from __future__ import annotations

import pytest

from app.detection.notes import what_would_decide
from app.detection.verdict import judge_cell
from benchmarks import identity
from benchmarks.result import Speedup
from benchmarks.result_schema import AdaptiveEvidence
from benchmarks.stats import PROCESSES_METHOD
from tests.detection.test_verdict import previous, result

ENV = {"environment": "aaaaaaaaaaaa", "interpreter": "CPython 3.11.7", "harness": "bbbbbbbbbbbb",
       "variables": {}, "distributions": {"onnxruntime": "1.22.0 0123abcd"}}
OTHER_ENV = {**ENV, "environment": "cccccccccccc",
             "distributions": {"onnxruntime": "1.22.0 0123abcd", "six": "1.16.0 89ab4567"}}


def measured(speedup: float, half: float, env: dict[str, object] = ENV):
    doc = result(10.0, 10.0 / speedup)
    doc.speedup = Speedup(speedup, speedup * (1 - half), speedup * (1 + half),
                          method=PROCESSES_METHOD)
    doc.fingerprint = {"hostname": "runner-7",
                       "software": identity.software_identity(env, model="m", build="f")}
    return doc


def test_the_same_software_passes_and_says_the_difference_is_the_hosts() -> None:
    """-4% with an interval that reaches no change: suspect for new software, but nothing
    that decides the code changed, so it passes and says why."""
    before, after = measured(2.0, 0.01), measured(1.92, 0.05)
    v = judge_cell(after, previous(before))
    assert v.verdict == "pass" and not v.host_drift
    said = " ".join(v.reasons)
    assert "same software as the previous run on the branch (rev-a)" in said
    assert "is the host's, not the code's" in said
    assert "-4.0% [" in said


def test_a_change_beyond_the_hosts_noise_is_host_drift_naming_the_runner() -> None:
    before, after = measured(2.0, 0.005), measured(1.80, 0.005)
    v = judge_cell(after, previous(before))
    assert v.verdict == "pass" and v.host_drift
    assert any("host drift on runner runner-7" in r for r in v.reasons)


def test_other_software_is_judged_as_before() -> None:
    before, after = measured(2.0, 0.005), measured(1.80, 0.005, OTHER_ENV)
    v = judge_cell(after, previous(before))
    assert v.verdict == "regression" and not v.host_drift
    assert not any("same software" in r for r in v.reasons)


def test_an_accuracy_failure_is_never_excused_as_the_hosts() -> None:
    before, after = measured(2.0, 0.005), measured(2.0, 0.005)
    assert after.accuracy is not None
    after.accuracy.passed = False
    assert judge_cell(after, previous(before)).verdict == "regression"


def in_session(after, ratio: float, low: float, high: float, env: str = "aaaaaaaaaaaa"):
    after.evidence = {"comparison": {
        "mode": "interleaved", "baseline_environment": env, "baseline_speedup": 2.0,
        "ratio": ratio, "ratio_ci": [low, high], "pairs": 9}}
    return after


def test_an_in_session_comparison_is_judged_on_its_own_interval() -> None:
    """Stored baseline 2.0 +-5% and the new result 1.9 +-5%: undecided by the stored
    intervals; measured in turns with the baseline's environment, -5% [-6.5, -3.5]."""
    before = measured(2.0, 0.05)
    after = in_session(measured(1.90, 0.05, OTHER_ENV), 0.95, 0.935, 0.965)
    v = judge_cell(after, previous(before))
    assert v.verdict == "regression"
    assert "measured in turns with this one in the same session (9 units each)" in v.reasons[0]
    assert "confirmed by the two environments measured in turns" in v.reasons[0]
    assert not v.suspect


def test_an_in_session_comparison_of_another_environment_is_not_used() -> None:
    before = measured(2.0, 0.05)
    after = in_session(measured(1.90, 0.05, OTHER_ENV), 0.95, 0.935, 0.965,
                       env="dddddddddddd")
    assert judge_cell(after, previous(before)).verdict == "inconclusive"


@pytest.mark.parametrize(("ratio", "ci", "want"), [
    (0.98, [0.955, 1.005], "about 279 s of timing would decide it; a threshold of 4.5% would "
     "pass it now"),
    (0.95, [0.90, 1.003], "(about 50 s of timing would decide it)"),
])
def test_an_undecided_comparison_says_what_budget_or_threshold_would_decide_it(
        ratio: float, ci: list[float], want: str) -> None:
    import math

    half = (math.log(ci[1]) - math.log(ci[0])) / 2
    said = what_would_decide(AdaptiveEvidence(ratio=ratio, ratio_ci=ci, timing_seconds=45.0,
                                              log_half_width=half), 0.03)
    assert want in said
