"""The task body on real PostgreSQL with real child processes: one cell, one stored outcome."""

from __future__ import annotations

import sys

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Cell, Result
from app.services.workers import Announcement, heartbeat
from tests.workers.helpers import TINY_TIMING, inject_fault, new_run, reload_run, tiny_request
from workers.execution import execute_cell


def _results(session: Session, cell_id: int) -> int:
    return session.scalar(select(func.count()).select_from(Result)
                          .where(Result.cell_id == cell_id)) or 0


def test_a_cell_delivered_twice_is_measured_once_and_stored_once(
    session: Session, settings: Settings
) -> None:
    run_id, [cell_id] = new_run(session, settings, revision="twice")

    assert execute_cell(cell_id) == "done"
    assert execute_cell(cell_id) == "already-finished"

    assert _results(session, cell_id) == 1
    run = reload_run(session, run_id)
    cell = run.cells[0]
    assert (cell.status, cell.attempts) == ("done", 1)
    assert (run.status, run.verdict) == ("done", "pass")
    result = session.scalars(select(Result).where(Result.cell_id == cell_id)).one()
    import onnxruntime

    assert result.installed_versions["onnxruntime"] == onnxruntime.__version__
    assert result.fingerprint["environment"] == {
        "requested": [], "interpreter": None, "python": sys.executable,
    }


def test_a_crashing_benchmark_fails_its_cell_with_the_reason_and_the_body_returns(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEEDWATCH_ALLOW_FAULTS", "1")
    run_id, [cell_id] = new_run(session, settings, revision="segfault")
    inject_fault(session, cell_id, "segfault")

    assert execute_cell(cell_id) == "failed"

    run = reload_run(session, run_id)
    assert run.cells[0].status == "failed"
    assert "SIGSEGV" in (run.cells[0].error or "")
    assert (run.status, run.verdict) == ("failed", "error")
    assert any("SIGSEGV" in reason for reason in run.reasons)


def test_an_interpreter_the_worker_does_not_know_fails_the_cell_without_running_it(
    session: Session, settings: Settings
) -> None:
    """The API accepts an interpreter some worker of the queue announces; a worker of the
    same queue that lacks it still refuses the cell before anything runs."""
    heartbeat(session, Announcement(name="other@host", host="host", pid=1,
                                    queues=[settings.cpu_queue], interpreters=["trt-9.9"]))
    session.commit()
    run_id, [cell_id] = new_run(session, settings, revision="interp", interpreter="trt-9.9")

    assert execute_cell(cell_id) == "failed"

    run = reload_run(session, run_id)
    assert "interpreter 'trt-9.9' is not configured" in (run.cells[0].error or "")
    assert _results(session, cell_id) == 0
    assert run.status == "failed"


def test_a_cell_out_of_attempts_is_failed_and_finishes_its_run(
    session: Session, settings: Settings
) -> None:
    run_id, [cell_id] = new_run(session, settings, revision="attempts")
    cell = session.get(Cell, cell_id)
    assert cell is not None
    cell.attempts = settings.max_cell_attempts
    session.commit()

    assert execute_cell(cell_id) == "already-finished"

    run = reload_run(session, run_id)
    assert run.cells[0].status == "failed"
    assert "attempts" in (run.cells[0].error or "")
    assert run.status == "failed"


def test_an_unknown_cell_id_is_a_no_op(settings: Settings) -> None:
    assert execute_cell(2_000_000_000) == "already-finished"


def test_the_cells_a_run_sends_together_take_turns_and_each_is_stored_when_done(
    session: Session, settings: Settings
) -> None:
    """Two cells of one run, delivered as one group: one child process of each per turn,
    so each cell's processes span the time both take (a drift of the machine reaches both
    and shows in each interval); each is stored with its own result, and the run ends."""
    from app.schemas import RunCreate
    from app.services.triggering import create_run
    from workers.execution import execute_cells

    request = tiny_request(revision="together", weights=["constant", "tensor"],
                           project="together")
    request["matrix"]["timing"] = {**TINY_TIMING, "processes": 2, "max_processes": 2}
    run, _ = create_run(session, RunCreate.model_validate(request), settings=settings)
    session.commit()
    run_id, cells = run.id, [c.id for c in run.cells]
    assert len(cells) == 2

    assert execute_cells(cells) == {cells[0]: "done", cells[1]: "done"}
    assert execute_cells(cells) == {cells[0]: "already-finished", cells[1]: "already-finished"}

    run = reload_run(session, run_id)
    assert (run.status, run.verdict) == ("done", "pass")
    assert [c.attempts for c in run.cells] == [1, 1]
    first, second = (session.scalars(select(Result).where(Result.cell_id == c)).one()
                     .evidence["processes"] for c in cells)
    assert len(first) >= 2 and len(second) >= 2
    assert first[0]["finished_at"] <= second[0]["started_at"]
    assert second[0]["finished_at"] <= second[1]["started_at"] <= first[1]["started_at"]
