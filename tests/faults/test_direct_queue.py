"""Every worker consumes a queue of its own, so a cell can be measured by one chosen worker
(a confirmation on a named GPU of a fleet, app.services.confirmation): two real Celery
workers on one queue and a real broker; a cell sent to the second worker's own queue is
measured there and nowhere else (tests/workers/test_reconciler.py: the reconciler sends
such a cell again instead of failing it as unconfigured).
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import session_scope
from app.models import Cell, Run
from app.services.workers import direct_queue, list_workers
from tests.faults.infra import Processes, wait_for
from tests.workers.helpers import new_run, reload_run
from workers.dispatch import enqueue_cells

pytestmark = pytest.mark.slow

def test_a_cell_sent_to_one_workers_own_queue_is_measured_by_that_worker(
    procs: Processes, base_env: dict[str, str], settings: Settings, session: Session,
    queue: str,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": "redis://127.0.0.1:6379/0"}
    procs.worker("first", queue)
    procs.worker("second", queue)
    own = direct_queue("second@faults")

    def announced() -> bool:
        with session_scope(settings) as s:
            views = {w.name: w for w in list_workers(s, settings)}
        return "second@faults" in views and own in views["second@faults"].queues \
            and direct_queue("first@faults") in views["first@faults"].queues

    wait_for(announced, 30, "both workers to announce their own queues",
             on_timeout=lambda: procs.log("second"))

    run_id, [cell_id] = new_run(session, settings)
    cell = session.get(Cell, cell_id)
    assert cell is not None
    cell.queue = own  # as a confirmation on the second worker's GPU stores it
    session.commit()
    celery = settings.model_copy(update={"executor": "celery", "cpu_queue": queue,
                                         "broker_url": "redis://127.0.0.1:6379/0"})
    enqueue_cells([(cell_id, own)], celery)
    done = wait_for(lambda: (r := reload_run(session, run_id)).status in ("done", "failed")
                    and r, 120, "the cell on the second worker", interval=0.5,
                    on_timeout=lambda: procs.log("second"))
    assert isinstance(done, Run)
    assert [c.status for c in done.cells] == ["done"], done.cells[0].error
    assert "run_cell[" in procs.log("second") and "run_cell[" not in procs.log("first")

