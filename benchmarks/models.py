"""Benchmark models built in code with seeded random weights (nothing comes from a hub).

Owns the ResNet family (basic blocks for 18/34, bottlenecks for 50/101), the
`resnet50-customop` variant with an opaque `speedwatch::opaque_identity` op between stages
2 and 3 (a fusion break, like a custom TensorRT plugin), the seeded example input, and the
precision -> dtype mapping.

Weights are random but not trivial: BatchNorm has random affine parameters and running
statistics calibrated on seeded data, so Conv+BN folding changes real numbers and the
activations stay in a range fp16 can hold through 100 layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from benchmarks.spec import BenchSpec

CUSTOM_OP_NAME = "speedwatch::opaque_identity"

# Calibration batch for BatchNorm running statistics: small and fixed so building a model
# stays cheap and does not depend on the benchmark's image size.
_CALIBRATION_BATCH = 4
_CALIBRATION_SIZE = 64


def _define_opaque_identity() -> Callable[[torch.Tensor], torch.Tensor]:
    """Register the opaque op once per process.

    It returns a copy (a custom op may not alias its input), and its real implementation is
    hidden from compilers; the fake (meta) implementation only describes the output shape,
    which is what torch.compile and torch.export need to trace around it.
    """
    if hasattr(torch.library, "custom_op"):

        @torch.library.custom_op(CUSTOM_OP_NAME, mutates_args=())
        def opaque_identity(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @opaque_identity.register_fake
        def _(x: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)

        return opaque_identity

    # torch < 2.4: the lower-level Library API (kept so old environments still build)
    lib = torch.library.Library("speedwatch", "DEF")
    lib.define("opaque_identity(Tensor x) -> Tensor")
    lib.impl("opaque_identity", lambda x: x.clone(), "CompositeExplicitAutograd")
    lib.impl("opaque_identity", lambda x: torch.empty_like(x), "Meta")
    _KEEP_ALIVE.append(lib)
    return torch.ops.speedwatch.opaque_identity


_KEEP_ALIVE: list[object] = []
opaque_identity = _define_opaque_identity()


class OpaqueIdentity(nn.Module):
    """Calls the custom op: numerically a no-op, structurally a wall between two fusable stages."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.speedwatch.opaque_identity(x)


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = _conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(_conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = _conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        # stride on the 3x3 conv (the "ResNet v1.5" layout torchvision uses)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, cout)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(_conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet v1.5 with a configurable stem width (64 is the standard network).

    `break_after_stage` inserts the opaque custom op after that stage (1-based), so the
    graph on either side can be fused but nothing crosses the op.
    """

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, int, int, int],
        *,
        width: int = 64,
        num_classes: int = 1000,
        break_after_stage: int | None = None,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = width
        stages: list[nn.Module] = []
        for i, blocks in enumerate(layers):
            planes = width * 2**i
            stride = 1 if i == 0 else 2
            mods: list[nn.Module] = []
            for j in range(blocks):
                mods.append(block(cin, planes, stride if j == 0 else 1))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*mods))
            if break_after_stage == i + 1:
                stages.append(OpaqueIdentity())
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.stages(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


_ARCHITECTURES: dict[str, tuple[type[BasicBlock] | type[Bottleneck], tuple[int, int, int, int]]] = {
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet34": (BasicBlock, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
    "resnet101": (Bottleneck, (3, 4, 23, 3)),
    "resnet50-customop": (Bottleneck, (3, 4, 6, 3)),
}


def _init_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Kaiming-normal convs, random BN affine; every draw comes from one seeded generator."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
            with torch.no_grad():
                m.weight.normal_(0.0, (2.0 / fan_out) ** 0.5, generator=generator)
        elif isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.normal_(0.0, 0.1, generator=generator)
        elif isinstance(m, nn.Linear):
            bound = 1.0 / m.in_features**0.5
            with torch.no_grad():
                m.weight.uniform_(-bound, bound, generator=generator)
                m.bias.uniform_(-bound, bound, generator=generator)
    # Damp the last BN of each residual branch so activations do not grow with depth
    # (the reason torchvision offers zero_init_residual); not zero, so folding still matters.
    for m in model.modules():
        last = m.bn3 if isinstance(m, Bottleneck) else m.bn2 if isinstance(m, BasicBlock) else None
        if last is not None:
            with torch.no_grad():
                last.weight.mul_(0.2)


def _calibrate_batchnorm(model: nn.Module, generator: torch.Generator) -> None:
    """Set running stats from one seeded batch, then jitter them.

    Data-derived stats keep each BN output roughly normalised (fp16-safe); the jitter makes
    mean/var differ from what the eval-mode input would give, so a backend that dropped or
    mis-folded BN would show up in the accuracy check.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average: one batch sets the stats exactly
    x = torch.randn(_CALIBRATION_BATCH, 3, _CALIBRATION_SIZE, _CALIBRATION_SIZE,
                    generator=generator)
    model.train()
    with torch.no_grad():
        model(x)
        for bn in bns:
            assert bn.running_mean is not None and bn.running_var is not None
            n = bn.num_features
            bn.running_mean.add_(0.05 * torch.randn(n, generator=generator))
            bn.running_var.mul_(torch.empty(n).uniform_(0.8, 1.25, generator=generator))
            bn.momentum = 0.1
    model.eval()


def build_model(spec: BenchSpec, *, initialise: bool = True) -> nn.Module:
    """The spec's model in eval mode, fp32, on CPU; same spec -> same weights, bit for bit.

    `initialise=False`: the architecture alone, its tensors on the meta device, for
    `load_state_dict(..., assign=True)` of weights built before (benchmarks.build_cache)."""
    if spec.model not in _ARCHITECTURES:
        raise ValueError(f"model: {spec.model!r} is not one of {', '.join(_ARCHITECTURES)}")
    block, layers = _ARCHITECTURES[spec.model]
    torch.manual_seed(spec.seed)
    with torch.device("cpu" if initialise else "meta"):
        model = ResNet(
            block,
            layers,
            width=spec.width,
            num_classes=spec.num_classes,
            break_after_stage=2 if spec.model == "resnet50-customop" else None,
        )
    if not initialise:
        return model
    generator = torch.Generator().manual_seed(spec.seed)
    _init_weights(model, generator)
    _calibrate_batchnorm(model, generator)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def example_input(spec: BenchSpec) -> torch.Tensor:
    """Seeded NCHW fp32 CPU input; the runner moves it to the spec's device and dtype."""
    generator = torch.Generator().manual_seed(spec.seed + 1)
    return torch.randn(spec.batch_size, 3, spec.image_size, spec.image_size, generator=generator)


_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def model_dtype(precision: str) -> torch.dtype:
    """The dtype eager runs in for a precision (the candidate may choose its own kernels).

    int8 has no eager counterpart: eager runs fp32 and the candidate quantizes."""
    if precision == "int8":
        return torch.float32
    try:
        return _DTYPES[precision]
    except KeyError:
        raise ValueError(f"precision: {precision!r} is not one of {', '.join(_DTYPES)}") from None
