"""Uploaded results judged by a worker (`SPEEDWATCH_INGEST_JUDGING=worker`): the bootstrap
leaves the API's cores while a live worker consumes the maintenance queue; with none alive,
or with the broker gone, the API judges itself and says why, so a verdict never waits for a
worker nobody started.

Real processes: a private redis-server, the API (`speedwatch serve`, Celery executor) and a
`speedwatch worker` on the maintenance queue, all on the test's PostgreSQL.
"""

from __future__ import annotations

import secrets

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Cell, Run, Worker
from tests.app.detection_docs import body, measured
from tests.faults.infra import PrivateRedis, Processes, wait_for

pytestmark = pytest.mark.slow


def _post_a_drop(url: str, token: str, project: str) -> int:
    """Two uploads of one series, the second 20% slower; the second's run id."""
    headers = {"Authorization": f"Bearer {token}"}
    run_id = 0
    for speedup, revision in ((2.0, "v1"), (1.6, "v2")):
        response = httpx.post(f"{url}/api/v1/results", headers=headers, timeout=30,
                              json=body(measured(speedup), revision, project=project))
        assert response.status_code == 201, response.text
        run_id = int(response.json()["run_id"])
    return run_id


def _judged(session: Session, run_id: int) -> str | None:
    """The run's verdict once its newest cell is judged, else None."""
    session.expire_all()
    cells = session.scalars(select(Cell).where(Cell.run_id == run_id)).all()
    if not cells or any(c.judgement is None for c in cells):
        return None
    run = session.get(Run, run_id)
    return run.verdict if run is not None else None


@pytest.fixture
def judging_on_workers(private_redis: PrivateRedis, procs: Processes,
                       base_env: dict[str, str]) -> None:
    """The service processes of each test: the private broker, judging sent to workers."""
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 "SPEEDWATCH_INGEST_JUDGING": "worker"}


def _consumer_alive(session: Session, queue: str) -> bool:
    session.expire_all()
    return any(queue in (w.queues or []) and w.stopped_at is None
               for w in session.scalars(select(Worker)))


def _with_a_live_maintenance_worker(procs: Processes, base_env: dict[str, str],
                                    session: Session) -> None:
    maintenance = base_env["SPEEDWATCH_MAINTENANCE_QUEUE"]
    procs.worker("maintenance", maintenance)
    wait_for(lambda: _consumer_alive(session, maintenance), 60,
             "the maintenance worker to announce itself",
             on_timeout=lambda: procs.log("maintenance"))


def test_a_live_worker_judges_uploads_and_the_api_does_not(
    judging_on_workers: None, procs: Processes, base_env: dict[str, str],
    session: Session, token: str,
) -> None:
    _with_a_live_maintenance_worker(procs, base_env, session)
    url = procs.serve()

    run_id = _post_a_drop(url, token, f"judging-{secrets.token_hex(3)}")

    verdict = wait_for(lambda: _judged(session, run_id), 60, "a worker to judge the upload",
                       on_timeout=lambda: procs.log("maintenance"))
    assert verdict == "regression"
    assert "speedwatch.judge_ingest" in procs.log("maintenance")
    assert "judged in the API process" not in procs.log("api")


def test_with_no_live_worker_on_the_queue_the_api_judges_uploads_itself(
    judging_on_workers: None, procs: Processes, base_env: dict[str, str],
    session: Session, token: str,
) -> None:
    # sent to a queue nobody consumes, the verdict would wait for a worker (and for the
    # reconciler, which runs on one too)
    url = procs.serve()

    run_id = _post_a_drop(url, token, f"judging-{secrets.token_hex(3)}")

    verdict = wait_for(lambda: _judged(session, run_id), 60,
                       "the API to judge the upload itself",
                       on_timeout=lambda: procs.log("api"))
    assert verdict == "regression"
    maintenance = base_env["SPEEDWATCH_MAINTENANCE_QUEUE"]
    assert f"no live worker consumes the {maintenance} queue" in procs.log("api")


def test_with_the_broker_gone_the_api_judges_uploads_itself(
    judging_on_workers: None, private_redis: PrivateRedis, procs: Processes,
    base_env: dict[str, str], session: Session, token: str,
) -> None:
    _with_a_live_maintenance_worker(procs, base_env, session)
    url = procs.serve()
    private_redis.kill()  # the worker still counts as alive: its heartbeat is in the store

    run_id = _post_a_drop(url, token, f"judging-{secrets.token_hex(3)}")

    verdict = wait_for(lambda: _judged(session, run_id), 90,
                       "the API to judge the upload itself",
                       on_timeout=lambda: procs.log("api"))
    assert verdict == "regression"
    log = procs.log("api")
    assert "judged in the API process" in log
    assert "no live worker consumes" not in log
