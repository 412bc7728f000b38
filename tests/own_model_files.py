"""A user's model package written where a test says (outside the repository), as a user
would have it: a small CNN with a custom block, its factory, and a torch.export archive.

`write_package` takes the pieces that tests change, so a test can write the same model
again with one thing different (a constant in the custom block, a comment, the input
size) and see whether the fingerprint follows.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

NETS = '''"""A small CNN with a block of our own."""
import torch
from torch import nn


class ScaledResidual(nn.Module):
    """conv-bn-relu, scaled, plus the input: not a block any library has."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
{comment}        return x + {scale} * torch.relu(self.bn(self.conv(x)))


class SmallCNN(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(ScaledResidual(width), ScaledResidual(width))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


def build(batch_size: int):
    """The factory Speedwatch calls: (module, example inputs at this batch size)."""
    return SmallCNN(), (torch.randn(batch_size, 3, {size}, {size}),)
{extra}
'''


# A factory whose weights only meet elementwise ops (`extra=POINTWISE`): frozen by inductor
# on a CPU its constants are plain tensors, as on a GPU (a convolution's or a matmul's
# weights are packed for oneDNN on a CPU).
POINTWISE = '''

class Pointwise(nn.Module):
    def __init__(self, features: int = 64) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale.exp() + self.shift)


def pointwise(batch_size: int):
    return Pointwise(), (torch.randn(batch_size, 64),)
'''


def write_package(root: Path, name: str = "mypkg", *, scale: str = "0.5", comment: str = "",
                  size: int = 32, extra: str = "") -> Path:
    """root/name/{__init__,nets}.py; returns root (the directory to put on a path)."""
    package = root / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "nets.py").write_text(
        NETS.format(scale=scale, comment=f"        {comment}\n" if comment else "", size=size,
                    extra=extra),
        encoding="utf-8")
    return root


def load_nets(root: Path, name: str = "mypkg") -> Any:
    """The package's nets module, imported under a private name (sys.modules stays clean
    of `name`, so later imports of it, in children or tests, see the files as they are)."""
    private = f"_speedwatch_test_{name}_{abs(hash(str(root)))}"
    spec = importlib.util.spec_from_file_location(private, root / name / "nets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module  # torch.export wants the module of the classes it traces
    spec.loader.exec_module(module)
    return module


def export_archive(root: Path, path: Path, *, name: str = "mypkg", batch: int = 2,
                   dynamic: bool = True) -> Path:
    """Export the package's model with torch.export to `path` (a dynamic batch unless
    told otherwise), as its user would before handing the archive to Speedwatch."""
    import torch

    nets = load_nets(root, name)
    model, (x,) = nets.build(batch)
    model.eval()
    shapes = ({0: torch.export.Dim("batch", min=1, max=64)},) if dynamic else None
    program = torch.export.export(model, (x,), dynamic_shapes=shapes)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path))
    return path
