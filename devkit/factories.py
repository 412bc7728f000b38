"""Literal requests and result documents for the API tests (small, readable, valid)."""

from __future__ import annotations

from typing import Any, Literal

from benchmarks.result import Accuracy, BenchResult, LatencySummary, Speedup
from benchmarks.spec import BenchSpec

TINY: dict[str, Any] = {"width": 8, "image_size": 32}


def tiny_spec(**fields: Any) -> BenchSpec:
    """A ResNet small enough that its series keys stay short and obviously test data."""
    return BenchSpec(**{"model": "resnet18", "backend": "onnxruntime", **TINY, **fields})


def run_request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "project": "vision",
        "revision": "abc123",
        "branch": "main",
        "trigger": "ci",
        "environment": {"pins": ["onnxruntime==1.22.0"]},
        "matrix": {"models": ["resnet18"], "backends": ["onnxruntime"],
                   "weights": ["constant", "tensor"], **TINY},
    }
    for key, value in overrides.items():
        if key == "matrix":
            body["matrix"] = {**body["matrix"], **value}
        else:
            body[key] = value
    return body


def bench_result(
    spec: BenchSpec | None = None,
    *,
    speedup: float = 1.5,
    ci: tuple[float, float] | None = None,
    device_class: str = "cpu",
    baseline_ms: float = 3.0,
    accuracy_passed: bool = True,
    status: Literal["ok", "failed", "skipped"] = "ok",
) -> BenchResult:
    spec = spec or tiny_spec()
    low, high = ci or (speedup * 0.95, speedup * 1.05)
    candidate_ms = baseline_ms / speedup
    if status != "ok":
        return BenchResult(series_key=spec.series_key(device_class), spec=spec.to_dict(),
                           status=status, reason="backend unavailable: stand-in reason",
                           fingerprint={"device_class": device_class})
    return BenchResult(
        series_key=spec.series_key(device_class),
        spec=spec.to_dict(),
        status="ok",
        baseline_samples_ms=[[baseline_ms, baseline_ms * 1.01]] * 3,
        candidate_samples_ms=[[candidate_ms, candidate_ms * 1.01]] * 3,
        baseline=LatencySummary(6, baseline_ms, 0.01, baseline_ms, baseline_ms * 1.01,
                                baseline_ms),
        candidate=LatencySummary(6, candidate_ms, 0.01, candidate_ms, candidate_ms * 1.01,
                                 candidate_ms),
        speedup=Speedup(speedup, low, high),
        accuracy=Accuracy(rel_l2=1e-6 if accuracy_passed else 0.5, max_abs=1e-5,
                          tolerance=1e-3, passed=accuracy_passed),
        fingerprint={"device_class": device_class, "packages": {"onnxruntime": "1.22.0"}},
    )


def ingest_body(result: BenchResult | dict[str, Any], **overrides: Any) -> dict[str, Any]:
    document = result.to_dict() if isinstance(result, BenchResult) else result
    body: dict[str, Any] = {
        "project": "vision",
        "revision": "v1.0",
        "environment": {"pins": ["onnxruntime==1.22.0"]},
        "result": document,
    }
    body.update(overrides)
    return body


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
