"""Each side's profile, from real runs of a tiny ResNet: eager's operators (torch.profiler),
ONNX Runtime's nodes (its own profiler, in a session of its own), kept small, taken after
the timing and never in it; and the diff of two of them names what changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks.profile import MAX_ENTRIES, OTHER, document, kernel_family
from benchmarks.profile_diff import ProfileDiffError, diff, largest_contributor
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec

SpecFactory = Callable[..., BenchSpec]


def test_onnxruntime_and_eager_are_profiled_per_inference_and_the_diff_names_the_op(
    tiny_spec: SpecFactory, single_thread: None,
) -> None:
    constant = run_spec(tiny_spec(backend="onnxruntime", weights="constant"))
    tensor = run_spec(tiny_spec(backend="onnxruntime", weights="tensor"))
    for result in (constant, tensor):
        assert result.status == "ok", result.reason
        profile = result.evidence["profile"]
        assert profile["baseline"]["source"] == "torch.profiler"
        assert profile["baseline"]["what"] == "operators"
        assert any(e["name"].startswith("aten::") for e in profile["baseline"]["entries"])
        candidate = profile["candidate"]
        assert (candidate["source"], candidate["what"]) == ("onnxruntime", "nodes")
        assert candidate["total_us"] == pytest.approx(sum(e["us"] for e in
                                                          candidate["entries"]), rel=1e-3)
        assert "Conv" in {e["group"] for e in candidate["entries"]}
    # constant weights let ONNX Runtime fold BatchNorm into Conv; tensor weights keep it
    d = diff(constant.evidence["profile"]["candidate"], tensor.evidence["profile"]["candidate"])
    kinds = {r["name"]: r["change"] for r in d["rows"]}
    assert d["rows"] and set(kinds.values()) <= {"appeared", "vanished", "slower", "faster"}
    assert d["explained"] is not None


def test_profiling_off_leaves_no_profile(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec()
    result = run_spec(replace(spec, timing=replace(spec.timing, profile=False)))
    assert result.status == "ok" and "profile" not in result.evidence


def test_a_profile_keeps_its_costliest_rows_and_sums_the_rest() -> None:
    rows = [(f"op{i}", "Op", 2.0, float(i)) for i in range(MAX_ENTRIES + 10)]
    doc = document("onnxruntime", "nodes", 2, rows)
    assert len(doc["entries"]) == MAX_ENTRIES + 1
    assert doc["entries"][0]["name"] == f"op{MAX_ENTRIES + 9}"
    other = doc["entries"][-1]
    assert other["name"] == OTHER and other["us"] == pytest.approx(sum(range(10)) / 2)
    assert doc["total_us"] == pytest.approx(sum(range(MAX_ENTRIES + 10)) / 2)


def test_renamed_kernels_are_matched_by_family() -> None:
    assert kernel_family("triton_poi_fused_add_relu_12") == "triton_poi_fused_add_relu"
    assert kernel_family("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>(Params)") == \
        "void cutlass::Kernel<>"
    base = document("torch.profiler", "kernels", 1, [
        ("triton_poi_fused_add_relu_12", kernel_family("triton_poi_fused_add_relu_12"), 1, 10),
        ("sm90_gemm", "sm90_gemm", 1, 100)])
    head = document("torch.profiler", "kernels", 1, [
        ("triton_poi_fused_add_relu_7", kernel_family("triton_poi_fused_add_relu_7"), 1, 10),
        ("sm90_gemm", "sm90_gemm", 1, 100), ("opaque_identity", "opaque_identity", 1, 5)])
    d = diff(base, head)
    # the number changed, the family did not: one row, unchanged, so not listed
    assert d["matched_by"] == "group and name"
    assert [(r["name"], r["change"]) for r in d["rows"]] == [("opaque_identity", "appeared")]


def test_profiles_of_different_kinds_cannot_be_diffed() -> None:
    gpu = document("torch.profiler", "kernels", 1, [("k", "k", 1, 1)])
    ort = document("onnxruntime", "nodes", 1, [("k", "k", 1, 1)])
    with pytest.raises(ProfileDiffError, match="different kinds"):
        diff(gpu, ort)


def test_a_new_kernel_larger_than_the_net_change_is_said_so_not_as_a_share_past_100() -> None:
    """The regression that stopped freezing weights: a new batch-norm kernel added 347.5 us
    while the kernels it replaced gave back 207.5 us."""
    base = document("torch.profiler", "kernels", 1, [
        ("triton_poi_fused_add_relu_3", "triton_poi_fused_add_relu", 1, 207.5),
        ("sm90_gemm", "sm90_gemm", 1, 1000)])
    head = document("torch.profiler", "kernels", 1, [
        ("triton_poi_fused__native_batch_norm_legit_no_training_add_relu_9",
         "triton_poi_fused__native_batch_norm_legit_no_training_add_relu", 1, 347.5),
        ("sm90_gemm", "sm90_gemm", 1, 1000)])
    clause = largest_contributor(diff(base, head))
    assert clause is not None
    assert "+347.5 us per inference, more than the net +140.0 us: other rows -207.5 us" \
        in clause
    assert "%" not in clause
    smaller = document("torch.profiler", "kernels", 1, [
        ("triton_poi_fused_add_relu_3", "triton_poi_fused_add_relu", 1, 300.0),
        ("sm90_gemm", "sm90_gemm", 1, 1000)])
    clause = largest_contributor(diff(base, smaller))
    assert clause is not None and "100% of the change" in clause


def test_on_a_cpu_the_profile_pass_counts_no_kernels() -> None:
    """Kernels per inference are a GPU count (on an H200 the profile pass gives the very
    counts a pass of its own gave: results/nvidia-h200-2026-11-29-gpu-contexts/)."""
    import torch

    from benchmarks import profile as profiling

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(2, 8)
    document, kernels = profiling.torch_profile_and_kernels(lambda: model(x), on_cuda=False,
                                                            inferences=2)
    assert kernels is None
    assert document["what"] == "operators" and document["inferences"] == 2
    assert any(e["name"].startswith("aten::") for e in document["entries"])
