"""The eager backend: the candidate is the baseline model itself.

Timing eager against eager is an A/A control: its speedup must come out at 1.0 within its
confidence interval, which checks the harness (order effects, drift, bootstrap) rather than
any optimizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.backends.base import Compiled

if TYPE_CHECKING:
    import torch

    from benchmarks.spec import BenchSpec


class EagerBackend:
    name = "eager"

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        import torch

        if spec.device == "cuda" and not torch.cuda.is_available():
            return "CUDA is not available here"
        return None

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        return Compiled(run=model, evidence={}, cuda_graph_safe=True)


BACKEND = EagerBackend()
