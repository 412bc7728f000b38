"""Does the candidate compute the same function as eager? Errors against an fp32 reference.

The reference is the eager model in fp32 (TF32 off on CUDA); errors are computed in float64
so the check itself adds no rounding. Tolerances are on the relative L2 error of the whole
output: reassociated fp32 convolutions (folded BN, other algorithms) land around 1e-6..1e-4,
so 1e-3 catches real mistakes (a dropped BN, a wrong weight) without flagging legitimate
optimizations; half precisions carry ~3 significant digits through ~50 layers, hence looser.
"""

from __future__ import annotations

import math

import torch

from benchmarks.result import Accuracy

# Relative L2 tolerance per precision of the run being checked.
TOLERANCES: dict[str, float] = {"fp32": 1e-3, "fp16": 2e-2, "bf16": 5e-2, "int8": 0.1}
# int8: ONNX Runtime's static QDQ quantization (benchmarks/backends/onnxruntime.py) measured
# 0.034 relative L2 on ResNet50 at 224 and 0.047 on ResNet18 at 64 here (seed 0); a
# dropped layer or a wrong scale lands near 1. 0.1 is about twice what was measured.
# fp32 on CUDA: cuDNN and TensorRT use TF32 tensor cores for fp32 convolutions by default
# (10-bit mantissa), which is a documented, intended loss; judge it like half precision.
TF32_TOLERANCE = 1e-2


class AccuracyError(ValueError):
    """An output that cannot be compared (wrong shape, NaN/Inf); the message says which."""


def tolerance(precision: str, device: str) -> float:
    if precision == "fp32" and device == "cuda":
        return TF32_TOLERANCE
    try:
        return TOLERANCES[precision]
    except KeyError:
        raise ValueError(f"precision: {precision!r} has no tolerance") from None


def compare(candidate: torch.Tensor, reference: torch.Tensor, tol: float) -> Accuracy:
    """Relative L2 and max abs error of `candidate` against `reference`, judged against `tol`."""
    if tuple(candidate.shape) != tuple(reference.shape):
        raise AccuracyError(
            f"candidate output shape {tuple(candidate.shape)} != reference {tuple(reference.shape)}"
        )
    c = candidate.detach().to("cpu", torch.float64)
    r = reference.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(c).all()):
        raise AccuracyError("candidate output contains NaN or Inf")
    if not bool(torch.isfinite(r).all()):
        raise AccuracyError("reference output contains NaN or Inf")
    diff = c - r
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(diff))
    # An all-zero reference has no scale; fall back to the absolute error.
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    return Accuracy(
        rel_l2=rel_l2,
        max_abs=max_abs,
        tolerance=tol,
        passed=math.isfinite(rel_l2) and rel_l2 <= tol,
    )
