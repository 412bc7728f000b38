"""Environments: the pins runs asked for, what was installed, and their venvs' builds."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import IdCursor, ReadAccess, SessionDep
from app.api.presenters import error_responses
from app.schemas import EnvironmentBuildPublic, EnvironmentDetailPublic, EnvironmentListPublic
from app.services import environments as service
from app.services.environments import UsedEnvironment

router = APIRouter(prefix="/api/v1/environments", tags=["environments"])


def environment_detail(used: UsedEnvironment) -> EnvironmentDetailPublic:
    env = used.environment
    build = env.build or None
    return EnvironmentDetailPublic(
        id=env.id, pins=list(env.pins or []), interpreter=env.interpreter,
        installed=dict(env.installed or {}), runs=used.runs, projects=used.projects,
        build=EnvironmentBuildPublic.model_validate(
            {k: build.get(k) for k in EnvironmentBuildPublic.model_fields if k in build})
        if build else None)


@router.get("", response_model=EnvironmentListPublic,
            responses=error_responses(401, 403, 422, 503),
            summary="Environments with pins, newest first, with their venv builds")
def list_environments(
    session: SessionDep, access: ReadAccess,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: IdCursor = None,
) -> EnvironmentListPublic:
    """Build time and size are the last build a worker reported (each worker host keeps
    its own cache, with its own disk budget: SPEEDWATCH_VENV_CACHE_MAX_BYTES)."""
    page, next_cursor = service.list_environments(session, limit=limit, cursor=cursor,
                                                  access=access)
    return EnvironmentListPublic(items=[environment_detail(u) for u in page],
                                 next_cursor=next_cursor)
