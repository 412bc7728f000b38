"""Optimization level as an axis of the matrix, and int8 as a precision.

Each backend has its own scale (ONNX Runtime's graph levels, torch.compile's modes,
TensorRT's builder levels 0-5); a level joins the series key only when it is not the
backend's default, so every series measured before the axis existed keeps its key and its
history, and naming the default explicitly is the same series.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.backends.inductor import compile_mode as _mode
from benchmarks.backends.onnxruntime import BACKEND as ORT
from benchmarks.backends.onnxruntime import opt_level_name
from benchmarks.matrix import BadInput, build_matrix
from benchmarks.spec import BenchSpec, SpecError, parse_series_key
from benchmarks.trt_options import ConversionError, ConverterOptions


def spec(**kw: Any) -> BenchSpec:
    return BenchSpec(**kw).validate()


def test_default_levels_leave_the_series_key_as_it_was() -> None:
    before = BenchSpec(backend="onnxruntime").series_key("cpu")
    assert spec(backend="onnxruntime", opt_level="all").series_key("cpu") == before
    assert "opt_level" not in before
    assert spec(backend="tensorrt", opt_level="3", device="cuda").series_key("nvidia-h100") == \
        BenchSpec(backend="tensorrt", device="cuda").series_key("nvidia-h100")


def test_a_non_default_level_is_its_own_series() -> None:
    key = spec(backend="onnxruntime", opt_level="basic").series_key("cpu")
    assert parse_series_key(key)["options"] == "opt_level=basic"
    assert key != spec(backend="onnxruntime", opt_level="extended").series_key("cpu")


def test_documents_from_before_the_axis_round_trip_unchanged() -> None:
    old = BenchSpec(backend="onnxruntime").to_dict()
    assert "opt_level" not in old  # so stored spec hashes stay equal
    assert BenchSpec.from_dict(old).opt_level == "default"
    assert BenchSpec.from_dict(spec(opt_level="basic").to_dict()).opt_level == "basic"


@pytest.mark.parametrize(("backend", "level"), [
    ("onnxruntime", "3"), ("tensorrt", "all"), ("eager", "basic"),
    ("inductor", "max-autotune-no-cudagraph")])
def test_a_level_the_backend_does_not_have_is_refused(backend: str, level: str) -> None:
    with pytest.raises(SpecError, match="opt_level"):
        spec(backend=backend, opt_level=level)


def test_the_matrix_skips_levels_of_other_backends_and_refuses_unknown_ones() -> None:
    specs = build_matrix(models="resnet50", backends="onnxruntime,inductor", weights="constant",
                         precisions="fp32", batches="1", shapes="static", base=BenchSpec(),
                         opt_levels="disabled,all,max-autotune-no-cudagraphs")
    assert [(s.backend, s.opt_level) for s in specs] == [
        ("onnxruntime", "disabled"), ("onnxruntime", "all"),
        ("inductor", "max-autotune-no-cudagraphs")]
    with pytest.raises(BadInput, match="opt-level"):
        build_matrix(models="resnet50", backends="onnxruntime", weights="constant",
                     precisions="fp32", batches="1", shapes="static", base=BenchSpec(),
                     opt_levels="7")


def test_each_backend_reads_the_axis_in_its_own_terms() -> None:
    assert opt_level_name(spec(backend="onnxruntime", opt_level="disabled")) == "disable"
    assert opt_level_name(spec(backend="onnxruntime")) == "all"
    assert _mode(spec(backend="inductor", opt_level="max-autotune-no-cudagraphs")) == \
        "max-autotune-no-cudagraphs"
    trt = spec(backend="tensorrt", opt_level="0", device="cuda")
    assert ConverterOptions.for_spec(trt).optimization_level == 0


def test_the_axis_and_the_older_option_together_are_refused() -> None:
    both = spec(backend="onnxruntime", opt_level="basic", options={"ort_opt_level": "all"})
    assert "both given" in (ORT.unavailable_reason(both) or "")
    with pytest.raises(ConversionError, match="both given"):
        ConverterOptions.for_spec(spec(backend="tensorrt", opt_level="1",
                                       options={"optimization_level": 2}))


def test_int8_exists_where_something_quantizes() -> None:
    spec(backend="onnxruntime", precision="int8")
    spec(backend="tensorrt", precision="int8")
    for backend in ("eager", "inductor", "torch_tensorrt"):
        with pytest.raises(SpecError, match="int8"):
            spec(backend=backend, precision="int8")


def test_onnxruntime_int8_has_only_constant_weights() -> None:
    reason = ORT.unavailable_reason(spec(backend="onnxruntime", precision="int8",
                                         weights="tensor"))
    assert reason is not None and "int8" in reason


def test_onnxruntime_int8_is_static_qdq_quantization_within_the_int8_tolerance() -> None:
    """A tiny ResNet quantized with the seeded calibration set: quantized kernels in the
    session's graph, the calibration recorded, and the output near the fp32 eager one."""
    import torch

    from benchmarks.accuracy import compare, tolerance
    from benchmarks.models import build_model, example_input

    tiny = spec(backend="onnxruntime", precision="int8", model="resnet18", width=8,
                image_size=32, num_classes=10, options={"intra_op_threads": 1})
    model = build_model(tiny).eval()
    x = example_input(tiny)
    compiled = ORT.compile(model, x, tiny)
    ev = compiled.evidence
    assert ev["int8_format"] == "QDQ" and ev["int8_calibration_seed"] == tiny.seed + 1000
    counts = ev["onnx_node_counts"]
    assert counts.get("QLinearConv", 0) + counts.get("QuantizeLinear", 0) > 0
    with torch.no_grad():
        accuracy = compare(compiled.run(x), model(x), tolerance("int8", "cpu"))
    assert accuracy.passed, accuracy
    assert accuracy.rel_l2 > 1e-4  # it really is quantized, not the fp32 graph
