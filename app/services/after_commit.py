"""Work handed to the executor only once the session's outermost transaction commits.

Three services stage sends this way (confirm cells, a bisect's next step, webhook
deliveries): a worker or sender that got an id before its row is committed finds nothing.
SQLAlchemy reports a SAVEPOINT's release as a commit too, and judging runs inside one, so
only the outermost commit sends. A savepoint rolled back leaves what the outer transaction
staged; what it staged itself is dropped by its caller (`forget`) or, for rows that are gone,
skipped by the sender. A rollback of the whole transaction drops everything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event, update
from sqlalchemy.orm import Session

from app import ports
from app.config import Settings, get_settings
from app.models import Cell

log = logging.getLogger(__name__)

_STAGED = "speedwatch_send_after_commit"

Send = Callable[[list[Any], Settings], None]


@dataclass
class _Staged:
    send: Send
    items: list[Any] = field(default_factory=list)
    settings: Settings | None = None


def send_after_commit(session: Session, key: str, items: Iterable[Any], send: Send,
                      settings: Settings | None = None) -> None:
    """Stage `items` under `key`; `send(items, settings)` runs once, after the commit.

    `send` must never raise: it runs inside SQLAlchemy's hook, after the data is safe."""
    staged: dict[str, _Staged] = session.info.setdefault(_STAGED, {})
    entry = staged.setdefault(key, _Staged(send))
    entry.items.extend(items)
    if settings is not None:
        entry.settings = settings


def staged(session: Session, key: str) -> list[Any]:
    """What is staged under `key` and not sent yet."""
    entry = session.info.get(_STAGED, {}).get(key)
    return list(entry.items) if entry is not None else []


def forget(session: Session, key: str) -> None:
    """Drop what is staged under `key` (its rows were rolled back with a savepoint)."""
    session.info.get(_STAGED, {}).pop(key, None)


@event.listens_for(Session, "after_commit")
def _send_staged(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint's release: nothing is visible to others yet
    for entry in (session.info.pop(_STAGED, None) or {}).values():
        if entry.items:
            entry.send(entry.items, entry.settings or get_settings())


@event.listens_for(Session, "after_rollback")
def _drop_staged(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_STAGED, None)


def enqueue_cells(cells: list[tuple[int, str]], settings: Settings, what: str) -> None:
    """Hand committed cells (id, queue) to the executor; never raises. A failed send clears
    their enqueue stamp, so the reconciler sends them within a minute.

    Runs in the after-commit hook of whichever process committed (the API, or a worker
    finishing a run), so it goes through app.ports like every other send."""
    try:
        ports.cell_queue().enqueue(cells, settings)
    except Exception as exc:  # broker down: the cells are stored, the reconciler sends them
        log.warning("%s cells %s not sent: %s", what, [c for c, _ in cells], exc)
        try:
            from app.db import session_scope

            with session_scope(settings) as session:
                session.execute(
                    update(Cell).where(Cell.id.in_([c for c, _ in cells]),
                                       Cell.status == "queued").values(enqueued_at=None))
        except Exception as again:  # the store is down too: the reconciler's deadline
            log.warning("could not clear their enqueue stamp: %s", again)
