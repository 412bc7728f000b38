"""Literal measured result documents with raw samples, for the verdict and regression tests.

Each round's latencies are a base latency times a fixed, small jitter pattern (about 1%
spread), so the verdict's bootstrap sees real round-to-round noise and the tests stay exact.
"""

from __future__ import annotations

from typing import Any

from benchmarks.result import Accuracy, BenchResult, LatencySummary, Speedup
from benchmarks.spec import BenchSpec
from devkit.factories import ingest_body, tiny_spec

JITTER = (-0.010, 0.004, 0.012, -0.006, 0.000, 0.008, -0.011, 0.003)
EAGER_MS = 10.0


def _rounds(base_ms: float, shift: int) -> list[list[float]]:
    return [[round(base_ms * (1 + JITTER[(r + i + shift) % len(JITTER)]), 6)
             for i in range(len(JITTER))] for r in range(len(JITTER))]


def measured(
    speedup: float,
    *,
    spec: BenchSpec | None = None,
    evidence: dict[str, Any] | None = None,
    packages: dict[str, str] | None = None,
    half_width: float = 0.02,
    samples: bool = True,
) -> BenchResult:
    """An ok result whose eager rounds run at EAGER_MS and candidate at EAGER_MS / speedup,
    its interval +-half_width; `samples=False`: ingested without its raw rounds."""
    spec = spec or tiny_spec()
    eager, cand = _rounds(EAGER_MS, 0), _rounds(EAGER_MS / speedup, 3)

    def summary(rounds: list[list[float]]) -> LatencySummary:
        flat = sorted(x for r in rounds for x in r)
        mid = flat[len(flat) // 2]
        return LatencySummary(len(flat), mid, 0.0, flat[0], flat[-1], sum(flat) / len(flat))

    b, c = summary(eager), summary(cand)
    value = b.median_ms / c.median_ms
    return BenchResult(
        series_key=spec.series_key("cpu"), spec=spec.to_dict(), status="ok",
        baseline_samples_ms=eager if samples else [],
        candidate_samples_ms=cand if samples else [], baseline=b, candidate=c,
        speedup=Speedup(value, value * (1 - half_width), value * (1 + half_width)),
        accuracy=Accuracy(rel_l2=1e-6, max_abs=1e-5, tolerance=1e-3, passed=True),
        evidence=evidence or {},
        fingerprint={"device_class": "cpu",
                     "packages": packages or {"onnxruntime": "1.22.0"}},
    )


def body(result: BenchResult, revision: str, project: str = "vision",
         branch: str = "main") -> dict[str, Any]:
    return ingest_body(result, revision=revision, branch=branch, project=project)
