"""Staged sends leave only with the outermost commit: a savepoint's release is no commit.

Judging (which asks for confirmations, a bisect's next step and webhook deliveries) runs
inside a SAVEPOINT, and SQLAlchemy fires after_commit when one is released; a worker handed
a cell id then looks for a row nobody else can see yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.services import after_commit, confirmation, sweep_progress


@pytest.fixture
def session() -> Iterator[Session]:
    engine = create_engine("sqlite://")
    with Session(engine) as s:
        s.execute(text("select 1"))
        yield s


def recorder() -> tuple[list[list[Any]], after_commit.Send]:
    sent: list[list[Any]] = []
    return sent, lambda items, _settings: sent.append(list(items))


def test_nothing_leaves_when_a_savepoint_is_released(session: Session) -> None:
    sent, send = recorder()
    with session.begin_nested():
        after_commit.send_after_commit(session, "cells", [1, 2], send)
    assert sent == []
    session.commit()
    assert sent == [[1, 2]]
    session.commit()
    assert sent == [[1, 2]]  # sent once


def test_a_rolled_back_savepoint_keeps_what_the_outer_transaction_staged(
        session: Session) -> None:
    sent, send = recorder()
    after_commit.send_after_commit(session, "cells", [1], send)
    savepoint = session.begin_nested()
    savepoint.rollback()
    session.commit()
    assert sent == [[1]]


def test_a_rollback_of_the_transaction_drops_everything(session: Session) -> None:
    sent, send = recorder()
    after_commit.send_after_commit(session, "cells", [1], send)
    session.rollback()
    session.execute(text("select 1"))
    session.commit()
    assert sent == []


def test_each_key_is_sent_by_its_own_sender_with_the_settings_given(session: Session) -> None:
    settings = Settings(database_url="sqlite://")
    seen: list[tuple[str, list[Any], Settings]] = []
    after_commit.send_after_commit(session, "a", [1], lambda i, s: seen.append(("a", i, s)),
                                   settings)
    after_commit.send_after_commit(session, "b", [2], lambda i, s: seen.append(("b", i, s)))
    after_commit.send_after_commit(session, "a", [3], lambda i, s: seen.append(("x", i, s)))
    after_commit.forget(session, "b")
    session.commit()
    assert [(k, i) for k, i, _ in seen] == [("a", [1, 3])]
    assert seen[0][2] is settings


def test_confirmations_and_bisect_steps_wait_for_the_outermost_commit(
        session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    sent, _ = recorder()
    monkeypatch.setattr(after_commit, "enqueue_cells",
                        lambda cells, _settings, what: sent.append([what, *cells]))
    settings = Settings(database_url="sqlite://")
    with session.begin_nested():  # as finish_run_if_complete judges a run
        after_commit.send_after_commit(session, confirmation.PENDING_CONFIRMATIONS,
                                       [(7, "cpu")], confirmation.send, settings)
        after_commit.send_after_commit(session, sweep_progress.PENDING_CELLS,
                                       [(8, "cpu")], sweep_progress._send, settings)
    assert sent == []
    session.commit()
    assert sorted(sent) == [["confirmation", (7, "cpu")], ["sweep", (8, "cpu")]]
