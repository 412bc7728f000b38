"""A worker SIGKILLed in the middle of a cell: the cell goes to another worker and finishes,
and exactly one result is stored.

Celery acknowledges a cell's message only after the task body returns (`acks_late`), so the
killed worker's message stays in Redis's unacknowledged set; once it is older than the
visibility timeout, any live worker's sweep puts it back on its queue. The second delivery
claims the cell again (attempt 2); `record_result` keeps one result per cell. The test uses
a private Redis with a 10 s visibility timeout (production derives it from the time limits:
a cell still running must never reach a second worker).

The killed worker's benchmark child runs in its own session (so a timeout can kill its whole
group); it must not outlive its worker and keep measuring beside the next cell.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Cell, Result
from app.schemas import RunCreate
from app.services.triggering import create_run
from tests.faults.infra import (
    PrivateRedis,
    Processes,
    cmdline,
    descendants,
    is_running,
    wait_for,
)
from tests.workers.helpers import reload_run, tiny_request
from workers.dispatch import enqueue_cells

pytestmark = pytest.mark.slow

VISIBILITY_TIMEOUT_S = 10
# Enough rounds that the cell takes several seconds: the kill must land mid-measurement.
# Two processes and no more: the adaptive default may add processes for a minute when the
# host is busy, which is the cell's time, not the recovery's.
SLOW_TIMING = {"warmup_iters": 2, "rounds": 20, "min_rounds": 2, "iters_per_round": 5,
               "bootstrap_resamples": 200, "processes": 2, "max_processes": 2}


def test_a_cell_whose_worker_is_killed_finishes_on_another_worker_with_one_result(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    settings: Settings, session: Session, queue: str,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 "SPEEDWATCH_BROKER_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY_TIMEOUT_S),
                 "SPEEDWATCH_CELL_TIMEOUT_SECONDS": "120"}
    procs.worker("first", queue)
    request = tiny_request(project="killed-worker")
    request["matrix"]["timing"] = SLOW_TIMING
    run, _ = create_run(session, RunCreate.model_validate(request), settings=settings)
    session.commit()
    (cell_id,) = [c.id for c in run.cells]
    celery = settings.model_copy(update={"executor": "celery", "cpu_queue": queue,
                                         "broker_url": private_redis.url})
    enqueue_cells([(cell_id, queue)], celery)

    def benchmark_child() -> int | None:
        session.expire_all()
        cell = session.get(Cell, cell_id)
        if cell is None or cell.status != "running":
            return None
        children = [p for p in descendants(procs.procs["first"].pid)
                    if "benchmarks.child" in cmdline(p)]
        return children[0] if children else None

    child = wait_for(benchmark_child, 60, "the first worker to be measuring the cell",
                     on_timeout=lambda: procs.log("first"))
    procs.kill("first")
    killed_at = time.monotonic()
    cell = session.get(Cell, cell_id)
    assert cell is not None and (cell.status, cell.attempts) == ("running", 1)
    # the child dies when its parent (the worker's pool process) does, which on a busy
    # host can take seconds after the worker is killed: bounded, never measuring on
    wait_for(lambda: not is_running(child), 30,
             "the killed worker's benchmark child to die with it")

    procs.worker("second", queue)
    finished = wait_for(
        lambda: (r := reload_run(session, run.id)).status in ("done", "failed") and r, 120,
        "the cell to finish on the second worker", interval=0.5,
        on_timeout=lambda: procs.log("second"))
    recovered = time.monotonic() - killed_at

    (cell,) = finished.cells
    assert (cell.status, cell.attempts) == ("done", 2), cell.error
    assert (finished.status, finished.verdict) == ("done", "pass")
    assert session.scalar(select(func.count()).select_from(Result)
                          .where(Result.cell_id == cell_id)) == 1
    assert "run_cell[" in procs.log("second")
    print(f"\nworker SIGKILLed mid-cell: the cell finished on the second worker "
          f"{recovered:.1f}s after the kill (visibility timeout {VISIBILITY_TIMEOUT_S}s)")
