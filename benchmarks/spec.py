"""The benchmark spec: one matrix point, and the series key derived from it.

A spec is plain data (JSON round-trippable) so it can cross process and queue boundaries.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmarks import model_ref
from benchmarks.model_ref import BUILTIN_MODELS
from benchmarks.timing_policy import TimingPolicy, timing_fields

# The built-in models; `model` may also name one of the user's (benchmarks.model_ref).
MODELS = BUILTIN_MODELS
BACKENDS = ("eager", "inductor", "onnxruntime", "tensorrt", "torch_tensorrt")
WEIGHTS = ("constant", "tensor", "refit")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
# int8: eager runs fp32; the candidate quantizes (ONNX Runtime static QDQ quantization with a
# seeded calibration set, TensorRT's INT8 flag with an entropy calibrator)
INT8_BACKENDS = ("onnxruntime", "tensorrt")
SHAPE_MODES = ("static", "dynamic")
DEVICES = ("cpu", "cuda")

# Optimization level: one axis, each backend's own scale. "default" is what the backend does
# when nobody says (ONNX Runtime: all; inductor: mode "default"; TensorRT and
# Torch-TensorRT: builder_optimization_level 3); naming the default explicitly is the same
# measurement and the same series.
OPT_LEVELS: dict[str, tuple[str, ...]] = {
    "eager": ("default",),
    "onnxruntime": ("default", "disabled", "basic", "extended", "layout", "all"),
    "inductor": ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead"),
    "tensorrt": ("default", "0", "1", "2", "3", "4", "5"),
    "torch_tensorrt": ("default", "0", "1", "2", "3", "4", "5"),
}
OPT_LEVEL_DEFAULTS = {"onnxruntime": "all", "tensorrt": "3", "torch_tensorrt": "3"}
ALL_OPT_LEVELS = tuple(dict.fromkeys(level for levels in OPT_LEVELS.values()
                                     for level in levels))

Weights = Literal["constant", "tensor", "refit"]
Precision = Literal["fp32", "fp16", "bf16"]
ShapeMode = Literal["static", "dynamic"]


class SpecError(ValueError):
    """A spec that cannot be measured; the message names the field."""


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
    # the backend's optimization level (OPT_LEVELS), "default" for its own default
    opt_level: str = "default"
    # backend-specific settings passed through (e.g. timing_cache)
    options: dict[str, Any] = field(default_factory=dict)
    timing: TimingPolicy = field(default_factory=TimingPolicy)

    def validate(self) -> BenchSpec:
        try:
            # Absolute `file:` paths are the local bench's; the API refuses them itself.
            model_ref.parse(self.model, allow_absolute=True)
        except model_ref.ModelRefError as exc:
            raise SpecError(f"model: {exc}") from None
        checks: list[tuple[str, object, tuple[object, ...]]] = [
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
            ("num_classes", self.num_classes, 1, 100_000),
        ]:
            if not isinstance(value, int) or not lo <= value <= hi:
                raise SpecError(f"{name}: {value!r} must be an integer in [{lo}, {hi}]")
        if self.sides not in SIDES:
            raise SpecError(f"options.sides: {self.sides!r} is not one of {', '.join(SIDES)}")
        if self.child_side is not None and self.child_side not in CHILD_SIDES:
            raise SpecError(f"options.{SIDE_OPTION}: {self.child_side!r} is not one of "
                            f"{', '.join(CHILD_SIDES)}")
        refused = self.timing.refused()
        if refused is not None:
            raise SpecError(refused)
        if self.weights == "refit" and self.backend not in ("tensorrt", "torch_tensorrt"):
            raise SpecError("weights: 'refit' exists only for the tensorrt backends")
        levels = OPT_LEVELS.get(self.backend, ("default",))
        if self.opt_level not in levels:
            raise SpecError(f"opt_level: {self.opt_level!r} is not a level of {self.backend} "
                            f"({', '.join(levels)})")
        if self.precision == "int8" and self.backend not in INT8_BACKENDS:
            raise SpecError(f"precision: 'int8' exists only for {', '.join(INT8_BACKENDS)}")
        return self

    @property
    def opt_level_key(self) -> str:
        """The level as the series key names it: "default" also for the default named."""
        if self.opt_level == OPT_LEVEL_DEFAULTS.get(self.backend):
            return "default"
        return self.opt_level

    @property
    def model_label(self) -> str:
        """Model name plus any non-default geometry: results of other geometry never compare.

        For a model of the user's this is the name alone, as the API predicts it; the
        result's key adds the fingerprint (`label_with`)."""
        return self.label_with(None)

    def label_with(self, model_digest: str | None) -> str:
        """The model's segment of the series key. A built-in model is named with its
        non-default geometry (`-w`, `-i`, `-c`) and never a digest: its code is this
        package's, versioned with it. Any other model is its reference plus "@" and the
        digest of its architecture and input shapes (benchmarks.own_models), which only
        the host that built it can compute; image_size, width and num_classes do not
        apply to it (its factory or archive decides)."""
        try:
            ref: model_ref.ModelRef | None = model_ref.parse(self.model, allow_absolute=True)
        except model_ref.ModelRefError:
            ref = None  # an invalid spec's failed result is still filed under its name
        if ref is not None and not ref.builtin:
            return ref.label(model_digest)
        label = self.model
        if self.width != 64:
            label += f"-w{self.width}"
        if self.image_size != 224:
            label += f"-i{self.image_size}"
        if self.num_classes != 1000:
            label += f"-c{self.num_classes}"
        return label

    @property
    def threads(self) -> int | None:
        """CPU threads both sides use (runner option), None for the library's default."""
        value = self.options.get("threads")
        return None if value is None else int(value)

    @property
    def sides(self) -> str:
        """"split" when each side is timed in processes of its own, else "paired"."""
        return str(self.options.get("sides", "paired"))

    @property
    def child_side(self) -> str | None:
        """The one side a child of a split measurement times, None for both."""
        side = self.options.get(SIDE_OPTION)
        return None if side is None else str(side)

    @property
    def requested_timing_mode(self) -> str:
        """"graphs" when a GPU cell asks for CUDA-graph replays, else "nographs"."""
        return "graphs" if self.device == "cuda" and self.timing.cuda_graphs else "nographs"

    def series_key(self, device_class: str, timing_mode: str | None = None,
                   model_digest: str | None = None) -> str:
        """Stable key of everything that must stay equal for two results to compare.

        `device_class` comes from the fingerprint ("cpu", "nvidia-h100", ...), not the spec,
        because the same spec runs on different hardware. `timing_mode` is what the result
        was timed with (a GPU cell whose capture failed falls back to "nographs"); None
        means what the spec asks for. `model_digest` is the fingerprint of a model of the
        user's (`model_digest_of` the result's fingerprint); None before it is known.
        Package versions are never part of it: comparing them along a series is the
        product.
        """
        return series_key(
            model=self.label_with(model_digest),
            backend=self.backend,
            weights=self.weights,
            precision=self.precision,
            batch_size=self.batch_size,
            shape_mode=self.shape_mode,
            device_class=device_class,
            threads=self.threads,
            timing_mode=timing_mode or self.requested_timing_mode,
            options=measurement_options(self.options, self.opt_level_key, self.timing.builds),
        )

    def model_fields(self) -> dict[str, Any]:
        """The fields that build a built-in model (its part of benchmarks.identity)."""
        return {"model": self.model, "width": self.width, "image_size": self.image_size,
                "num_classes": self.num_classes, "seed": self.seed}

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if data["opt_level"] == "default":
            del data["opt_level"]  # documents and spec hashes from before the axis stay equal
        for name, _kind, default, knob in timing_fields():
            if knob.quiet_default and data["timing"][name] == default:
                del data["timing"][name]  # likewise for the timing fields added later
        return data

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


