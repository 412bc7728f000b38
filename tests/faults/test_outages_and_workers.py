"""A run triggered while the broker is down is measured when it is back, and workers are
seen as they are: real Celery workers announce themselves, a SIGKILLed one reads as lost,
a cleanly stopped one as stopped, and a restarted one takes over its row.

Real processes throughout: a private redis-server, the API (`speedwatch serve`), a worker
and beat (`speedwatch worker`, `speedwatch beat`), all on the test's PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Cell, Result, Run
from app.services.workers import direct_queue
from tests.faults.infra import PrivateRedis, Processes, wait_for
from tests.workers.helpers import tiny_request

pytestmark = pytest.mark.slow

RECONCILE_AFTER_S = 10  # the smallest the settings allow; gives up after 3 x 10 s
OUTAGE_S = 40  # longer than max_cell_attempts deadlines: the old rule failed such runs


def _workers(url: str) -> dict[str, dict[str, Any]]:
    response = httpx.get(f"{url}/api/v1/workers", timeout=10)
    assert response.status_code == 200, response.text
    return {w["name"]: w for w in response.json()["workers"]}


def test_a_run_triggered_while_the_broker_is_down_runs_when_it_is_back(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    session: Session, queue: str, token: str, tmp_path: Path,
) -> None:
    """The API stores the run and accepts it with a warning (201, not a 5xx); the worker
    keeps announcing itself through the outage (its heartbeat goes to SQL); the reconciler
    neither fails the cells ("no worker consumes queue" would be false) nor counts them as
    sent; once Redis is back the first sweep sends them and the run finishes."""
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 "SPEEDWATCH_RECONCILE_AFTER_SECONDS": str(RECONCILE_AFTER_S),
                 "SPEEDWATCH_RECONCILE_INTERVAL_SECONDS": "2",
                 "SPEEDWATCH_WORKER_HEARTBEAT_SECONDS": "1",
                 "SPEEDWATCH_CELL_TIMEOUT_SECONDS": "60"}
    url = procs.serve()
    procs.worker("worker", queue)
    procs.worker("maintenance", f"{queue}-maintenance")  # beat's reconciler sweeps
    procs.start("beat", "beat", "--schedule", str(tmp_path / "beat-schedule"))

    private_redis.kill()
    response = httpx.post(
        f"{url}/api/v1/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30,
        json={**tiny_request(project="broker-outage", weights=["constant", "tensor"]),
              "branch": "outage"})
    assert response.status_code == 201, response.text
    assert "stored" in response.json()["warning"]
    run_id = int(response.json()["id"])

    time.sleep(OUTAGE_S)
    session.expire_all()
    cells = session.scalars(select(Cell).where(Cell.run_id == run_id)).all()
    assert [(c.status, c.enqueued_at) for c in cells] == [("queued", None)] * 2
    worker = _workers(url)["worker@faults"]
    assert worker["state"] == "alive", worker  # beating through the outage

    private_redis.start()
    back = time.monotonic()

    def finished() -> bool:
        session.expire_all()
        return session.get(Run, run_id).status in ("done", "failed")  # type: ignore[union-attr]

    wait_for(finished, 120, "the run to finish after the broker is back", interval=0.5,
             on_timeout=lambda: procs.log("worker") + procs.log("beat"))
    print(f"\nrun triggered during a {OUTAGE_S} s broker outage: finished "
          f"{time.monotonic() - back:.1f} s after Redis was back")
    session.expire_all()
    run = session.get(Run, run_id)
    assert run is not None
    assert (run.status, run.verdict) == ("done", "pass"), [c.error for c in run.cells]
    for cell in run.cells:
        assert session.scalar(select(func.count()).select_from(Result)
                              .where(Result.cell_id == cell.id)) == 1
    assert "no worker consumes queue" not in (procs.log("worker", tail=10**7)
                                             + procs.log("maintenance", tail=10**7))


def test_real_workers_announce_themselves_and_read_as_lost_or_stopped(
    procs: Processes, base_env: dict[str, str], queue: str, token: str,
    session: Session,
) -> None:
    """A worker lists its queues, host, pid and interpreters within a heartbeat of starting;
    the API accepts the interpreter it announces (and the run is measured in it); SIGKILL
    makes it lost after `worker_lost_after`; restarted under its name it is alive with its
    new pid; SIGTERM marks it stopped at once."""
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": "redis://127.0.0.1:6379/0",
                 "SPEEDWATCH_WORKER_HEARTBEAT_SECONDS": "1",
                 "SPEEDWATCH_WORKER_LOST_AFTER_SECONDS": "4",
                 "SPEEDWATCH_INTERPRETERS": json.dumps({"here": sys.executable})}
    url = procs.serve()
    procs.worker("worker", queue)
    name = "worker@faults"
    wait_for(lambda: name in _workers(url), 10, "the worker to announce itself")
    worker = _workers(url)[name]
    assert (worker["state"], worker["queues"], worker["interpreters"]) == (
        "alive", sorted([queue, direct_queue(name)]), ["here"])
    assert worker["host"] == os.uname().nodename and worker["pid"] > 0
    first_pid = worker["pid"]

    headers = {"Authorization": f"Bearer {token}"}
    unknown = httpx.post(f"{url}/api/v1/runs", headers=headers, timeout=30,
                         json=tiny_request(project="interp", interpreter="trt-9.9"))
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["field"] == "environment.interpreter"
    known = httpx.post(f"{url}/api/v1/runs", headers=headers, timeout=30,
                       json=tiny_request(project="interp", interpreter="here"))
    assert known.status_code == 201, known.text
    run_id = known.json()["id"]

    def finished() -> bool:
        session.expire_all()
        return session.get(Run, run_id).status in ("done", "failed")  # type: ignore[union-attr]

    wait_for(finished, 120, "the interpreter's run to finish", interval=0.5,
             on_timeout=lambda: procs.log("worker"))
    assert session.get(Run, run_id).status == "done"  # type: ignore[union-attr]

    procs.kill("worker")
    wait_for(lambda: _workers(url)[name]["state"] == "lost", 15, "the killed worker to be lost")

    procs.worker("worker", queue)
    wait_for(lambda: _workers(url)[name]["state"] == "alive", 10, "the restart to announce")
    assert _workers(url)[name]["pid"] != first_pid

    os.killpg(procs.procs["worker"].pid, signal.SIGTERM)
    procs.procs["worker"].wait(timeout=30)
    assert _workers(url)[name]["state"] == "stopped"
