"""Benchmark models: seeded, in eval mode, real architectures, and an opaque custom op."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from benchmarks.models import (
    BasicBlock,
    Bottleneck,
    OpaqueIdentity,
    ResNet,
    build_model,
    example_input,
    model_dtype,
)
from benchmarks.spec import MODELS, BenchSpec

SpecFactory = Callable[..., BenchSpec]
pytestmark = pytest.mark.usefixtures("single_thread")


def build_resnet(spec: BenchSpec) -> ResNet:
    model = build_model(spec)
    assert isinstance(model, ResNet)
    return model


@pytest.mark.parametrize("name", MODELS)
def test_every_model_builds_in_eval_fp32_on_cpu_and_classifies(
    name: str, tiny_spec: SpecFactory
) -> None:
    spec = tiny_spec(model=name, batch_size=2, num_classes=10)
    model = build_model(spec)
    assert not model.training
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    with torch.inference_mode():
        out = model(example_input(spec))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    ("name", "block", "blocks"),
    [("resnet18", BasicBlock, 8), ("resnet34", BasicBlock, 16), ("resnet50", Bottleneck, 16),
     ("resnet101", Bottleneck, 33)],
)
def test_depth_and_block_type_follow_the_resnet_paper(
    name: str, block: type, blocks: int, tiny_spec: SpecFactory
) -> None:
    model = build_model(tiny_spec(model=name))
    assert sum(isinstance(m, block) for m in model.modules()) == blocks


def test_width_scales_every_stage(tiny_spec: SpecFactory) -> None:
    narrow = build_resnet(tiny_spec(model="resnet50", width=8))
    standard = build_resnet(tiny_spec(model="resnet50", width=64))
    assert narrow.conv1.out_channels == 8 and standard.conv1.out_channels == 64
    assert narrow.fc.in_features == 8 * 8 * 4 and standard.fc.in_features == 2048


def test_same_seed_same_weights_other_seed_other_weights(tiny_spec: SpecFactory) -> None:
    a = build_model(tiny_spec(seed=0)).state_dict()
    b = build_model(tiny_spec(seed=0)).state_dict()
    c = build_model(tiny_spec(seed=1)).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["conv1.weight"], c["conv1.weight"])


def test_batchnorm_is_not_identity_so_folding_changes_numbers(tiny_spec: SpecFactory) -> None:
    model = build_model(tiny_spec(model="resnet50"))
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns
    for bn in bns:
        assert bn.running_mean is not None and bn.running_var is not None
        assert bn.running_mean.abs().max() > 0
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.allclose(bn.weight, torch.ones_like(bn.weight))


@pytest.mark.parametrize("size", [32, 33, 48, 64])
def test_any_image_size_from_32_works(size: int, tiny_spec: SpecFactory) -> None:
    spec = tiny_spec(model="resnet18", image_size=size)
    x = example_input(spec)
    assert x.shape == (1, 3, size, size)
    with torch.inference_mode():
        assert build_model(spec)(x).shape == (1, 1000)


def test_example_input_is_seeded(tiny_spec: SpecFactory) -> None:
    assert torch.equal(example_input(tiny_spec(seed=3)), example_input(tiny_spec(seed=3)))
    assert not torch.equal(example_input(tiny_spec(seed=3)), example_input(tiny_spec(seed=4)))


def test_half_precision_outputs_stay_finite_through_resnet101(tiny_spec: SpecFactory) -> None:
    """Random weights must not blow up in half precision over 100 layers (bf16 runs on CPU)."""
    spec = tiny_spec(model="resnet101", batch_size=2)
    model = build_model(spec)
    x = example_input(spec)
    with torch.inference_mode():
        ref = model(x)
        half = model.to(torch.bfloat16)(x.to(torch.bfloat16)).float()
    assert torch.isfinite(half).all()
    assert (half - ref).norm() / ref.norm() < 0.1


def test_customop_variant_places_one_opaque_op_between_stage_2_and_3(
    tiny_spec: SpecFactory,
) -> None:
    stages = list(build_resnet(tiny_spec(model="resnet50-customop")).stages)
    assert [type(s).__name__ for s in stages] == [
        "Sequential", "Sequential", "OpaqueIdentity", "Sequential", "Sequential"]


def test_customop_is_numerically_identity(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec(model="resnet50-customop", batch_size=2)
    plain = build_model(tiny_spec(model="resnet50", batch_size=2))
    x = example_input(spec)
    with torch.inference_mode():
        assert torch.equal(build_model(spec)(x), plain(x))


def test_customop_has_a_fake_impl_so_tracers_see_only_its_shape() -> None:
    out = torch.ops.speedwatch.opaque_identity(torch.empty(2, 3, device="meta"))
    assert out.shape == (2, 3) and out.device.type == "meta"


def test_customop_survives_torch_export_as_one_opaque_node(tiny_spec: SpecFactory) -> None:
    spec = tiny_spec(model="resnet50-customop")
    model = build_resnet(spec)
    exported = torch.export.export(model, (example_input(spec),))
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert sum("speedwatch.opaque_identity" in t for t in targets) == 1
    assert isinstance(model.stages[2], OpaqueIdentity)


@pytest.mark.parametrize(("precision", "dtype"),
                         [("fp32", torch.float32), ("fp16", torch.float16),
                          ("bf16", torch.bfloat16)])
def test_model_dtype_maps_precisions(precision: str, dtype: torch.dtype) -> None:
    assert model_dtype(precision) is dtype


def test_model_dtype_names_the_bad_precision() -> None:
    with pytest.raises(ValueError, match="int4"):
        model_dtype("int4")


def test_int8_runs_eager_in_fp32_beside_a_quantized_candidate() -> None:
    assert model_dtype("int8") == torch.float32
