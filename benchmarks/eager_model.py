"""The eager model a cell measures against: built (or loaded from the build cache) at the
cell's precision, with its input, the fp32 reference output computed with exact fp32
matmuls, and eager's own accuracy against that reference."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import torch

from benchmarks import (
    build_cache,
    model_ref,
)
from benchmarks.accuracy import compare, tolerance
from benchmarks.models import example_input, model_dtype
from benchmarks.process_state import Peak
from benchmarks.spec import BenchSpec


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """TF32 off while computing the reference: the reference must be plain fp32."""
    cudnn, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = cudnn
        torch.backends.cuda.matmul.allow_tf32 = matmul


def model_identity_of(spec: BenchSpec, model_info: dict[str, Any]) -> str | None:
    """What names the model's weights and code for the build cache: a built-in model's
    spec fields and the harness that builds it (both in the key already); a model of the
    user's, the digest and fingerprint its build recorded (None without them)."""
    if model_ref.parse(spec.model, allow_absolute=True).builtin:
        return spec.model
    digest, fp = model_info.get("digest"), model_info.get("fingerprint")
    return f"{spec.model} {digest} {fp}" if digest and fp else None


def build_eager(spec: BenchSpec, device: torch.device, model_info: dict[str, Any],
           environment: dict[str, Any], evidence: dict[str, Any],
           ) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """(fp32 model on the device, its fp32 input, the fp32 reference output).

    A model of the user's is fingerprinted during the reference call (the same forward
    pass, nothing extra run) and its fingerprint stored in `model_info`; building it may
    raise own_models.ModelUnavailable, which skips the cell."""
    ref = model_ref.parse(spec.model, allow_absolute=True)
    if ref.builtin:
        # a built-in model's weights: built, or loaded from the host's build cache
        built, evidence["model_build"] = build_cache.built_model(spec, environment=environment)
        model = built.to(device)
        x32 = example_input(spec).to(device)
        with torch.inference_mode(), exact_fp32():
            reference = model(x32).float()
        return model, x32, reference
    from benchmarks import own_models

    built = own_models.build(spec, ref)
    built.module = built.module.to(device)
    x32 = built.input.to(device)
    with torch.inference_mode(), exact_fp32():
        out, info = own_models.fingerprinted_call(built, x32)
    model_info.update(info)
    return built.module, x32, out.float()


def eager_model(spec: BenchSpec, model_info: dict[str, Any], environment: dict[str, Any],
                 evidence: dict[str, Any], peak: dict[str, int],
                 ) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, float]:
    """The eager model at the cell's precision, its input, the fp32 reference output, and
    the tolerance the candidate is held to; eager's own accuracy against the reference
    and its peak memory while built go in the evidence."""
    on_cuda = spec.device == "cuda"
    dtype = model_dtype(spec.precision)
    with Peak(on_cuda) as p_base:
        model, x32, reference = build_eager(spec, torch.device(spec.device), model_info,
                                       environment, evidence)
        model = model.to(dtype)
        x = x32.to(dtype)
        with torch.inference_mode():
            baseline_out = model(x)
    peak["baseline_build"] = p_base.value
    tol = tolerance(spec.precision, spec.device)
    evidence["baseline_accuracy"] = asdict(compare(baseline_out, reference, tol))
    return model, x, reference, tol
