"""Reproducible builds: choices a compiler makes by timing are pinned by default, every result
carries a fingerprint of what its build chose, and builds "as shipped" are a series of their
own whose results say how far apart their builds landed.

Real compiles (inductor's C++ code, ONNX Runtime's optimizer) of a tiny ResNet in child
processes; the merge is also checked on literal results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks import build
from benchmarks.isolation import run_isolated
from benchmarks.merging import merge_processes
from benchmarks.result import BenchResult, Speedup
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec, SpecError
from benchmarks.timing_policy import TimingPolicy, default_timing

SpecFactory = Callable[..., BenchSpec]


def test_builds_are_pinned_by_default_and_old_documents_keep_their_hash() -> None:
    assert default_timing("cuda").builds == default_timing("cpu").builds == "pinned"
    assert "builds" not in BenchSpec().to_dict()["timing"]
    assert BenchSpec.from_dict(BenchSpec().to_dict()) == BenchSpec()


def test_builds_as_shipped_are_a_series_of_their_own() -> None:
    shipped = BenchSpec(timing=TimingPolicy(builds="as-shipped")).validate()
    assert shipped.series_key("nvidia-h100").endswith("/builds=as-shipped")
    assert BenchSpec.from_dict(shipped.to_dict()).timing.builds == "as-shipped"
    assert BenchSpec().series_key("nvidia-h100").endswith("/nographs")


def test_an_unknown_build_mode_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"timing.builds: 'fast' is not one of pinned, "
                                        r"as-shipped"):
        BenchSpec(timing=TimingPolicy(builds="fast")).validate()


def test_the_fingerprint_is_a_short_stable_hash_of_the_choices() -> None:
    choices = {"kernels": ["triton_poi_fused_add_0"], "configs": {"k": {"XBLOCK": 256}}}
    again = {"configs": {"k": {"XBLOCK": 256}}, "kernels": ["triton_poi_fused_add_0"]}
    other = {"kernels": ["triton_poi_fused_add_0"], "configs": {"k": {"XBLOCK": 512}}}
    fp = build.fingerprint(choices)
    assert fp is not None and len(fp) == build.FINGERPRINT_HEX
    assert fp == build.fingerprint(again)  # key order is not a choice
    assert fp != build.fingerprint(other)
    assert build.fingerprint(None) is None


def _inductor(spec: BenchSpec, builds: str) -> BenchSpec:
    return replace(spec, backend="inductor",
                   timing=replace(spec.timing, builds=builds, max_seconds=0.3))


def test_pinned_inductor_turns_its_on_device_timing_off_and_as_shipped_leaves_it(
        tiny_spec: SpecFactory) -> None:
    pinned = run_spec(_inductor(tiny_spec(), "pinned"))
    assert pinned.status == "ok", pinned.reason
    assert pinned.evidence["inductor_build_knobs"] == {"triton.autotune_pointwise": False,
                                                       "deterministic": True}
    shipped = run_spec(_inductor(tiny_spec(), "as-shipped"))
    assert shipped.status == "ok", shipped.reason
    assert shipped.evidence["inductor_build_knobs"] == {"triton.autotune_pointwise": True}
    for result in (pinned, shipped):
        assert result.evidence["build"]["mode"] in ("pinned", "as-shipped")
        choices = result.evidence["build_choices"]
        assert choices["kernels"] and all(k.startswith("cpp_fused") for k in choices["kernels"])
        assert result.evidence["build_fingerprint"] == build.fingerprint(choices)


@pytest.mark.slow
def test_fresh_compiles_in_separate_processes_make_the_same_build(
        tiny_spec: SpecFactory) -> None:
    """Each process compiles afresh (its own inductor cache): the fingerprints agree, so
    the result says one build ran."""
    spec = _inductor(tiny_spec(), "pinned")
    spec = replace(spec, timing=replace(spec.timing, processes=2))
    # the host's build cache off: each process builds its own (benchmarks.build_cache)
    result = run_isolated(spec, timeout_s=300, env={"SPEEDWATCH_BUILD_CACHE_DIR": "off"})
    assert result.status == "ok", result.reason
    prints = [p["build_fingerprint"] for p in result.evidence["processes"]]
    assert len(prints) == 2 and prints[0] == prints[1] == result.evidence["build_fingerprint"]
    assert [p["build"]["source"] for p in result.evidence["processes"]] == ["built", "built"]
    assert {k: result.evidence["build"][k] for k in ("mode", "distinct")} == \
        {"mode": "pinned", "distinct": 1}


def test_onnx_runtime_fingerprints_its_optimized_graph(tiny_spec: SpecFactory) -> None:
    """Folding BatchNormalization into the convolutions is a choice of ORT's optimizer: the
    constant-weight graph and the tensor-weight graph are different builds."""
    constant = run_spec(tiny_spec(backend="onnxruntime", weights="constant"))
    tensor = run_spec(tiny_spec(backend="onnxruntime", weights="tensor"))
    again = run_spec(tiny_spec(backend="onnxruntime", weights="constant"))
    assert {r.status for r in (constant, tensor, again)} == {"ok"}
    assert constant.evidence["build_fingerprint"] == again.evidence["build_fingerprint"]
    assert constant.evidence["build_fingerprint"] != tensor.evidence["build_fingerprint"]
    ops = [node[1] for node in tensor.evidence["build_choices"]]
    assert "BatchNormalization" in ops
    assert "BatchNormalization" not in [node[1] for node in constant.evidence["build_choices"]]


def _unit(speedup: float, fingerprint: str) -> BenchResult:
    rounds = [[10.0, 10.1, 9.9]] * 4
    cand = [[10.0 / speedup, 10.1 / speedup, 9.9 / speedup]] * 4
    return BenchResult(
        series_key="k", spec=BenchSpec().to_dict(), status="ok",
        baseline_samples_ms=rounds, candidate_samples_ms=cand,
        speedup=Speedup(speedup, speedup * 0.999, speedup * 1.001),
        evidence={"build_fingerprint": fingerprint, "build": {"mode": "as-shipped"},
                  "timing": {"timing_seconds": 1.0}},
        fingerprint={"host_load": {"other_cores": 0.1, "peak_cores": 0.2, "cores": 2}})


def test_processes_that_built_differently_say_how_far_apart_their_builds_landed() -> None:
    spec = BenchSpec(timing=TimingPolicy(builds="as-shipped"))
    merged = merge_processes(spec, [_unit(2.0, "aaa"), _unit(2.06, "bbb"), _unit(2.0, "aaa")],
                             started_monotonic=0.0)
    record = merged.evidence["build"]
    assert record["distinct"] == 2
    assert record["spread"] == pytest.approx(0.06 / 2.0)
    # the result ran no single build: its fingerprint is the set's, not either one's
    assert merged.evidence["build_fingerprint"] == build.fingerprint(["aaa", "bbb"])
    same = merge_processes(spec, [_unit(2.0, "aaa"), _unit(2.01, "aaa")],
                           started_monotonic=0.0)
    assert same.evidence["build_fingerprint"] == "aaa"
    assert same.evidence["build"] == {"mode": "as-shipped", "distinct": 1}


def test_harness_options_never_reach_a_backends_settings() -> None:
    """How the sides share processes and which process this is are the harness's business:
    a backend that refuses unknown settings must not refuse them."""
    from benchmarks.backends.tensorrt import spec_problem
    from benchmarks.children import process_spec
    from benchmarks.spec import LATER_PROCESS_OPTION

    cell = BenchSpec(backend="tensorrt", device="cuda", precision="fp16")
    assert LATER_PROCESS_OPTION not in process_spec(cell, 0).options
    later = process_spec(replace(cell, options={"sides": "split", "_side": "baseline"}), 1)
    assert later.options[LATER_PROCESS_OPTION] is True
    assert spec_problem(later) is None
    assert later.series_key("nvidia-h100") == replace(
        cell, options={"sides": "split"}).series_key("nvidia-h100")
    assert spec_problem(replace(cell, options={"colour": 1})) == (
        "unknown tensorrt option(s): colour")
