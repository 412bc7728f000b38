"""A webhook receiver that hangs or is down: deliveries retry with backoff, and benchmark
cells never wait for them.

Real processes: the API opens a regression from two posted results and sends one delivery
per configured webhook to the webhook queue; a webhook worker posts them, a cell worker
measures a run triggered while one receiver holds its request open. (The flaky receiver
that succeeds on the third try is in tests/e2e/test_webhook_worker.py; 4xx, Slack payloads
and the local executor's thread are in tests/workers/test_webhooks.py.)
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Project, Regression, Run, WebhookDelivery
from tests.app.detection_docs import body, measured
from tests.faults.infra import PrivateRedis, Processes, wait_for
from tests.receiver import Receiver
from tests.workers.helpers import tiny_request
from tests.workers.test_webhooks import closed_port_url

pytestmark = pytest.mark.slow

RETRIES = 3
BACKOFF_S = 0.4


def test_hanging_and_down_receivers_never_hold_up_cells_and_retries_back_off(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    session: Session, queue: str, token: str,
) -> None:
    hanging = Receiver(hold=True)
    down = closed_port_url()
    hooks_queue = base_env["SPEEDWATCH_WEBHOOK_QUEUE"]
    procs.env = {
        **base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
        "SPEEDWATCH_WEBHOOKS": json.dumps([{"url": hanging.url}, {"url": down}]),
        "SPEEDWATCH_WEBHOOK_MAX_RETRIES": str(RETRIES),
        "SPEEDWATCH_WEBHOOK_BACKOFF_SECONDS": str(BACKOFF_S),
        "SPEEDWATCH_WEBHOOK_TIMEOUT_SECONDS": "120",
    }
    headers = {"Authorization": f"Bearer {token}"}
    try:
        url = procs.serve()
        procs.worker("cells", queue)
        procs.worker("hooks", hooks_queue, concurrency=2)
        for speedup, revision in ((2.0, "v1"), (1.6, "v2")):  # 20% slower: a regression
            response = httpx.post(f"{url}/api/v1/results", headers=headers, timeout=30,
                                  json=body(measured(speedup), revision, project="hooks"))
            assert response.status_code == 201, response.text
        assert hanging.holding.wait(timeout=60), procs.log("hooks")

        triggered = time.monotonic()
        response = httpx.post(f"{url}/api/v1/runs", headers=headers, timeout=30,
                              json=tiny_request(project="hooks-cells"))
        assert response.status_code == 201, response.text
        run_id = int(response.json()["id"])

        def run_finished() -> bool:
            session.expire_all()
            run = session.get(Run, run_id)
            return run is not None and run.status in ("done", "failed")

        wait_for(run_finished, 90, "the run to finish while the receiver hangs",
                 on_timeout=lambda: procs.log("cells"))
        cell_latency = time.monotonic() - triggered
        assert hanging.holding.is_set(), "the receiver must still hold the first delivery"

        def deliveries() -> dict[str, WebhookDelivery]:
            session.expire_all()
            rows = session.scalars(
                select(WebhookDelivery)
                .join(Regression, Regression.id == WebhookDelivery.regression_id)
                .join(Project, Project.id == Regression.project_id)
                .where(Project.name == "hooks")).all()
            return {row.url: row for row in rows}

        wait_for(lambda: deliveries()[down].status == "failed", 60,
                 "the delivery to the receiver that is down to give up",
                 on_timeout=lambda: procs.log("hooks"))
        hanging.release.set()
        wait_for(lambda: deliveries()[hanging.url].status == "delivered", 30,
                 "the hanging receiver's delivery to complete once released")
    finally:
        hanging.close()

    assert session.get(Run, run_id).status == "done"  # type: ignore[union-attr]
    rows = deliveries()
    gone = rows[down]
    assert gone.attempt == RETRIES + 1 and gone.status_code is None
    assert all("ConnectError" in (a["error"] or "") for a in gone.attempts_log)
    at = [datetime.fromisoformat(a["at"]) for a in gone.attempts_log]
    gaps = [(later - earlier).total_seconds()
            for earlier, later in itertools.pairwise(at)]
    for n, gap in enumerate(gaps):  # backoff * 2**n before retry n+1
        assert gap >= BACKOFF_S * 2 ** n * 0.9, gaps
    assert (rows[hanging.url].attempt, rows[hanging.url].status_code) == (1, 200)
    assert hanging.bodies[0]["event"] == "regression.opened"
    print(f"\nwith a receiver hanging, a triggered run finished in {cell_latency:.1f}s; "
          f"retries to a receiver that is down came after {', '.join(f'{g:.2f}' for g in gaps)}s")
