"""The benchmark spec: one matrix point, and the series key derived from it.

A spec is plain data (JSON round-trippable) so it can cross process and queue boundaries.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet50-customop")
BACKENDS = ("eager", "inductor", "onnxruntime", "tensorrt", "torch_tensorrt")
WEIGHTS = ("constant", "tensor", "refit")
PRECISIONS = ("fp32", "fp16", "bf16")
SHAPE_MODES = ("static", "dynamic")
DEVICES = ("cpu", "cuda")

Weights = Literal["constant", "tensor", "refit"]
Precision = Literal["fp32", "fp16", "bf16"]
ShapeMode = Literal["static", "dynamic"]


class SpecError(ValueError):
    """A spec that cannot be measured; the message names the field."""


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to measure.

    Rounds alternate baseline and candidate so that drift (thermal, noisy neighbours)
    hits both sides alike; each round times `iters_per_round` back-to-back calls.
    """

    warmup_iters: int = 10
    rounds: int = 30
    iters_per_round: int = 10
    max_seconds: float = 30.0  # stop adding rounds past this much timing wall time
    min_rounds: int = 5
    cuda_graphs: bool = False
    bootstrap_resamples: int = 2000
    seed: int = 0
    # Independent processes that each measure the whole policy (rounds, max_seconds), run one
    # after another by `run_isolated`; the CI then includes the between-process variance
    # (stats.combine_processes), which one process cannot see. 1 = today's single process.
    processes: int = 1


@dataclass(frozen=True)
class BenchSpec:
    model: str = "resnet50"
    backend: str = "onnxruntime"
    weights: str = "constant"
    precision: str = "fp32"
    batch_size: int = 1
    shape_mode: str = "static"
    device: str = "cpu"
    image_size: int = 224
    width: int = 64  # channels of the stem; 64 is the standard ResNet
    num_classes: int = 1000
    seed: int = 0
    # backend-specific settings passed through (e.g. optimization_level, timing_cache)
    options: dict[str, Any] = field(default_factory=dict)
    timing: TimingPolicy = field(default_factory=TimingPolicy)

    def validate(self) -> BenchSpec:
        checks: list[tuple[str, object, tuple[object, ...]]] = [
            ("model", self.model, MODELS),
            ("backend", self.backend, BACKENDS),
            ("weights", self.weights, WEIGHTS),
            ("precision", self.precision, PRECISIONS),
            ("shape_mode", self.shape_mode, SHAPE_MODES),
            ("device", self.device, DEVICES),
        ]
        for name, value, allowed in checks:
            if value not in allowed:
                raise SpecError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
        for name, value, lo, hi in [
            ("batch_size", self.batch_size, 1, 1024),
            ("image_size", self.image_size, 32, 1024),
            ("width", self.width, 4, 256),
            ("timing.processes", self.timing.processes, 1, 16),
        ]:
            if not isinstance(value, int) or not lo <= value <= hi:
                raise SpecError(f"{name}: {value!r} must be an integer in [{lo}, {hi}]")
        if self.weights == "refit" and self.backend not in ("tensorrt", "torch_tensorrt"):
            raise SpecError("weights: 'refit' exists only for the tensorrt backends")
        return self

    @property
    def model_label(self) -> str:
        """Model name plus any non-default geometry: results of other geometry never compare."""
        label = self.model
        if self.width != 64:
            label += f"-w{self.width}"
        if self.image_size != 224:
            label += f"-i{self.image_size}"
        if self.num_classes != 1000:
            label += f"-c{self.num_classes}"
        return label

    def series_key(self, device_class: str) -> str:
        """Stable key of everything that must stay equal for two results to compare.

        `device_class` comes from the fingerprint ("cpu", "nvidia-h100", ...), not the spec,
        because the same spec runs on different hardware.
        """
        return series_key(
            model=self.model_label,
            backend=self.backend,
            weights=self.weights,
            precision=self.precision,
            batch_size=self.batch_size,
            shape_mode=self.shape_mode,
            device_class=device_class,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSpec:
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"unknown spec fields: {', '.join(sorted(unknown))}")
        timing = data.pop("timing", None) or {}
        tfields = {f.name for f in dataclasses.fields(TimingPolicy)}
        bad = set(timing) - tfields
        if bad:
            raise SpecError(f"unknown timing fields: {', '.join(sorted(bad))}")
        return cls(**data, timing=TimingPolicy(**timing))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def series_key(
    *,
    model: str,
    backend: str,
    weights: str,
    precision: str,
    batch_size: int,
    shape_mode: str,
    device_class: str,
) -> str:
    return (
        f"{model}/{backend}/{weights}/{precision}/bs{batch_size}/{shape_mode}/{device_class}"
    )


SERIES_KEY_FIELDS = ("model", "backend", "weights", "precision", "batch_size", "shape_mode",
                     "device_class")


def parse_series_key(key: str) -> dict[str, str | int]:
    parts = key.split("/")
    if len(parts) != 7 or not parts[4].startswith("bs") or not parts[4][2:].isdigit():
        raise SpecError(
            f"series_key: {key!r} is not model/backend/weights/precision/bsN/shape/device"
        )
    out: dict[str, str | int] = dict(zip(SERIES_KEY_FIELDS, parts, strict=True))
    out["batch_size"] = int(parts[4][2:])
    return out