TIMING_MODES = ("graphs", "nographs")


def model_digest_of(fingerprint: Any) -> str | None:
    """The model digest a result's fingerprint records (`fingerprint.model.digest`), None
    when it records none; raises SpecError for one that cannot be a digest (it becomes
    part of a series key)."""
    model = fingerprint.get("model") if isinstance(fingerprint, dict) else None
    if not isinstance(model, dict) or model.get("digest") is None:
        return None
    try:
        return model_ref.check_digest(model["digest"])
    except model_ref.ModelRefError as exc:
        raise SpecError(f"fingerprint.model.digest: {exc}") from None

# How the two sides share processes (spec option "sides"; absent = "paired"):
# - "paired": both sides in every process, rounds alternating (benchmarks.timing.time_paired).
# - "split": each process times ONE side, the other is never run there; processes of the
#   two sides alternate (baseline, candidate, candidate, baseline, ...) and adjacent ones
#   are paired. Eager then runs as it is deployed, alone: next to a candidate that runs
#   between its calls, eager on this project's CPUs ran up to 29% slower beside ONNX
#   Runtime constant than beside ONNX Runtime tensor, an artefact inside the speedup.
#   The option is in the series key (a change of design starts a new series).
SIDES = ("paired", "split")
# Harness-internal option: the side a child process of a split measurement times. Never
# in a stored result's spec (the merged result carries the cell's own spec).
SIDE_OPTION = "_side"
# Harness-internal: set on the spec of a cell's second and later processes, whose evidence a
# merged result does not keep (benchmarks.children.process_spec).
LATER_PROCESS_OPTION = "_later_process"
CHILD_SIDES = ("baseline", "candidate")
# Spec options that only steer the harness or tests, never what is measured.
_NOT_MEASUREMENT_OPTIONS = {"threads"}


