"""Split sides: each side timed in a child process of its own, never next to a candidate
that runs between its calls inside one process (which slowed eager by up to 29% beside ONNX
Runtime constant weights, an artefact inside the speedup). The two children of a unit are
alive together and take turns round by round under a referee (benchmarks.turns), so round
i of both sides ran back to back and the speedup is paired.

Real child processes of a tiny model (eager against ONNX Runtime)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks.clocks import SIDE_WALL_ROUNDS, THREAD_CLOCK, WALL_CLOCK
from benchmarks.isolation import run_isolated
from benchmarks.result import BenchResult, ResultError
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec, SpecError
from benchmarks.split_sides import join_sides
from benchmarks.stats import speedup_ci, summary
from benchmarks.timing_policy import default_sides

SpecFactory = Callable[..., BenchSpec]


def test_split_is_the_cpu_default_and_paired_the_gpu_default() -> None:
    assert (default_sides("cpu"), default_sides("cuda")) == ("split", "paired")


def test_the_design_is_in_the_series_key_and_paired_leaves_no_trace() -> None:
    plain = BenchSpec(options={"threads": 1})
    split = BenchSpec(options={"threads": 1, "sides": "split"})
    assert split.series_key("cpu") == plain.series_key("cpu") + "/sides=split"
    assert BenchSpec(options={"threads": 1, "sides": "paired"}).series_key("cpu") == \
        plain.series_key("cpu")
    # the side a child times is harness-internal: not in the key
    child = BenchSpec(options={"threads": 1, "sides": "split", "_side": "baseline"})
    assert child.series_key("cpu") == split.series_key("cpu")


def test_an_unknown_design_or_side_is_refused_naming_the_option() -> None:
    with pytest.raises(SpecError, match=r"options\.sides"):
        BenchSpec(options={"sides": "both"}).validate()
    with pytest.raises(SpecError, match=r"options\._side"):
        BenchSpec(options={"sides": "split", "_side": "eager"}).validate()


def test_unpaired_rounds_of_different_counts_give_an_interval() -> None:
    base = [[10.0, 10.2], [10.1, 9.9], [10.0, 10.1]]
    cand = [[5.0, 5.1], [5.05, 4.95]]
    s = speedup_ci(base, cand, resamples=500, paired=False)
    assert s.method == "round-bootstrap" and s.ci_low <= s.value <= s.ci_high
    assert s.value == pytest.approx(10.05 / 5.025)


def test_one_process_cannot_run_a_split_measurement(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec()
    result = run_spec(replace(spec, options={**spec.options, "sides": "split"}))
    assert result.status == "failed" and "needs isolation" in (result.reason or "")


def test_a_single_side_is_an_input_to_the_merge_never_a_result() -> None:
    doc = BenchResult(series_key="k", spec=BenchSpec(options={"_side": "baseline"}).to_dict(),
                      status="ok", baseline_samples_ms=[[1.0]])
    doc.check()  # a child of a split measurement: ok without a speedup
    with pytest.raises(ResultError, match="needs a speedup"):
        replace(doc, spec=BenchSpec().to_dict()).check()


@pytest.mark.slow
def test_split_sides_alternate_and_each_child_times_one_side(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec(backend="onnxruntime")
    spec = replace(spec, options={**spec.options, "sides": "split"},
                   timing=replace(spec.timing, processes=2))
    result = run_isolated(spec, timeout_s=300)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    assert result.spec == spec.to_dict()
    assert result.series_key.endswith("/sides=split")
    units = result.evidence["processes"]
    assert [u["sides"]["order"] for u in units] == [["baseline", "candidate"],
                                                   ["candidate", "baseline"]]
    for u in units:  # the two children took turns: equal rounds, timing stretches overlap
        first, second = (u["sides"][name] for name in u["sides"]["order"])
        assert first["rounds"] == second["rounds"] > 0
        assert first["window"][0] < second["window"][0]  # the first side opened
        assert max(first["window"][0], second["window"][0]) < min(first["window"][1],
                                                                   second["window"][1])
        assert u["host_other_cores"] >= 0  # the load guard read the host meanwhile
    assert result.accuracy is not None and result.accuracy.passed
    assert result.evidence["onnx_weight_inputs"] == 0  # the candidate's own evidence
    assert result.speedup is not None
    assert result.speedup.value == pytest.approx(
        result.baseline.median_ms / result.candidate.median_ms)  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_failing_side_fails_the_unit_and_names_the_side(
    tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPEEDWATCH_ALLOW_FAULTS", "1")
    spec = tiny_spec()
    spec = replace(spec, options={**spec.options, "sides": "split", "_fault": "raise"})
    result = run_isolated(spec, timeout_s=300)
    assert result.status == "failed"
    assert (result.reason or "").startswith("baseline side: ")


def _side_child(side: str, rounds: list[list[float]], *, clock: str,
                wall_rounds: list[list[float]] | None = None,
                fallback: str | None = None) -> BenchResult:
    """A split child's document as benchmarks.runner writes it for one side."""
    spec = BenchSpec(device="cpu", options={"threads": 1, "sides": "split", "_side": side})
    timing: dict[str, object] = {"mode": "nographs", "clock": clock, "side": side,
                                 "rounds": len(rounds), "timing_seconds": 1.0}
    if wall_rounds is not None:
        timing[SIDE_WALL_ROUNDS] = wall_rounds
    if fallback is not None:
        timing["clock_fallback"] = fallback
    doc = BenchResult(series_key="k", spec=spec.to_dict(), status="ok",
                      evidence={"timing": timing}, fingerprint={"device_class": "cpu"})
    if side == "baseline":
        doc.baseline_samples_ms, doc.baseline = rounds, summary(rounds)
    else:
        doc.candidate_samples_ms, doc.candidate = rounds, summary(rounds)
    return doc


