"""The matrix flags of the commands that ask the server for runs (`submit`, `sweep`,
`bisect`), declared once, and the request's matrix they make: `with_matrix_flags` adds
`--model`, `--backend`, `--weights`, `--precision`, `--batch`, `--shape-mode`,
`--opt-level`, `--device`, `--image-size`, `--width`, `--threads` and `--sides` to a command,
which gets their values as one `MatrixFlags`. (`bench` and `demo` measure here, with
defaults of their own: they keep their own flags.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import typer

from cli.client import ClientError
from cli.flag_groups import flag_group
from cli.request_fields import split_values
from cli.timing_flags import TimingFlags, timing_flag_problem

if TYPE_CHECKING:
    from cli.project_file import ProjectFile

F = TypeVar("F", bound=Callable[..., Any])
SIDES = ("paired", "split")


@dataclass
class MatrixOptions:
    """The request's `matrix`, as the API takes it (app.schemas.MatrixIn)."""

    models: list[str] = field(default_factory=lambda: ["resnet50"])
    backends: list[str] = field(default_factory=lambda: ["onnxruntime"])
    weights: list[str] = field(default_factory=lambda: ["constant"])
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    batch_sizes: list[int] = field(default_factory=lambda: [1])
    shape_modes: list[str] = field(default_factory=lambda: ["static"])
    opt_levels: list[str] = field(default_factory=lambda: ["default"])
    device: str = "cpu"
    image_size: int | None = None
    width: int | None = None
    threads: int | None = None
    sides: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "models": self.models, "backends": self.backends, "weights": self.weights,
            "precisions": self.precisions, "batch_sizes": self.batch_sizes,
            "shape_modes": self.shape_modes, "device": self.device,
        }
        if self.opt_levels != ["default"]:
            body["opt_levels"] = self.opt_levels
        for name in ("image_size", "width", "threads", "sides"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        timing = {k: v for k, v in self.timing.items() if v is not None}
        if timing:
            body["timing"] = timing
        return body


def ints(values: list[str] | None, option: str) -> list[int]:
    try:
        return [int(v) for v in split_values(values)]
    except ValueError:
        raise ClientError(f"{option}: expected integers such as 1,8") from None


# flag -> the project file's [matrix] key (cli.project_file.MatrixTable)
_FILE_KEYS = {"model": "models", "backend": "backends", "weights": "weights",
              "precision": "precisions", "batch": "batch_sizes", "shape_mode": "shape_modes",
              "device": "device", "image_size": "image_size", "width": "width",
              "threads": "threads", "sides": "sides"}


@dataclass
class MatrixFlags:
    """The matrix flags of one command line; None: not given."""

    model: list[str] | None = None
    backend: list[str] | None = None
    weights: list[str] | None = None
    precision: list[str] | None = None
    batch: list[str] | None = None
    shape_mode: list[str] | None = None
    opt_level: list[str] | None = None
    device: str | None = None
    image_size: int | None = None
    width: int | None = None
    threads: int | None = None
    sides: str | None = None

    def with_file(self, pf: ProjectFile) -> MatrixFlags:
        """The flags, with the project file's [matrix] filling what no flag gave."""
        return MatrixFlags(**{f.name: (pf.pick(f"matrix.{_FILE_KEYS[f.name]}",
                                               getattr(self, f.name))
                                       if f.name in _FILE_KEYS else getattr(self, f.name))
                              for f in fields(self)})

    def options(self, timing: TimingFlags, *, cpu_threads: int | None) -> MatrixOptions:
        """The request's matrix; ClientError naming the first flag it cannot use.
        `cpu_threads`: the threads a CPU matrix gets when --threads is not given (0 given:
        the library's default, sent as no value)."""
        if self.sides is not None and self.sides not in SIDES:
            raise ClientError(f"--sides: {self.sides!r} is not paired or split")
        problem = timing_flag_problem(**timing)
        if problem is not None:
            raise ClientError(problem)
        device = self.device or "cpu"
        threads = cpu_threads if self.threads is None and device == "cpu" else self.threads
        matrix = MatrixOptions(device=device, image_size=self.image_size, width=self.width,
                               threads=threads or None, sides=self.sides, timing=dict(timing))
        for attr, values in (("models", self.model), ("backends", self.backend),
                             ("weights", self.weights), ("precisions", self.precision),
                             ("shape_modes", self.shape_mode), ("opt_levels", self.opt_level)):
            if values:
                setattr(matrix, attr, split_values(values))
        if self.batch:
            matrix.batch_sizes = ints(self.batch, "--batch")
        return matrix


def _option(help_text: str, names: tuple[str, ...] = (), panel: str | None = None,
            **extra: Any) -> Any:
    return typer.Option(None, *names, help=help_text, rich_help_panel=panel, **extra)


def with_matrix_flags(*, model_help: str, threads_help: str,
                      panel: str | None = None) -> Callable[[F], F]:
    """A command with the matrix flags, added after its own parameters; the command takes
    them as one keyword argument, `matrix` (a MatrixFlags)."""
    strings = Optional[list[str]]  # noqa: UP045 (a runtime type, for typer)
    options: dict[str, tuple[Any, Any]] = {
        "model": (strings, _option(model_help, panel=panel)),
        "backend": (strings, _option("Backends, e.g. onnxruntime,inductor (default "
                                     "onnxruntime).", panel=panel)),
        "weights": (strings, _option("constant, tensor, refit (default constant).",
                                     panel=panel)),
        "precision": (strings, _option("fp32, fp16, bf16 (default fp32).", panel=panel)),
        "batch": (strings, _option("Batch sizes, e.g. 1,8 (default 1).", panel=panel)),
        "shape_mode": (strings, _option("static, dynamic (default static).", panel=panel)),
        "opt_level": (strings, _option(
            "Optimization levels, each backend's own (onnxruntime disabled/basic/extended/"
            "all, inductor max-autotune-no-cudagraphs, tensorrt 0-5).", ("--opt-level",),
            panel=panel)),
        "device": (Optional[str], _option(  # noqa: UP045
            '"cpu" (default), "cuda" or a GPU class the server routes.', panel=panel)),
        "image_size": (Optional[int], _option(  # noqa: UP045
            "Input image size (default 224).", panel=panel)),
        "width": (Optional[int], _option(  # noqa: UP045
            "ResNet stem width (default 64).", panel=panel)),
        "threads": (Optional[int], _option(threads_help, panel=panel, min=0)),  # noqa: UP045
        "sides": (Optional[str], _option(  # noqa: UP045
            "split: each side timed alone in processes of its own (server default on the "
            "CPU); paired: both sides in every process (default on a GPU). A change starts a "
            "new series.", panel=panel)),
    }
    return flag_group("matrix", options, lambda values: MatrixFlags(**values))
