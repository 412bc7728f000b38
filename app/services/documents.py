"""Result documents rebuilt from stored rows: the BenchResult a `results` row came from.

Detection judges documents, not rows (app.detection works on plain documents), and so does
confirmation when it judges a re-measure; both rebuild them here, so neither has to import
the other for it.
"""

from __future__ import annotations

from typing import Any

from app.models import Result
from benchmarks.result import Accuracy, BenchResult, LatencySummary


def result_document(row: Result, series_key: str, spec: dict[str, Any]) -> BenchResult:
    """The BenchResult a stored row came from (everything the verdict and evidence read)."""
    def summary(prefix: str) -> LatencySummary | None:
        median = getattr(row, f"{prefix}_median_ms")
        if median is None:
            return None
        return LatencySummary(
            n=row.samples_per_side or 0, median_ms=median,
            iqr_ms=getattr(row, f"{prefix}_iqr_ms") or 0.0,
            p05_ms=getattr(row, f"{prefix}_p05_ms") or median,
            p95_ms=getattr(row, f"{prefix}_p95_ms") or median,
            mean_ms=getattr(row, f"{prefix}_mean_ms") or median,
        )

    speedup = row.stored_speedup()
    accuracy = None
    if row.accuracy_passed is not None:
        accuracy = Accuracy(row.accuracy_rel_l2 or 0.0, row.accuracy_max_abs or 0.0,
                            row.accuracy_tolerance or 0.0, row.accuracy_passed)
    return BenchResult(
        series_key=series_key, spec=spec,
        status=row.status,  # type: ignore[arg-type]  # CHECK-constrained
        reason=row.reason, schema_version=row.schema_version,
        baseline_samples_ms=row.baseline_samples_ms or [],
        candidate_samples_ms=row.candidate_samples_ms or [],
        baseline=summary("baseline"), candidate=summary("candidate"),
        speedup=speedup, accuracy=accuracy, compile_seconds=row.compile_seconds,
        peak_memory_bytes=row.peak_memory_bytes or {}, evidence=row.evidence or {},
        fingerprint=row.fingerprint or {},
    )