def profiled_here(spec: BenchSpec) -> bool:
    """Whether this process takes the profile pass (benchmarks.profile): profiling is on
    and this is a cell's first process (later processes' profiles would be thrown away:
    a merged result keeps the first process's evidence)."""
    return spec.timing.profile and not spec.options.get(LATER_PROCESS_OPTION)


def harness_option(name: str) -> bool:
    """Whether a spec option is the harness's (how the sides share processes, and anything
    starting with "_": test faults, the side a split child times, a later process), never a
    setting a backend should read or refuse."""
    return name == "sides" or name.startswith("_")


def measurement_options(options: dict[str, Any], opt_level: str = "default",
                        builds: str = "pinned") -> str:
    """Options that change what is measured, as one stable key segment ("" for none).

    `threads` has its own segment; options starting with "_" are harness-internal (test
    faults, the side a split child times); `sides=paired`, the default, adds nothing. A
    non-default optimization level joins the segment as `opt_level=<level>`, so every series
    measured before the axis existed keeps its key. Builds as shipped join it as
    `builds=as-shipped`: their speedup is another quantity (a fresh build's, spread over
    what its autotuner may pick; on an H100 3-5% slower at batch 32 than pinned builds),
    so a switch starts a new series rather than a false change.
    """
    items = sorted(
        [(str(k), v) for k, v in options.items()
         if k not in _NOT_MEASUREMENT_OPTIONS and not str(k).startswith("_")
         and not (k == "sides" and v == "paired")]  # the default design: no segment
        + ([("opt_level", opt_level)] if opt_level != "default" else [])
        + ([("builds", builds)] if builds != "pinned" else [])
    )
    return ",".join(f"{k}={json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v}"
                    for k, v in items)


def series_key(
    *,
    model: str,
    backend: str,
    weights: str,
    precision: str,
    batch_size: int,
    shape_mode: str,
    device_class: str,
    threads: int | None = None,
    timing_mode: str = "nographs",
    options: str = "",
) -> str:
    """model/backend/weights/precision/bsN/shape/device/tN|tauto/graphs|nographs[/options]."""
    key = (
        f"{model}/{backend}/{weights}/{precision}/bs{batch_size}/{shape_mode}/{device_class}"
        f"/{'tauto' if threads is None else f't{threads}'}/{timing_mode}"
    )
    return f"{key}/{options}" if options else key


SERIES_KEY_FIELDS = ("model", "backend", "weights", "precision", "batch_size", "shape_mode",
                     "device_class", "threads", "timing_mode", "options")
_KEY_SHAPE = "model/backend/weights/precision/bsN/shape/device/tN|tauto/graphs|nographs[/options]"


def parse_series_key(key: str) -> dict[str, str | int | None]:
    """The axes of a key; raises SpecError naming the expected shape."""
    parts = key.split("/", 9)
    ok = (
        len(parts) in (9, 10)
        and parts[4].startswith("bs") and parts[4][2:].isdigit()
        and (parts[7] == "tauto" or (parts[7].startswith("t") and parts[7][1:].isdigit()))
        and parts[8] in TIMING_MODES
        and all(parts)
    )
    if not ok:
        raise SpecError(f"series_key: {key!r} is not {_KEY_SHAPE}")
    out: dict[str, str | int | None] = dict(zip(SERIES_KEY_FIELDS, parts, strict=False))
    out["batch_size"] = int(parts[4][2:])
    out["threads"] = None if parts[7] == "tauto" else int(parts[7][1:])
    out["options"] = parts[9] if len(parts) == 10 else ""
    return out
