"""Runs: trigger from CI, poll one, list them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response
from sqlalchemy.orm import Session

from app.api.deps import CiAccess, IdCursor, ReadAccess, RowIdPath, SessionDep, SettingsDep
from app.api.presenters import error_responses, run_detail, run_public
from app.models import Run
from app.schemas import (
    ResultSummaryPublic,
    RunCreate,
    RunDetailPublic,
    RunListPublic,
    RunSubmittedPublic,
)
from app.services import runs as run_service
from app.services import triggering

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])

ERRORS = error_responses(401, 403, 422, 503)


def _detail(session: Session, run: Run) -> RunDetailPublic:
    cells = run_service.run_cells(
        session, run.id, result_fields=tuple(ResultSummaryPublic.model_fields))
    counts = run_service.cell_counts(session, run.id)
    return run_detail(run, counts, cells)


@router.post(
    "",
    response_model=RunSubmittedPublic,
    status_code=201,
    responses={200: {"model": RunSubmittedPublic, "description": "existing run (retry)"},
               **error_responses(409, 413), **ERRORS},
    summary="Trigger a run (ci scope)",
)
def create_run(
    body: RunCreate,
    session: SessionDep,
    settings: SettingsDep,
    access: CiAccess,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", max_length=200, pattern=r"^[\x21-\x7e]+$",
               description="a retry with the same key returns the same run (200)"),
    ] = None,
) -> RunSubmittedPublic:
    """Store the run and one cell per matrix point in one transaction, then send the cell ids
    to the executor. 201: new run. 200: the run this Idempotency-Key (or, without a key, this
    identical project + revision + environment + matrix) already created. If the executor
    cannot take the cells (broker down), the run is still accepted (201/200) and `warning`
    says so: the run is stored and its cells wait, unsent, until the reconciler sends them
    when the broker is back (however long that takes; such cells are never failed for
    want of a worker), or a retry with the same key sends them. Polling the run works
    throughout; a 5xx would tell CI the trigger failed when it did not.
    A token limited to other projects is a 403."""
    access.check_write(body.project)
    outcome = triggering.submit_run(
        session, body, idempotency_key=idempotency_key, settings=settings
    )
    if not outcome.created:
        response.status_code = 200
    detail = _detail(session, outcome.run)
    return RunSubmittedPublic(
        **detail.model_dump(), created=outcome.created, warning=outcome.warning
    )


@router.get(
    "/{run_id}", response_model=RunDetailPublic,
    responses={**error_responses(404), **ERRORS},
    summary="A run: status, per-cell progress, verdict once done",
)
def get_run(run_id: RowIdPath, session: SessionDep, access: ReadAccess) -> RunDetailPublic:
    return _detail(session, run_service.get_run(session, run_id, access))


@router.get("", response_model=RunListPublic, responses=ERRORS, summary="List runs, newest first")
def list_runs(
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=100)] = None,
    status: Literal["queued", "running", "done", "failed"] | None = None,
    branch: Annotated[str | None, Query(max_length=200)] = None,
    revision: Annotated[str | None, Query(max_length=200,
                                          description="runs of this revision only")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: IdCursor = None,
) -> RunListPublic:
    page, next_cursor = run_service.list_runs(
        session, project=project, status=status, branch=branch, limit=limit, cursor=cursor,
        access=access, revision=revision)
    counts = run_service.run_summary_counts(session, [r.id for r in page])
    return RunListPublic(
        items=[run_public(r, counts[r.id]) for r in page],
        next_cursor=next_cursor,
    )
