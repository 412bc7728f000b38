"""The regression life cycle a person drives: open -> acknowledged -> resolved.

Detection (app.services.detection) opens regressions and resolves them when the series
recovers; a person acknowledges one ("seen, working on it") or resolves it by hand. A
transition that does not exist (acknowledging a resolved regression, resolving twice) is a
Conflict that names the current status. Flushes, does not commit.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import Conflict, NotFound
from app.models import Project, Regression, Series
from app.services.tokens import EVERY_PROJECT, ProjectAccess

# status -> the statuses a person may move it to
TRANSITIONS = {"open": ("acknowledged", "resolved"), "acknowledged": ("resolved",),
               "resolved": ()}


def get_regression(session: Session, regression_id: int, *, lock: bool = False,
                   access: ProjectAccess = EVERY_PROJECT) -> Regression:
    """Another project's regression is as unknown as a missing one (see ProjectAccess)."""
    query = access.restrict(select(Regression).where(Regression.id == regression_id),
                            Regression.project_id)
    if lock:
        query = query.with_for_update(of=Regression).execution_options(populate_existing=True)
    regression = session.scalars(query).unique().first()
    if regression is None:
        raise NotFound(f"regression {regression_id} not found")
    return regression


def list_regressions(
    session: Session, *, status: str | None = None, project: str | None = None,
    series_key: str | None = None, limit: int = 50, cursor: int | None = None,
    access: ProjectAccess = EVERY_PROJECT,
) -> tuple[list[Regression], int | None]:
    """Newest first; returns (page, next cursor)."""
    query = access.restrict(select(Regression), Regression.project_id)
    if status is not None:
        query = query.where(Regression.status == status)
    if project is not None:
        query = query.where(Regression.project_id.in_(
            select(Project.id).where(Project.name == project)))
    if series_key is not None:
        query = query.where(Regression.series_id.in_(
            select(Series.id).where(Series.key == series_key)))
    if cursor is not None:
        query = query.where(Regression.id < cursor)
    found = list(session.scalars(query.order_by(Regression.id.desc()).limit(limit + 1)).unique())
    page = found[:limit]
    return page, (page[-1].id if len(found) > limit else None)


def transition(session: Session, regression_id: int, to: str, by: str,
               access: ProjectAccess = EVERY_PROJECT) -> Regression:
    """Acknowledge or resolve by hand; Conflict if the regression is not in a state for it."""
    regression = get_regression(session, regression_id, lock=True, access=access)
    if to not in TRANSITIONS[regression.status]:
        raise Conflict(f"regression {regression_id} is {regression.status}; it cannot be "
                       f"{to} now")
    now = datetime.now(timezone.utc)
    regression.status = to
    if to == "acknowledged":
        regression.acknowledged_at = now
        regression.acknowledged_by = by
    else:
        regression.resolved_at = now
    session.flush()
    return regression