def test_a_side_fallen_back_to_the_wall_clock_takes_the_other_side_with_it() -> None:
    # The baseline's thread was timed by its CPU time (8 ms) while its wall clock read 10 ms;
    # the candidate's process had helper threads, so its child fell back to the wall (5 ms).
    # Comparing 8 ms of CPU with 5 ms of wall would say 1.6x; the wall clocks say 2.0x.
    base = _side_child("baseline", [[8.0, 8.1]] * 6, clock=THREAD_CLOCK,
                       wall_rounds=[[10.0, 10.1]] * 6)
    cand = _side_child("candidate", [[5.0, 5.05]] * 6, clock=WALL_CLOCK,
                       fallback="other threads of the process used 2.1% of the timed thread's "
                                "CPU time")
    spec = BenchSpec(device="cpu", options={"threads": 1, "sides": "split"})
    joined = join_sides(spec, base, cand, order=["baseline", "candidate"])
    assert joined.status == "ok"
    assert joined.baseline_samples_ms == [[10.0, 10.1]] * 6
    assert joined.speedup is not None and joined.speedup.value == pytest.approx(10.05 / 5.025)
    timing = joined.evidence["timing"]
    assert timing["clock"] == WALL_CLOCK
    assert timing["clock_fallback"].startswith("candidate side: other threads")
    assert timing["clock_fallback"].endswith("both sides compared by the wall clock")
    assert SIDE_WALL_ROUNDS not in timing and "side" not in timing
    assert joined.evidence["sides"]["baseline"]["median_ms"] == pytest.approx(10.05)


def test_sides_on_one_clock_keep_it_and_leave_no_child_bookkeeping() -> None:
    base = _side_child("baseline", [[8.0, 8.1]] * 4, clock=THREAD_CLOCK,
                       wall_rounds=[[10.0, 10.1]] * 4)
    cand = _side_child("candidate", [[4.0, 4.05]] * 4, clock=THREAD_CLOCK,
                       wall_rounds=[[5.0, 5.05]] * 4)
    spec = BenchSpec(device="cpu", options={"threads": 1, "sides": "split"})
    joined = join_sides(spec, base, cand, order=["candidate", "baseline"])
    assert joined.evidence["timing"]["clock"] == THREAD_CLOCK
    assert "clock_fallback" not in joined.evidence["timing"]
    assert SIDE_WALL_ROUNDS not in joined.evidence["timing"]
    assert joined.speedup is not None and joined.speedup.value == pytest.approx(8.05 / 4.025)


def test_a_cpu_timed_side_without_its_wall_rounds_cannot_be_joined_to_a_wall_side() -> None:
    base = _side_child("baseline", [[8.0]] * 3, clock=THREAD_CLOCK)
    cand = _side_child("candidate", [[5.0]] * 3, clock=WALL_CLOCK, fallback="helpers")
    spec = BenchSpec(device="cpu", options={"threads": 1, "sides": "split"})
    with pytest.raises(ResultError, match=r"baseline side .* kept no wall-clock rounds"):
        join_sides(spec, base, cand, order=["baseline", "candidate"])
