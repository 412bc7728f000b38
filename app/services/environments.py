"""Environments as people look them up: what each asked for, what the workers found
installed, and the last build of its cached venv (seconds, bytes, what pip installed).

An environment row is shared by every project whose runs used its pins, so a token limited
to projects sees the environments its projects' runs used, and no others.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Environment, Project, Run
from app.services.tokens import EVERY_PROJECT, ProjectAccess


@dataclass(frozen=True)
class UsedEnvironment:
    environment: Environment
    runs: int  # runs of the caller's projects that used it
    projects: list[str]  # those projects


def list_environments(
    session: Session, *, limit: int = 100, cursor: int | None = None,
    access: ProjectAccess = EVERY_PROJECT,
) -> tuple[list[UsedEnvironment], int | None]:
    """Environments with pins (the ones with a venv to build) that runs of the caller's
    projects used, newest first; (page, next cursor)."""
    used = access.restrict(select(Run.environment_id), Run.project_id).subquery()
    query = (select(Environment, func.count(used.c.environment_id))
             .join(used, used.c.environment_id == Environment.id)
             .where(Environment.interpreter.is_(None)).group_by(Environment.id))
    if cursor is not None:
        query = query.where(Environment.id < cursor)
    rows = [(env, int(runs)) for env, runs in session.execute(
        query.order_by(Environment.id.desc()).limit(limit + 1)).all()]
    page = rows[:limit]
    names: dict[int, list[str]] = {env.id: [] for env, _ in page}
    if names:
        for env_id, name in session.execute(
                access.restrict(select(Run.environment_id), Run.project_id)
                .add_columns(Project.name).join(Project, Project.id == Run.project_id)
                .where(Run.environment_id.in_(names)).distinct()
                .order_by(Run.environment_id, Project.name)).all():
            names[env_id].append(name)
    return ([UsedEnvironment(env, runs, names[env.id]) for env, runs in page],
            page[-1][0].id if len(rows) > limit else None)
