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
from benchmarks.timing_policy import timing_fields


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


def _columns(row: object, *names: str) -> dict[str, Any]:
    """A row's columns that its public model shows under the same names."""
    return {name: getattr(row, name) for name in names}


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
        **_columns(cell, "id", "series_key", "queue", "status", "attempts", "error",
                   "started_at", "finished_at"),
        spec=CellSpecPublic(**{k: spec[k] for k in CellSpecPublic.model_fields if k in spec},
                            threads=(spec.get("options") or {}).get("threads"),
                            sides=str((spec.get("options") or {}).get("sides", "paired")),
                            # the timing fields the cell's summary shows; a stored spec
                            # leaves some out at their defaults (Knob.quiet_default)
                            **{name: kind(timing.get(name, default))
                               for name, kind, default, _knob in timing_fields()
                               if name in CellSpecPublic.model_fields}),
        result=ResultSummaryPublic.model_validate(result) if result is not None else None,
        judgement=judgement,
    )


def run_detail(
    run: Run, counts: Counter[str], cells: Sequence[tuple[Cell, Result | None]]
) -> RunDetailPublic:
    return RunDetailPublic(
        **run_public(run, counts).model_dump(),
        cells=[cell_public(cell, result) for cell, result in cells],
    )


def point_public(point: Point) -> PointPublic:
    return PointPublic.model_validate(
        {name: getattr(point, name) for name in PointPublic.model_fields}
        | {"installed_versions": dict(point.installed_versions or {})})


def series_public(series: Series, latest: Point | None) -> SeriesPublic:
    return SeriesPublic(
        # timing_mode: the column's CHECK constraint holds it to the schema's words
        **_columns(series, "key", "model", "backend", "weights", "precision", "batch_size",
                   "shape_mode", "device_class", "threads", "timing_mode", "options"),
        project=series.project.name,
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
