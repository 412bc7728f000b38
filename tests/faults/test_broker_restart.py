"""Redis restarts while runs are queued: no run is lost, the reconciler re-sends what the
broker forgot, and the API keeps answering reads throughout.

A private, non-persistent redis-server is SIGKILLed and started again, so every queued
message is gone, as after a crash of a broker that keeps nothing on disk. The worker, beat
and the API are real processes that live through the restart. Cells are committed in SQL
before they are sent, so the store still knows them: the reconciler (run by beat every 2 s
here) finds queued cells sent more than `reconcile_after_seconds` (10 s here) ago and sends
them again; redelivering a cell the broker still had is harmless (`claim_cell`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Cell, Result, Run
from tests.faults.infra import PrivateRedis, Processes, wait_for
from tests.workers.helpers import tiny_request

pytestmark = pytest.mark.slow

RECONCILE_AFTER_S = 10  # the smallest the settings allow


def queued_cells(server: PrivateRedis, queue: str) -> int:
    """run_cell messages waiting in the queue."""
    messages = server.client().lrange(queue, 0, -1)
    return sum(json.loads(m)["headers"]["task"] == "speedwatch.run_cell" for m in messages)


def test_runs_queued_when_redis_restarts_all_finish_and_reads_keep_working(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    session: Session, queue: str, token: str, tmp_path: Path,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 # one message per cell: the scenario counts cells left in the broker
                 "SPEEDWATCH_INTERLEAVE_CELLS": "1",
                 "SPEEDWATCH_RECONCILE_AFTER_SECONDS": str(RECONCILE_AFTER_S),
                 "SPEEDWATCH_RECONCILE_INTERVAL_SECONDS": "2",
                 "SPEEDWATCH_CELL_TIMEOUT_SECONDS": "60"}
    url = procs.serve()
    procs.worker("worker", queue)
    procs.worker("maintenance", f"{queue}-maintenance")  # beat's reconciler sweeps
    procs.start("beat", "beat", "--schedule", str(tmp_path / "beat-schedule"))
    headers = {"Authorization": f"Bearer {token}"}
    run_ids = []
    for revision, weights in (("a", ["constant", "tensor"]), ("b", ["constant"])):
        response = httpx.post(
            f"{url}/api/v1/runs", headers=headers, timeout=30,
            # a branch each: no run is judged against the other's tiny, noisy cells (the
            # verdict would be about their timing, not about the outage)
            json={**tiny_request(project="broker-restart", revision=revision, weights=weights),
                  "branch": revision})
        assert response.status_code == 201, response.text
        run_ids.append(int(response.json()["id"]))

    def running() -> bool:
        session.expire_all()
        return bool(session.scalar(select(func.count()).select_from(Cell).where(
            Cell.run_id.in_(run_ids), Cell.status == "running")))

    wait_for(running, 60, "the worker to start a cell", on_timeout=lambda: procs.log("worker"))
    waiting = queued_cells(private_redis, queue)
    assert waiting == 2, "the other two cells should wait in the broker when it crashes"

    private_redis.kill()
    reads = [httpx.get(f"{url}/api/v1/runs/{run_id}", timeout=10) for run_id in run_ids]
    listing = httpx.get(f"{url}/api/v1/runs?project=broker-restart", timeout=10)
    health = httpx.get(f"{url}/healthz", timeout=10)
    time.sleep(1)
    private_redis.start()
    restarted_at = time.monotonic()
    assert queued_cells(private_redis, queue) == 0  # the restart really lost them

    assert [r.status_code for r in reads] == [200, 200]
    assert listing.status_code == 200 and len(listing.json()["items"]) == 2
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert health.json()["broker"].startswith("unavailable")
    assert health.json()["database"] == "ok"

    def all_finished() -> bool:
        session.expire_all()
        return all(session.get(Run, run_id).status in ("done", "failed")  # type: ignore[union-attr]
                   for run_id in run_ids)

    wait_for(all_finished, 120, "every run to finish after the restart", interval=0.5,
             on_timeout=lambda: procs.log("worker") + procs.log("beat"))
    recovered = time.monotonic() - restarted_at

    for run_id in run_ids:
        run = session.get(Run, run_id)
        assert run is not None
        assert (run.status, run.verdict) == ("done", "pass"), [c.error for c in run.cells]
        for cell in run.cells:
            assert cell.status == "done"
            assert session.scalar(select(func.count()).select_from(Result)
                                  .where(Result.cell_id == cell.id)) == 1
    # the reconciler, not luck, sent them again
    assert "reconciler: re-queued" in procs.log("maintenance", tail=10**7)
    assert procs.alive("worker") and procs.alive("beat") and procs.alive("api")
    print(f"\nRedis restart with {waiting} cells queued: every run finished "
          f"{recovered:.1f}s after Redis was back (reconcile_after {RECONCILE_AFTER_S}s, "
          "sweep every 2s)")
