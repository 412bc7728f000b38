"""The evidence sentence: what changed between two results, readable in five seconds."""

from __future__ import annotations

from typing import Any

from app.detection.evidence import evidence_changes, evidence_sentence
from benchmarks.result import Accuracy, BenchResult, Speedup


def doc(*, kernels: int, nodes: dict[str, int], trt: str, compile_s: float,
        passed: bool = True) -> BenchResult:
    return BenchResult(
        series_key="resnet50/torch_tensorrt/tensor/fp16/b1/static/h100",
        spec={},
        status="ok",
        speedup=Speedup(2.0, 1.9, 2.1),
        evidence={"kernels_per_inference": kernels, "onnx_node_counts": nodes,
                  "graph_break_reasons": ["x"]},
        compile_seconds=compile_s,
        accuracy=Accuracy(rel_l2=1e-4 if passed else 0.3, max_abs=1e-3, tolerance=1e-2,
                          passed=passed),
        fingerprint={"packages": {"torch": "2.6.0", "torch-tensorrt": trt}, "gpu": "H100"},
    )


def test_the_sentence_names_fusion_evidence_first_then_versions() -> None:
    before = doc(kernels=58, nodes={"Conv": 53, "Relu": 49, "Add": 20}, trt="2.6.0",
                 compile_s=40.0)
    after = doc(kernels=161, nodes={"Conv": 53, "Relu": 49, "Add": 20, "Identity": 53},
                trt="2.7.0", compile_s=41.0)
    assert evidence_sentence(before, after) == (
        "kernels per inference 58 -> 161; onnx nodes 122 -> 175 (+53 Identity); "
        "torch-tensorrt 2.6.0 -> 2.7.0"
    )


def test_compile_time_and_accuracy_appear_only_when_they_really_changed() -> None:
    before = doc(kernels=58, nodes={}, trt="2.6.0", compile_s=40.0)
    after = doc(kernels=58, nodes={}, trt="2.6.0", compile_s=95.0, passed=False)
    assert [str(c) for c in evidence_changes(before, after)] == [
        "compile time 40.0 s -> 95.0 s",
        "accuracy passed -> failed (rel_l2 0.0001 -> 0.3)",
    ]


def test_identical_results_say_so_and_plain_documents_work_too() -> None:
    same = doc(kernels=58, nodes={"Conv": 1}, trt="2.6.0", compile_s=40.0)
    assert evidence_sentence(same, same).startswith("no change")
    before = {"evidence": {"trt_layer_count": 90}, "fingerprint": {"cuda": "12.4"}}
    after = {"evidence": {"trt_layer_count": 212}, "fingerprint": {"cuda": "12.6"}}
    assert evidence_sentence(before, after) == "engine layers 90 -> 212; cuda 12.4 -> 12.6"


def test_maps_that_are_not_counts_are_left_out_instead_of_breaking_the_sentence() -> None:
    # The shape of a real ONNX Runtime result's evidence (benchmarks.runner): next to the
    # node counts sit maps of timings and settings, with strings, floats and nested maps.
    def real(rounds: int, stopped_by: str, relu: int) -> dict[str, object]:
        return {"evidence": {
            "timing": {"rounds": rounds, "stopped_by": stopped_by, "timing_seconds": 0.33,
                       "cuda_graphs": {"baseline": False, "candidate": False}},
            "compile": {"compile_call_seconds": 0.87},
            "baseline_accuracy": {"rel_l2": 0.0, "passed": True},
            "onnx_node_counts": {"Conv": 20, "Relu": relu},
        }}

    assert evidence_sentence(real(3, "rounds", 17), real(5, "ci_width", 0)) == (
        "onnx nodes 37 -> 20 (-17 Relu)")


def test_onnx_evidence_is_told_once_not_as_totals_and_breakdowns_of_the_same_graph() -> None:
    """The ONNX Runtime backend records the graph several ways (by op, by domain, totals);
    the sentence names the by-op change and the weight wiring, each once."""
    def ort(nodes: dict[str, int], initializers: int, weight_inputs: int) -> dict[str, Any]:
        total = sum(nodes.values())
        return {"evidence": {
            "onnx_node_counts": nodes, "onnx_nodes_total": total,
            "onnx_node_domains": {"ai.onnx": total}, "onnx_graph_inputs": 1 + weight_inputs,
            "onnx_initializers": initializers, "onnx_weight_inputs": weight_inputs,
            "ort_intra_op_threads": 1}}

    sentence = evidence_sentence(ort({"FusedConv": 17, "Conv": 8}, 42, 0),
                                 ort({"Conv": 25, "BatchNormalization": 20, "Relu": 26}, 0, 102))

    assert sentence == ("onnx nodes 25 -> 71 (+26 Relu); onnx initializers 42 -> 0; "
                        "onnx weight inputs 0 -> 102")


