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

from benchmarks.isolation import run_isolated
from benchmarks.result import BenchResult, ResultError
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec, SpecError, default_sides
from benchmarks.stats import speedup_ci

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
