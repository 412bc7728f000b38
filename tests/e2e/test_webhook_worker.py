"""A regression notification through the real path: commit -> Redis -> a Celery worker
process -> a local HTTP receiver that fails twice, the worker retrying with backoff."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.models import Project, Regression, WebhookDelivery
from app.schemas import ResultIngest
from app.services.results import ingest_result, judge_ingested
from tests.app.detection_docs import body, measured
from tests.receiver import Receiver

BROKER = "redis://127.0.0.1:6379/0"


def test_a_worker_retries_a_flaky_receiver_until_delivered(
    settings: Settings, session: Session, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    queue = f"cpu-hooks-{secrets.token_hex(4)}"
    receiver = Receiver(failures=2)
    env = {
        "SPEEDWATCH_BROKER_URL": BROKER, "SPEEDWATCH_EXECUTOR": "celery",
        "SPEEDWATCH_CPU_QUEUE": queue, "SPEEDWATCH_WEBHOOK_QUEUE": f"{queue}-hooks",
        "SPEEDWATCH_WEBHOOKS": json.dumps([{"url": receiver.url, "kind": "json"}]),
        "SPEEDWATCH_WEBHOOK_MAX_RETRIES": "3", "SPEEDWATCH_WEBHOOK_BACKOFF_SECONDS": "0.2",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    live = get_settings()
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--queues", f"{queue}-hooks",
             "--concurrency", "1"],
            env={**os.environ}, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
    project = f"hooks-{secrets.token_hex(4)}"
    try:
        for speedup, revision in ((2.0, "v1"), (1.6, "v2")):
            stored, _ = ingest_result(session, ResultIngest(**body(
                measured(speedup), revision, project=project)), live)
            session.commit()
            judge_ingested(stored.run_id, live)  # the opened event is sent after its commit
        deadline = time.monotonic() + 90
        while True:
            session.expire_all()
            delivery = session.scalars(
                select(WebhookDelivery)
                .join(Regression, Regression.id == WebhookDelivery.regression_id)
                .join(Project, Project.id == Regression.project_id)
                .where(Project.name == project)
            ).first()
            if delivery is not None and delivery.status != "pending":
                break
            assert worker.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=20)
        receiver.close()
        client = redis.Redis.from_url(BROKER)
        client.delete(f"{queue}-hooks")
        client.close()
    assert (delivery.status, delivery.attempt) == ("delivered", 3)
    assert [a["status_code"] for a in delivery.attempts_log] == [500, 500, 200]
    assert receiver.bodies[-1]["event"] == "regression.opened"
