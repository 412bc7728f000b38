"""A Celery worker starts the warm server its cells' processes are forked from before its
first cell arrives, so the first process of its first run does not wait for the server's
imports (13-18 s on an H200). Real worker, real Redis, real PostgreSQL, real children.

GPU cells are the ones forked by default, and there is no GPU here: the worker is asked to
fork its CPU cells too (`SPEEDWATCH_FORK_SERVER=1`), which takes the same path.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Result
from app.schemas import RunCreate
from app.services.triggering import create_run
from tests.faults.infra import PrivateRedis, Processes, cmdline, descendants, wait_for
from tests.workers.helpers import reload_run, tiny_request
from workers.dispatch import enqueue_cells

pytestmark = pytest.mark.slow


def _servers(procs: Processes, name: str) -> list[int]:
    return [p for p in descendants(procs.procs[name].pid)
            if "benchmarks.forkserver" in cmdline(p)]


def test_a_worker_starts_its_fork_server_before_its_first_cell_and_forks_from_it(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    settings: Settings, session: Session, queue: str,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 "SPEEDWATCH_FORK_SERVER": "1"}
    procs.worker("ahead", queue)
    (server,) = wait_for(lambda: _servers(procs, "ahead"), 30,
                         "the worker's fork server, before any cell",
                         on_timeout=lambda: procs.log("ahead"))

    run, _ = create_run(session, RunCreate.model_validate(tiny_request(project="ahead")),
                        settings=settings)
    session.commit()
    celery = settings.model_copy(update={"executor": "celery", "cpu_queue": queue,
                                         "broker_url": private_redis.url})
    enqueue_cells([(c.id, queue) for c in run.cells], celery)
    finished = wait_for(
        lambda: (r := reload_run(session, run.id)).status in ("done", "failed") and r, 180,
        "the cell to be measured", interval=0.5, on_timeout=lambda: procs.log("ahead"))

    assert finished.status == "done", [c.error for c in finished.cells]
    evidence = session.scalars(select(Result.evidence).where(Result.run_id == run.id)).all()
    assert evidence and all(e["process_start"] == "forked" for e in evidence)
    assert _servers(procs, "ahead") == [server]  # the server started ahead, no other


def test_a_worker_whose_cells_start_fresh_starts_no_server(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str], queue: str,
) -> None:
    # the default: only GPU cells fork, and this host has no GPU
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url}
    procs.env.pop("SPEEDWATCH_FORK_SERVER", None)
    procs.worker("fresh", queue)
    time.sleep(3)  # the pool process's start-up has run; a server would be importing now
    assert _servers(procs, "fresh") == []
