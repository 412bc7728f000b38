"""Regressions: list and read them, acknowledge or resolve one (ci or admin scope)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from app.api.deps import CiAccess, CiToken, IdCursor, ReadAccess, RowIdPath, SessionDep
from app.api.presenters import error_responses
from app.models import Regression
from app.schemas import ProfileDiffPublic, RegressionListPublic, RegressionPublic
from app.services import regressions as service
from app.services.tokens import ProjectAccess

router = APIRouter(prefix="/api/v1/regressions", tags=["regressions"])

ERRORS = error_responses(401, 403, 422, 503)


def regression_public(regression: Regression) -> RegressionPublic:
    return RegressionPublic(
        id=regression.id,
        project=regression.project.name,
        series_key=regression.series.key,
        status=regression.status,  # type: ignore[arg-type]  # CHECK-constrained
        opened_by_run_id=regression.opened_by_run_id,
        opened_by_result_id=regression.opened_by_result_id,
        baseline_result_id=regression.baseline_result_id,
        baseline_kind=regression.baseline_kind,  # type: ignore[arg-type]
        baseline_description=regression.baseline_description,
        baseline_speedup=regression.baseline_speedup,
        threshold=regression.threshold,
        magnitude=regression.magnitude,
        evidence=regression.evidence,
        reasons=list(regression.reasons or []),
        resolved_by_result_id=regression.resolved_by_result_id,
        acknowledged_by=regression.acknowledged_by,
        created_at=regression.created_at,
        acknowledged_at=regression.acknowledged_at,
        resolved_at=regression.resolved_at,
    )


@router.get("", response_model=RegressionListPublic, responses=ERRORS,
            summary="List regressions, newest first")
def list_regressions(
    session: SessionDep,
    access: ReadAccess,
    status: Literal["open", "acknowledged", "resolved"] | None = None,
    project: Annotated[str | None, Query(max_length=100)] = None,
    series: Annotated[str | None, Query(max_length=300, description="series key")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: IdCursor = None,
) -> RegressionListPublic:
    page, next_cursor = service.list_regressions(
        session, status=status, project=project, series_key=series, limit=limit, cursor=cursor,
        access=access)
    return RegressionListPublic(items=[regression_public(r) for r in page],
                                next_cursor=next_cursor)


@router.get("/{regression_id}", response_model=RegressionPublic,
            responses={**error_responses(404), **ERRORS}, summary="One regression")
def get_regression(
    regression_id: RowIdPath, session: SessionDep, access: ReadAccess
) -> RegressionPublic:
    return regression_public(service.get_regression(session, regression_id, access=access))


def _move(session: SessionDep, regression_id: int, to: str, by: str,
          access: ProjectAccess) -> RegressionPublic:
    regression = service.transition(session, regression_id, to, by, access)
    session.commit()
    return regression_public(regression)


@router.post("/{regression_id}/acknowledge", response_model=RegressionPublic,
             responses={**error_responses(404, 409), **ERRORS},
             summary="Acknowledge an open regression (ci scope)")
def acknowledge(regression_id: RowIdPath, session: SessionDep, token: CiToken,
                access: CiAccess) -> RegressionPublic:
    """open -> acknowledged, recording the token's name; 409 from any other status; 404
    for a regression of a project outside the token's limit."""
    return _move(session, regression_id, "acknowledged", token.name, access)


@router.post("/{regression_id}/resolve", response_model=RegressionPublic,
             responses={**error_responses(404, 409), **ERRORS},
             summary="Resolve a regression by hand (ci scope)")
def resolve(regression_id: RowIdPath, session: SessionDep, token: CiToken,
            access: CiAccess) -> RegressionPublic:
    """open or acknowledged -> resolved; 409 if it is already resolved; 404 for a
    regression of a project outside the token's limit."""
    return _move(session, regression_id, "resolved", token.name, access)


@router.get("/{regression_id}/profile-diff", response_model=ProfileDiffPublic,
            responses=error_responses(401, 403, 404, 422, 503),
            summary="What got slower: the regressed result's profile against its baseline's")
def get_regression_profile_diff(regression_id: RowIdPath, session: SessionDep,
                                access: ReadAccess) -> ProfileDiffPublic:
    """404 for a regression judged against a pinned speedup (no stored baseline result)
    or whose results hold no profile."""
    from app.api.routes.results import profile_diff_public
    from app.services import profiles

    _, d = profiles.regression_diff(session, regression_id, access=access)
    return profile_diff_public(d)
