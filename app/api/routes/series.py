"""Series: list with latest point, the points of one series, and where its speedup moved.

A series is one project's history of a key. The list filters by project; one series is
addressed by its key plus `?project=`, which may be left out while the key exists in one
project only (a key several projects measure answers 422 naming `project`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from app.api.deps import ReadAccess, SessionDep
from app.api.presenters import error_responses, point_public, series_public
from app.schemas import (
    ID_MAX,
    ChangePublic,
    SeriesChangesPublic,
    SeriesListPublic,
    SeriesPointsPublic,
    VersionChangePublic,
)
from app.services import series as series_service
from app.services.changes import AttributedChange, series_changes

router = APIRouter(prefix="/api/v1/series", tags=["series"])

ERRORS = error_responses(401, 403, 422, 503)

ProjectQuery = Annotated[str | None, Query(
    max_length=100, description="the series' project; may be left out while the key exists "
                                "in one project only (else 422 naming `project`)")]


@router.get("", response_model=SeriesListPublic, responses=ERRORS,
            summary="Series (filter by project and axes), each with its latest point")
def list_series(
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=100)] = None,
    model: Annotated[str | None, Query(max_length=100)] = None,
    backend: Annotated[str | None, Query(max_length=50)] = None,
    weights: Annotated[str | None, Query(max_length=20)] = None,
    precision: Annotated[str | None, Query(max_length=20)] = None,
    batch_size: Annotated[int | None, Query(ge=1, le=ID_MAX)] = None,
    shape_mode: Annotated[str | None, Query(max_length=20)] = None,
    device_class: Annotated[str | None, Query(max_length=100)] = None,
    threads: Annotated[str | None, Query(
        pattern=r"^(auto|[1-9][0-9]{0,2})$",
        description="CPU threads of the series, or `auto` for the library's default")] = None,
    timing_mode: Literal["graphs", "nographs"] | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 100,
    cursor: Annotated[str | None, Query(max_length=320,
                                        description="next_cursor of the previous page")] = None,
) -> SeriesListPublic:
    filters = series_service.SeriesFilter(
        project=project, model=model, backend=backend, weights=weights, precision=precision,
        batch_size=batch_size, shape_mode=shape_mode, device_class=device_class,
        threads=int(threads) if threads and threads.isdigit() else threads,
        timing_mode=timing_mode,
    )
    rows = series_service.list_series(session, filters, limit=limit + 1, after=cursor,
                                      access=access)
    page = rows[:limit]
    return SeriesListPublic(
        items=[series_public(s, latest) for s, latest in page],
        next_cursor=series_service.series_cursor(page[-1][0]) if len(rows) > limit else None,
    )


@router.get("/{key:path}/points", response_model=SeriesPointsPublic,
            responses={**error_responses(404), **ERRORS},
            summary="Points of one series (key URL-encoded or with its slashes)")
def series_points(
    key: str,
    session: SessionDep,
    access: ReadAccess,
    project: ProjectQuery = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 500,
    since: Annotated[datetime | None, Query(description="only points stored at/after")] = None,
) -> SeriesPointsPublic:
    series = series_service.get_series(session, key, project, access)
    points = series_service.series_points(session, series, limit=limit, since=since)
    latest = points[-1] if points and since is None else series_service.latest_point(
        session, series)
    return SeriesPointsPublic(
        series=series_public(series, latest), points=[point_public(p) for p in points]
    )


def change_public(found: AttributedChange) -> ChangePublic:
    cp, after = found.change, found.first_after
    return ChangePublic(
        direction=cp.direction, before=cp.before, after=cp.after,
        relative_change=cp.relative_change, relative_change_ci_low=cp.ci_low,
        relative_change_ci_high=cp.ci_high, p_value=cp.p_value, test=cp.test,
        revision=after.revision,
        run_id=after.run_id, result_id=after.result_id, created_at=after.created_at,
        previous_revision=found.last_before.revision,
        versions=[VersionChangePublic(package=v.package, before=v.before, after=v.after)
                  for v in found.versions],
        sentence=found.sentence,
    )


@router.get("/{key:path}/changes", response_model=SeriesChangesPublic,
            responses={**error_responses(404), **ERRORS},
            summary="Change points of a series' speedup, each with the revision after it")
def series_change_points(
    key: str,
    session: SessionDep,
    access: ReadAccess,
    project: ProjectQuery = None,
    limit: Annotated[int, Query(ge=8, le=2000,
                                description="search the newest this many points")] = 500,
) -> SeriesChangesPublic:
    """Level shifts in the newest `limit` ok points (the `speedwatch detect` method, given
    each point's stored 95% interval: at least 3 points on each side, so one outlier is never
    a change), each attributed to the first revision measured after it, with the installed
    versions that changed."""
    series = series_service.get_series(session, key, project, access)
    points, found = series_changes(session, series, limit=limit)
    return SeriesChangesPublic(
        series_key=series.key, project=series.project.name, searched_points=len(points),
        searched_from=points[0].created_at if points else None,
        changes=[change_public(c) for c in found],
    )