def measured(*, mode: str, threads: int | None, sm_clock: int, throttled: bool,
             fallback: str | None = None, gpu: str = "NVIDIA H100") -> BenchResult:
    evidence: dict[str, Any] = {"kernels_per_inference": 105,
                                "timing": {"mode": mode, "rounds": 30, "timing_seconds": 2.0}}
    if fallback:
        evidence["cuda_graphs_fallback"] = fallback
    reading = {"sm_clock_mhz": sm_clock, "throttled": throttled,
               "throttle_reasons": ["hw_thermal_slowdown"] if throttled else []}
    return BenchResult(
        series_key="k", spec={"options": {} if threads is None else {"threads": threads}},
        status="ok", speedup=Speedup(2.0, 1.99, 2.01), evidence=evidence,
        fingerprint={"gpu": gpu, "nvml_start": reading, "nvml_end": reading,
                     "throttled": throttled, "packages": {"torch": "2.11.0"}})


def test_every_changed_measurement_condition_is_named() -> None:
    """Timing mode (with the fallback's reason), threads, GPU model, clocks and throttling
    are conditions of the measurement: a drop they explain must say so."""
    before = measured(mode="graphs", threads=None, sm_clock=1980, throttled=False)
    after = measured(mode="nographs", threads=1, sm_clock=1500, throttled=True,
                     fallback="capture failed: RuntimeError: sync in capture",
                     gpu="NVIDIA H200")
    sentence = evidence_sentence(before, after)
    assert "gpu NVIDIA H100 -> NVIDIA H200" in sentence
    assert ("timing mode graphs -> nographs (fallback: capture failed: RuntimeError: sync in "
            "capture)") in sentence
    assert "cpu threads library default -> 1" in sentence
    assert "gpu sm clock 1980 MHz -> 1500 MHz" in sentence
    assert "throttled no -> yes (hw_thermal_slowdown)" in sentence


def test_unchanged_conditions_say_so_and_small_clock_moves_are_not_news() -> None:
    before = measured(mode="graphs", threads=None, sm_clock=1980, throttled=False)
    after = measured(mode="graphs", threads=None, sm_clock=1965, throttled=False)
    assert evidence_sentence(before, after).startswith("no change in build choices, fusion "
                                                       "evidence")
    assert "measurement conditions" in evidence_sentence(before, after)


def test_kernels_per_inference_of_each_side_are_told_candidate_first() -> None:
    """The profiler counts kernels per inference as averages (floats) for both sides; a
    fusion break adds a kernel to the candidate, and the sentence says so."""
    before = measured(mode="graphs", threads=None, sm_clock=1980, throttled=False)
    after = measured(mode="graphs", threads=None, sm_clock=1980, throttled=False)
    before.evidence["kernels_per_inference"] = {"baseline": 342.0, "candidate": 105.0}
    after.evidence["kernels_per_inference"] = {"baseline": 343.0, "candidate": 106.0}
    assert evidence_sentence(before, after) == (
        "candidate kernels per inference 105 -> 106 (+1); "
        "eager kernels per inference 342 -> 343 (+1)")


def test_a_comparison_across_two_gpus_of_one_class_says_which_gpus() -> None:
    """Two H100s of one host measured the same cells up to 0.3% apart: a comparison that
    crosses GPUs says so, and one on the same GPU does not."""
    before = measured(mode="graphs", threads=None, sm_clock=1980, throttled=False)
    after = measured(mode="graphs", threads=None, sm_clock=1980, throttled=False)
    before.fingerprint.update({"gpu_index": 0, "hostname": "host-a"})
    after.fingerprint.update({"gpu_index": 3, "hostname": "host-a"})
    assert "measured on GPU 0 of host-a -> GPU 3 of host-a (another GPU of the class" in \
        evidence_sentence(before, after)
    after.fingerprint["gpu_index"] = 0
    assert "measured on" not in evidence_sentence(before, after)
