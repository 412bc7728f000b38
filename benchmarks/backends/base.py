"""The one small interface every backend implements.

The runner owns timing, accuracy and fingerprints; a backend only says whether it can run
here, turns the eager model into a callable for a spec, and reports fusion evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from benchmarks.spec import BenchSpec


def cuda_only_reason(spec: BenchSpec, product: str) -> str | None:
    """Why a CUDA-only backend (TensorRT, Torch-TensorRT) cannot run `spec` here, or None."""
    if spec.device != "cuda":
        return f"{product} needs a CUDA device"
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available here"
    return None


class BackendUnavailable(RuntimeError):
    """Raised by compile() when the backend cannot run this spec here; becomes 'skipped'."""


@dataclass
class Compiled:
    """A candidate ready to time.

    `run` takes the input tensor (already on the spec's device and dtype) and returns the
    output as a torch tensor on that device; it must not synchronise the device itself.
    """

    run: Callable[[torch.Tensor], torch.Tensor]
    evidence: dict[str, Any] = field(default_factory=dict)
    # False where capturing `run` in a CUDA graph is impossible (host round-trips, ORT)
    cuda_graph_safe: bool = True
    # extra versions worth fingerprinting (e.g. {"onnxruntime": "1.22.0"})
    versions: dict[str, str] = field(default_factory=dict)
    # A JSON-able description of every choice the build made that could have come out
    # otherwise (kernel configs, tactics, the optimized graph): benchmarks.build hashes it
    # into evidence.build_fingerprint. None: the backend cannot say.
    build_choices: Any = None
    # The backend's own profiler (input, inferences) -> a benchmarks.profile document, for a
    # backend whose work torch.profiler cannot see (ONNX Runtime's nodes, TensorRT's
    # layers). None: the runner profiles `run` with torch.profiler.
    profile: Callable[[torch.Tensor, int], dict[str, Any]] | None = None
    # What a fresh build leaves for the host's build cache (benchmarks.build_cache): plain
    # file names -> bytes, from a backend's `compile_cached(..., None)`; None with
    # `artifacts_missing` saying why there is nothing to keep.
    artifacts: dict[str, bytes] | None = None
    artifacts_missing: str | None = None
    # What a load from the build cache read, where a backend can load a build in more than
    # one way (inductor: its kept "program", or its "caches" and a compile), and a note
    # when the quicker way was refused: both go into the process's build record.
    loaded_via: str | None = None
    load_note: str | None = None


class Backend(Protocol):
    name: str

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        """None when this backend can run `spec` here, else a one-line reason."""
        ...

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        """Build the optimized candidate for `model` (eval mode, spec's device and dtype)."""
        ...


class CachingBackend(Backend, Protocol):
    """A backend whose builds a later process can load (benchmarks.build_cache)."""

    def compile_cached(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec,
                       artifacts: dict[str, bytes] | None) -> Compiled:
        """With `artifacts`: the build they hold, loaded (its build_choices as loaded, for
        the fingerprint check). Without: a fresh build, as `compile`, that also fills
        `Compiled.artifacts` (or `artifacts_missing`)."""
        ...
