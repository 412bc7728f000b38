"""Sweeps and bisects: runs across released versions of a package (ci scope to start or
cancel one; a read to follow it)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from app.api.deps import CiAccess, CiToken, IdCursor, ReadAccess, RowIdPath, SessionDep, SettingsDep
from app.api.presenters import error_responses, progress
from app.config import Settings
from app.models import Sweep
from app.schemas import (
    BisectCreate,
    BisectStepPublic,
    SweepCellPublic,
    SweepChangePublic,
    SweepCreate,
    SweepDetailPublic,
    SweepListPublic,
    SweepPublic,
    SweepRunPublic,
)
from app.services import sweeps as service
from app.services import triggering

router = APIRouter(prefix="/api/v1", tags=["sweeps"])

ERRORS = error_responses(401, 403, 422, 503)


def sweep_public(sweep: Sweep, counts: dict[str, int]) -> SweepPublic:
    return SweepPublic(
        id=sweep.id, project=sweep.project.name,
        kind=sweep.kind,  # type: ignore[arg-type]  # CHECK-constrained
        status=sweep.status,  # type: ignore[arg-type]
        package=sweep.package, from_version=sweep.from_version, to_version=sweep.to_version,
        pre=sweep.pre, holds=list(sweep.holds or []), versions=list(sweep.versions or []),
        max_runs=sweep.max_runs, regression_id=sweep.regression_id, outcome=sweep.outcome,
        progress=progress(Counter(counts)), created_by=sweep.created_by,
        created_at=sweep.created_at, finished_at=sweep.finished_at,
    )


def sweep_detail(session: Session, sweep: Sweep, warning: str | None = None) -> SweepDetailPublic:
    view = service.sweep_view(session, sweep)
    runs = [SweepRunPublic(
        version=v.version, run_id=v.run.id, pins=list(v.environment.pins or []),
        status=v.run.status,  # type: ignore[arg-type]
        verdict=v.run.verdict,  # type: ignore[arg-type]
        installed=dict(v.environment.installed or {}),
        cells=[SweepCellPublic(
            series_key=c.series_key, weights=str(c.spec.get("weights", "?")),
            status=c.status, speedup=r.speedup if r else None,
            ci_low=r.ci_low if r else None, ci_high=r.ci_high if r else None,
            error=(c.error or (r.reason if r else None)) if (r is None or r.speedup is None)
            else None)
            for c, r in v.cells]) for v in view.runs]
    changes = [SweepChangePublic(weights=c.weights, before=c.before, after=c.after,
                                 change=c.change, change_low=c.low, change_high=c.high,
                                 direction=c.direction)  # type: ignore[arg-type]
               for c in view.changes]
    steps = [BisectStepPublic.model_validate(
        {k: s.get(k) for k in BisectStepPublic.model_fields
         if k in s or k in ("run_id", "package", "version")}) for s in view.steps]
    return SweepDetailPublic(**sweep_public(sweep, view.counts).model_dump(), runs=runs,
                             changes=changes, steps=steps, warning=warning)


def _created(session: Session, sweep_id: int, settings: Settings) -> SweepDetailPublic:
    """Commit, send what is not sent yet, answer the sweep as it stands."""
    session.commit()
    warning = triggering.enqueue(session, service.unsent_cells(session, sweep_id), settings)
    return sweep_detail(session, service.get_sweep(session, sweep_id), warning)


@router.post(
    "/sweeps", response_model=SweepDetailPublic, status_code=201,
    responses={**error_responses(409), **ERRORS},
    summary="Sweep a package's releases: one run per version (ci scope)",
)
def create_sweep(body: SweepCreate, session: SessionDep, settings: SettingsDep,
                 token: CiToken, access: CiAccess) -> SweepDetailPublic:
    """One run per release of `package` from `from_version` to `to_version` (both
    included) with a wheel on the package index the workers' pip is configured with,
    oldest first, `holds` fixed in each; 422 (naming the field) for a package off the
    allowlist, a range with no release, or more releases than `max_versions`; 503 when
    the index cannot be read. A token limited to other projects is a 403."""
    access.check_write(body.project)
    sweep = service.create_sweep(session, body, settings=settings, created_by=token.name)
    return _created(session, sweep.id, settings)


@router.post(
    "/bisects", response_model=SweepDetailPublic, status_code=201,
    responses={**error_responses(404, 409), **ERRORS},
    summary="Bisect the releases between a good and a bad environment (ci scope)",
)
def create_bisect(body: BisectCreate, session: SessionDep, settings: SettingsDep,
                  token: CiToken, access: CiAccess) -> SweepDetailPublic:
    """Binary search, one run per step decided by the adaptive verdict against the good
    environment, for the first release that made the series slower; the answer becomes
    the bisect's `outcome` and, for a regression, part of its evidence. Read it back as
    /api/v1/sweeps/{id} (kind "bisect"). 404 for a regression outside the token's limit;
    403 for a project outside it."""
    access.check_write(body.project)
    sweep = service.create_bisect(session, body, settings=settings, access=access,
                                  created_by=token.name)
    return _created(session, sweep.id, settings)


@router.get("/sweeps", response_model=SweepListPublic, responses=ERRORS,
            summary="List sweeps and bisects, newest first")
def list_sweeps(
    session: SessionDep, access: ReadAccess,
    project: Annotated[str | None, Query(max_length=100)] = None,
    kind: Literal["sweep", "bisect"] | None = None,
    regression_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: IdCursor = None,
) -> SweepListPublic:
    page, next_cursor = service.list_sweeps(
        session, project=project, kind=kind, regression_id=regression_id, limit=limit,
        cursor=cursor, access=access)
    counts = service.run_counts(session, [s.id for s in page])
    return SweepListPublic(items=[sweep_public(s, counts[s.id]) for s in page],
                           next_cursor=next_cursor)


@router.get("/sweeps/{sweep_id}", response_model=SweepDetailPublic,
            responses={**error_responses(404), **ERRORS},
            summary="A sweep or bisect: its runs (or steps), speedups and outcome")
def get_sweep(sweep_id: RowIdPath, session: SessionDep, access: ReadAccess) -> SweepDetailPublic:
    return sweep_detail(session, service.get_sweep(session, sweep_id, access=access))


@router.post("/sweeps/{sweep_id}/cancel", response_model=SweepDetailPublic,
             responses={**error_responses(404, 409), **ERRORS},
             summary="Cancel a sweep or bisect (ci scope)")
def cancel_sweep(sweep_id: RowIdPath, session: SessionDep, settings: SettingsDep,
                 token: CiToken, access: CiAccess) -> SweepDetailPublic:
    """Takes no further step and fails its cells that have not started ("cancelled"); a
    cell already measuring stops after its current child process and fails alike. 409 if
    it already ended."""
    service.cancel_sweep(session, sweep_id, token.name, access)
    session.commit()
    service.stop_queued(session, sweep_id, settings)
    session.commit()
    return sweep_detail(session, service.get_sweep(session, sweep_id))


