"""Storage objects -> `...Public` schemas. The only place that knows both shapes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from app.models import Cell, Result, Run, Series
from app.schemas import (
    CellJudgementPublic,
    CellPublic,
    CellSpecPublic,
    EnvironmentPublic,
    ErrorPublic,
    PointPublic,
    ProgressPublic,
    ResultSummaryPublic,
    RunDetailPublic,
    RunPublic,
    SeriesPublic,
    SpeedupPublic,
)
from app.services.series import Point


def progress(counts: Counter[str]) -> ProgressPublic:
    return ProgressPublic(total=sum(counts.values()), **{k: v for k, v in counts.items()})


def run_public(run: Run, counts: Counter[str]) -> RunPublic:
    return RunPublic(
        id=run.id,
        project=run.project.name,
        kind=run.kind,  # type: ignore[arg-type]  # CHECK-constrained in the database
        revision=run.revision,
        branch=run.branch,
        trigger=run.trigger,
        status=run.status,  # type: ignore[arg-type]
        verdict=run.verdict,  # type: ignore[arg-type]
        reasons=list(run.reasons or []),
        environment=EnvironmentPublic.model_validate(run.environment),
        progress=progress(counts),
        sweep_id=run.sweep_id,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


def cell_public(cell: Cell, result: Result | None) -> CellPublic:
    spec = cell.spec
    timing = spec.get("timing") or {}
    judgement = None
    if cell.judgement and ("verdict" in cell.judgement or "note" in cell.judgement):
        known = cell.judgement
        judgement = CellJudgementPublic(
            verdict=known.get("verdict"),
            reasons=list(known.get("reasons") or ([known["note"]] if "note" in known else [])),
            suspect=bool(known.get("suspect", False)), confirming="confirming" in known,
            comparison=known.get("comparison"),
            baseline_result_id=known.get("baseline_result_id"))
    return CellPublic(
        id=cell.id,
        series_key=cell.series_key,
        queue=cell.queue,
        status=cell.status,
        attempts=cell.attempts,
        error=cell.error,
        spec=CellSpecPublic(**{k: spec[k] for k in CellSpecPublic.model_fields if k in spec},
                            threads=(spec.get("options") or {}).get("threads"),
                            sides=str((spec.get("options") or {}).get("sides", "paired")),
                            cuda_graphs=bool(timing.get("cuda_graphs", True)),
                            processes=int(timing.get("processes", 1)),
                            max_processes=int(timing.get("max_processes", 0)),
                            budget_seconds=float(timing.get("budget_seconds", 0.0)),
                            target_half_width=float(timing.get("target_half_width", 0.0)),
                            compile_cache=str(timing.get("compile_cache", "process")),
                            builds=str(timing.get("builds", "pinned")),
                            max_host_load=float(timing.get("max_host_load", 0.5))),
        result=ResultSummaryPublic.model_validate(result) if result is not None else None,
        judgement=judgement,
        started_at=cell.started_at,
        finished_at=cell.finished_at,
    )


def run_detail(
    run: Run, counts: Counter[str], cells: Sequence[tuple[Cell, Result | None]]
) -> RunDetailPublic:
    return RunDetailPublic(
        **run_public(run, counts).model_dump(),
        cells=[cell_public(cell, result) for cell, result in cells],
    )


def point_public(point: Point) -> PointPublic:
    return PointPublic(
        result_id=point.result_id,
        run_id=point.run_id,
        revision=point.revision,
        branch=point.branch,
        created_at=point.created_at,
        speedup=point.speedup,
        ci_low=point.ci_low,
        ci_high=point.ci_high,
        baseline_median_ms=point.baseline_median_ms,
        candidate_median_ms=point.candidate_median_ms,
        accuracy_passed=point.accuracy_passed,
        installed_versions=dict(point.installed_versions or {}),
    )


def series_public(series: Series, latest: Point | None) -> SeriesPublic:
    return SeriesPublic(
        key=series.key,
        project=series.project.name,
        model=series.model,
        backend=series.backend,
        weights=series.weights,
        precision=series.precision,
        batch_size=series.batch_size,
        shape_mode=series.shape_mode,
        device_class=series.device_class,
        threads=series.threads,
        timing_mode=series.timing_mode,  # type: ignore[arg-type]  # CHECK-constrained
        options=series.options,
        latest=point_public(latest) if latest is not None else None,
    )


def speedup_public(result: Result) -> SpeedupPublic:
    assert result.speedup is not None and result.ci_low is not None
    assert result.ci_high is not None
    return SpeedupPublic(
        result_id=result.id, speedup=result.speedup, ci_low=result.ci_low, ci_high=result.ci_high
    )


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for error codes, all shaped as ErrorPublic."""
    return {code: {"model": ErrorPublic} for code in codes}
