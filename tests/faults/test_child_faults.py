"""A benchmark child that hangs past its limit or runs out of memory fails its own cell with
the reason, and the worker goes on to the next cell.

Through the real path: Redis -> a Celery worker process -> benchmark child processes. The
segfault case is in tests/e2e/test_end_to_end.py; the child's fault hook
(SPEEDWATCH_ALLOW_FAULTS=1) makes these failures real: an endless sleep, and an allocation
under RLIMIT_AS that raises MemoryError.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Result
from app.schemas import RunCreate
from app.services.triggering import create_run
from tests.faults.infra import PrivateRedis, Processes, cmdline, descendants, wait_for
from tests.workers.helpers import inject_fault, reload_run, tiny_request
from workers.dispatch import enqueue_cells

pytestmark = pytest.mark.slow

CELL_TIMEOUT_S = 20  # room for the fine cell on 2 busy cores; the hang costs this long


def test_hanging_and_out_of_memory_children_fail_their_cells_and_the_worker_goes_on(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    settings: Settings, session: Session, queue: str,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 "SPEEDWATCH_CELL_TIMEOUT_SECONDS": str(CELL_TIMEOUT_S)}
    procs.worker("worker", queue)
    request = tiny_request(project="child-faults")
    request["matrix"]["batch_sizes"] = [1, 2, 3]
    run, _ = create_run(session, RunCreate.model_validate(request), settings=settings)
    session.commit()
    hang, oom, fine = sorted(c.id for c in run.cells)
    inject_fault(session, hang, "hang")
    inject_fault(session, oom, "oom")
    celery = settings.model_copy(update={"executor": "celery", "cpu_queue": queue,
                                         "broker_url": private_redis.url})
    started = time.monotonic()
    enqueue_cells([(hang, queue), (oom, queue), (fine, queue)], celery)

    finished = wait_for(
        lambda: (r := reload_run(session, run.id)).status in ("done", "failed") and r, 120,
        "the run to finish", interval=0.5, on_timeout=lambda: procs.log("worker"))
    elapsed = time.monotonic() - started

    cells = {c.id: c for c in finished.cells}
    assert cells[hang].status == "failed"
    assert cells[hang].error == f"timed out after {CELL_TIMEOUT_S}s"
    assert cells[oom].status == "failed"
    assert (cells[oom].error or "").startswith("out of memory"), cells[oom].error
    assert "MemoryError" in (cells[oom].error or "")
    assert cells[fine].status == "done", cells[fine].error
    assert (finished.status, finished.verdict) == ("failed", "error")
    assert all(c.attempts == 1 for c in cells.values())
    # each failure is stored as the cell's result, with the child's own words
    results = {r.cell_id: r for r in session.scalars(
        select(Result).where(Result.run_id == run.id))}
    assert set(results) == {hang, oom, fine}
    assert "MemoryError" in (results[oom].stderr_tail or "")
    # the worker lives, and the hanging child did not outlive its limit
    assert procs.alive("worker")
    leftovers = [cmdline(p) for p in descendants(procs.procs["worker"].pid)
                 if "benchmarks.child" in cmdline(p)]
    assert leftovers == []
    assert session.scalar(select(func.count()).select_from(Result)
                          .where(Result.run_id == run.id)) == 3
    print(f"\nhang + oom + fine cell through one worker: run finished in {elapsed:.1f}s")
