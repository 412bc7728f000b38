"""The ONNX Runtime backend, with real exports and real ORT sessions on tiny ResNets.

What it must show: with weights as initializers ORT folds every BatchNormalization into its
Conv; with weights as graph inputs it cannot, and both programs still compute what eager
computes.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from benchmarks.backends import BackendUnavailable, Compiled, get_backend
from benchmarks.models import CUSTOM_OP_NAME, build_model, example_input
from benchmarks.onnx_weights import node_counts, weight_initializer_names, weights_to_inputs
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec
from tests.benchmarks.conftest import make_tiny_spec

FP32_ATOL = 1e-4
FP32_RTOL = 1e-4


@pytest.fixture(autouse=True)
def _quiet_exporter() -> Iterator[None]:
    # the TorchScript exporter's deprecation notice is not what these tests are about
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def ort_spec(**overrides: Any) -> BenchSpec:
    values: dict[str, Any] = {"backend": "onnxruntime", "num_classes": 10}
    values.update(overrides)
    return make_tiny_spec(**values).validate()


def compile_for(spec: BenchSpec) -> tuple[nn.Module, torch.Tensor, Compiled]:
    model = build_model(spec)
    x = example_input(spec)
    return model, x, get_backend("onnxruntime").compile(model, x, spec)


def float_weight_count(model: nn.Module) -> int:
    """Parameters plus BatchNorm running statistics: what the tensor variant must feed."""
    return sum(1 for t in model.state_dict().values() if t.is_floating_point())


@pytest.fixture(scope="module")
def constant_and_tensor() -> dict[str, tuple[nn.Module, torch.Tensor, Compiled]]:
    return {w: compile_for(ort_spec(weights=w)) for w in ("constant", "tensor")}


@pytest.mark.parametrize("weights", ["constant", "tensor"])
def test_both_weight_representations_compute_what_eager_computes(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]], weights: str
) -> None:
    model, x, compiled = constant_and_tensor[weights]
    with torch.inference_mode():
        expected = model(x)
    actual = compiled.run(x)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, atol=FP32_ATOL, rtol=FP32_RTOL)


def test_constant_weights_let_ort_fold_every_batchnorm_into_its_conv(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]],
) -> None:
    evidence = constant_and_tensor["constant"][2].evidence
    exported = evidence["onnx_exported_node_counts"]
    # the exporter itself folded nothing: the difference below is ORT's doing
    assert exported["BatchNormalization"] == exported["Conv"] > 0
    assert "BatchNormalization" not in evidence["onnx_node_counts"]
    assert evidence["onnx_nodes_total"] < evidence["onnx_exported_nodes_total"]
    assert evidence["onnx_nodes_total"] == sum(evidence["onnx_node_counts"].values())


def test_tensor_weights_keep_every_batchnorm_because_ort_cannot_fold_inputs(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]],
) -> None:
    constant = constant_and_tensor["constant"][2].evidence
    tensor = constant_and_tensor["tensor"][2].evidence
    exported_bn = tensor["onnx_exported_node_counts"]["BatchNormalization"]
    assert tensor["onnx_node_counts"]["BatchNormalization"] == exported_bn
    assert tensor["onnx_nodes_total"] > constant["onnx_nodes_total"]


def test_tensor_weights_enter_as_graph_inputs_and_constant_weights_as_initializers(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]],
) -> None:
    model, _, tensor = constant_and_tensor["tensor"]
    constant = constant_and_tensor["constant"][2]
    weights = float_weight_count(model)
    assert tensor.evidence["onnx_weight_inputs"] == weights
    assert tensor.evidence["onnx_graph_inputs"] == weights + 1  # plus the image
    assert tensor.evidence["onnx_initializers"] == 0
    assert constant.evidence["onnx_weight_inputs"] == 0
    assert constant.evidence["onnx_graph_inputs"] == 1
    assert constant.evidence["onnx_initializers"] > 0


def test_a_candidate_never_hands_back_the_same_output_buffer_twice(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]],
) -> None:
    _, x, compiled = constant_and_tensor["tensor"]
    first = compiled.run(x)
    kept = first.clone()
    second = compiled.run(x * 2)
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(first, kept, atol=0, rtol=0)


def test_the_candidate_runs_inside_and_outside_inference_mode(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]],
) -> None:
    _, x, compiled = constant_and_tensor["constant"]
    outside = compiled.run(x)
    with torch.inference_mode():
        inside = compiled.run(x)
    torch.testing.assert_close(inside, outside, atol=0, rtol=0)


def test_evidence_names_versions_and_the_candidate_is_not_cuda_graph_capturable(
    constant_and_tensor: dict[str, tuple[nn.Module, torch.Tensor, Compiled]],
) -> None:
    compiled = constant_and_tensor["constant"][2]
    assert compiled.versions["onnxruntime"] == ort.__version__
    assert compiled.cuda_graph_safe is False
    assert compiled.evidence["onnx_exporter"] == "torchscript"
    assert compiled.evidence["ort_provider"] == "CPUExecutionProvider"
    assert compiled.evidence["onnx_opset"] >= 17


@pytest.mark.parametrize("weights", ["constant", "tensor"])
def test_dynamic_shape_mode_serves_other_batch_sizes(weights: str) -> None:
    model, _, compiled = compile_for(ort_spec(weights=weights, shape_mode="dynamic"))
    for batch in (1, 3):
        x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))
        with torch.inference_mode():
            expected = model(x)
        torch.testing.assert_close(compiled.run(x), expected, atol=FP32_ATOL, rtol=FP32_RTOL)


def test_static_shape_mode_refuses_another_batch_size() -> None:
    _, _, compiled = compile_for(ort_spec(shape_mode="static"))
    with pytest.raises(Exception, match=r"(?i)dimension|shape"):
        compiled.run(torch.randn(2, 3, 32, 32))


def test_the_custom_op_model_is_unavailable_and_names_the_op() -> None:
    spec = ort_spec(model="resnet50-customop")
    with pytest.raises(BackendUnavailable) as info:
        compile_for(spec)
    message = str(info.value)
    assert CUSTOM_OP_NAME in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"precision": "fp16"}, "fp16"),
        ({"precision": "bf16"}, "bf16"),
        ({"options": {"exporter": "tracing"}}, "exporter"),
        ({"options": {"ort_opt_level": "max"}}, "ort_opt_level"),
    ],
)
def test_unavailable_reasons_are_one_line(overrides: dict[str, Any], expected: str) -> None:
    reason = get_backend("onnxruntime").unavailable_reason(ort_spec(**overrides))
    assert reason is not None
    assert expected in reason
    assert "\n" not in reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_without_a_gpu_is_unavailable() -> None:
    reason = get_backend("onnxruntime").unavailable_reason(ort_spec(device="cuda"))
    assert reason is not None
    assert "\n" not in reason


def test_fp32_on_cpu_is_available() -> None:
    assert get_backend("onnxruntime").unavailable_reason(ort_spec()) is None


def test_optimization_level_disable_leaves_the_exported_graph_alone() -> None:
    _, _, compiled = compile_for(ort_spec(options={"ort_opt_level": "disable"}))
    evidence = compiled.evidence
    assert evidence["onnx_node_counts"] == evidence["onnx_exported_node_counts"]


# ---- the graph rewrite on its own -------------------------------------------------------


def export_small(path: str) -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 8 * 8, 5),
    ).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.rand(t.shape, generator=generator) + 0.5)
    x = torch.randn(2, 3, 8, 8, generator=generator)
    torch.onnx.export(model, (x,), path, dynamo=False, do_constant_folding=False,
                      opset_version=17, input_names=["input"], output_names=["output"])
    return model, x


def test_weights_to_inputs_moves_every_weight_and_keeps_integer_shapes_constant(
    tmp_path: Any,
) -> None:
    path = str(tmp_path / "small.onnx")
    model, x = export_small(path)
    exported = onnx.load(path)
    rewritten, values = weights_to_inputs(exported)

    assert len(values) == float_weight_count(model)
    input_names = {i.name for i in rewritten.graph.input}
    assert set(values) <= input_names
    remaining = rewritten.graph.initializer
    assert all(init.data_type != onnx.TensorProto.FLOAT for init in remaining)
    # the original is untouched
    assert len(weight_initializer_names(exported)) == len(values)
    assert node_counts(rewritten) == node_counts(exported)

    session = ort.InferenceSession(rewritten.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feed = {"input": x.numpy(), **values}
    (actual,) = session.run(["output"], feed)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_a_rewritten_graph_cannot_run_without_its_weights(tmp_path: Any) -> None:
    path = str(tmp_path / "small.onnx")
    _, x = export_small(path)
    rewritten, _ = weights_to_inputs(onnx.load(path))
    session = ort.InferenceSession(rewritten.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match=r"(?i)missing|input"):
        session.run(["output"], {"input": x.numpy()})


# ---- end to end through the runner --------------------------------------------------------


@pytest.mark.parametrize("weights", ["constant", "tensor"])
def test_run_spec_measures_both_weight_representations_end_to_end(
    weights: str, single_thread: None
) -> None:
    spec = ort_spec(weights=weights, batch_size=2)
    result = run_spec(spec)
    assert result.status == "ok", result.reason
    assert result.accuracy is not None and result.accuracy.passed
    assert result.speedup is not None and result.speedup.value > 0
    assert result.evidence["onnx_weight_inputs"] == (0 if weights == "constant" else
                                                     float_weight_count(build_model(spec)))
    assert result.fingerprint["backend_versions"]["onnxruntime"] == ort.__version__
    assert result.compile_seconds is not None and result.compile_seconds > 0


def test_run_spec_skips_the_custom_op_model_with_the_reason() -> None:
    result = run_spec(ort_spec(model="resnet50-customop"))
    assert result.status == "skipped"
    assert result.reason is not None and CUSTOM_OP_NAME in result.reason


@pytest.mark.slow
def test_the_dynamo_exporter_gives_the_same_folding_story() -> None:
    model, x, compiled = compile_for(ort_spec(options={"exporter": "dynamo"}))
    evidence = compiled.evidence
    assert evidence["onnx_exporter"] == "dynamo"
    assert evidence["onnx_exported_node_counts"]["BatchNormalization"] > 0
    assert "BatchNormalization" not in evidence["onnx_node_counts"]
    with torch.inference_mode():
        expected = model(x)
    torch.testing.assert_close(compiled.run(x), expected, atol=FP32_ATOL, rtol=FP32_RTOL)
