"""Regression notifications against a real local HTTP receiver: retries with backoff, each
attempt logged, a receiver that is down ends failed, payloads in both shapes."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.models import WebhookDelivery
from app.services.webhooks import deliver_with_retries
from devkit.factories import bearer
from devkit.ports import free_port
from tests.app.detection_docs import body, measured
from tests.receiver import Receiver
from workers.tasks import deliver_webhook


@pytest.fixture(autouse=True)
def _empty_tables(clean_db: None) -> None:
    return None


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/hook"


def hooked(monkeypatch: pytest.MonkeyPatch, hooks: list[dict[str, str]],
           retries: int = 2) -> Settings:
    """Process settings with these webhooks and a backoff short enough for a test."""
    monkeypatch.setenv("SPEEDWATCH_WEBHOOKS", json.dumps(hooks))
    monkeypatch.setenv("SPEEDWATCH_WEBHOOK_MAX_RETRIES", str(retries))
    monkeypatch.setenv("SPEEDWATCH_WEBHOOK_BACKOFF_SECONDS", "0.01")
    get_settings.cache_clear()
    return get_settings()


def open_regression(client: TestClient, token: str) -> None:
    for speedup, revision, kernels in ((2.0, "v1", 58), (1.6, "v2", 161)):
        document = body(measured(speedup, evidence={"kernels_per_inference": kernels}),
                        revision)
        response = client.post("/api/v1/results", json=document, headers=bearer(token))
        assert response.status_code == 201, response.text


def deliveries(session: Session) -> list[WebhookDelivery]:
    session.expire_all()
    return list(session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def test_a_flaky_receiver_gets_it_after_two_retries_each_attempt_logged(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, client: TestClient,
    ci_token: str, session: Session,
) -> None:
    receiver = Receiver(failures=2)
    try:
        hooked(monkeypatch, [{"url": receiver.url, "kind": "json"}], retries=3)
        open_regression(client, ci_token)
        (pending,) = deliveries(session)
        assert pending.status == "pending" and pending.event == "opened"  # executor none
        deliver_webhook.apply(args=[pending.id])
    finally:
        receiver.close()
    (done,) = deliveries(session)
    assert (done.status, done.attempt, done.status_code) == ("delivered", 3, 200)
    assert [a["status_code"] for a in done.attempts_log] == [500, 500, 200]
    assert done.attempts_log[0]["error"].startswith("HTTP 500")
    assert len(receiver.bodies) == 3
    payload = receiver.bodies[-1]
    assert payload["event"] == "regression.opened"
    assert payload["regression"]["evidence"] == "kernels per inference 58 -> 161"
    assert payload["regression"]["magnitude"] == pytest.approx(-0.2, abs=0.01)


def test_a_receiver_that_is_down_fails_after_the_last_retry(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, client: TestClient,
    ci_token: str, session: Session,
) -> None:
    hooked(monkeypatch, [{"url": closed_port_url(), "kind": "json"}], retries=2)
    open_regression(client, ci_token)
    (pending,) = deliveries(session)
    deliver_webhook.apply(args=[pending.id])
    (failed,) = deliveries(session)
    assert (failed.status, failed.attempt, failed.status_code) == ("failed", 3, None)
    assert "ConnectError" in (failed.error or "")
    assert len(failed.attempts_log) == 3
    # a redelivered task for a finished delivery changes nothing
    assert deliver_webhook.apply(args=[pending.id]).get() == "gone"
    assert deliveries(session)[0].attempt == 3


def test_a_4xx_is_not_retried_and_slack_gets_text(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, client: TestClient,
    ci_token: str, session: Session,
) -> None:
    receiver = Receiver(failures=1, status=400)
    try:
        live = hooked(monkeypatch, [{"url": receiver.url, "kind": "slack"}], retries=3)
        open_regression(client, ci_token)
        (pending,) = deliveries(session)
        assert deliver_with_retries(pending.id, live) == "failed"
    finally:
        receiver.close()
    (refused,) = deliveries(session)
    assert (refused.attempt, refused.status_code) == (1, 400)
    (payload,) = receiver.bodies
    assert set(payload) == {"text"}
    assert "regression" in payload["text"] and "opened" in payload["text"]
    assert "What changed: kernels per inference 58 -> 161" in payload["text"]


def test_recovery_sends_a_resolved_event_through_the_local_executor_thread(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, client: TestClient,
    ci_token: str, session: Session,
) -> None:
    receiver = Receiver()
    try:
        hooked(monkeypatch, [{"url": receiver.url, "kind": "json"}])
        open_regression(client, ci_token)
        monkeypatch.setenv("SPEEDWATCH_EXECUTOR", "local")
        get_settings.cache_clear()
        response = client.post("/api/v1/results", json=body(measured(2.0), "v3"),
                               headers=bearer(ci_token))
        assert response.status_code == 201
        deadline = time.monotonic() + 30  # the thread posts after the commit; wait for it
        while time.monotonic() < deadline:  # (seconds on 2 busy cores, not milliseconds)
            if any(d.status != "pending" for d in deliveries(session)[1:]):
                break
            threading.Event().wait(0.05)
    finally:
        receiver.close()
    opened, resolved = deliveries(session)
    assert (opened.event, opened.status) == ("opened", "pending")  # recorded under "none"
    assert (resolved.event, resolved.status) == ("resolved", "delivered"), (
        resolved.attempt, resolved.attempts_log, receiver.bodies)
    assert receiver.bodies[-1]["event"] == "regression.resolved"
    assert receiver.bodies[-1]["regression"]["status"] == "resolved"


def test_deliveries_are_sent_after_the_outermost_commit_not_a_savepoints_release(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, client: TestClient,
    ci_token: str, session: Session,
) -> None:
    """Judging records deliveries inside a SAVEPOINT, and SQLAlchemy reports a savepoint's
    release as a commit: sending then hands the sender a row nobody can see yet."""
    from app.db import session_scope
    from app.models import Regression
    from app.services import webhooks

    hooked(monkeypatch, [{"url": closed_port_url(), "kind": "json"}])
    open_regression(client, ci_token)
    regression_id = session.scalars(select(Regression.id)).one()
    sent: list[list[int]] = []
    monkeypatch.setattr(webhooks, "dispatch", lambda ids, _settings: sent.append(list(ids)))

    with session_scope(settings) as own:
        with own.begin_nested():
            ids = webhooks.record_deliveries(own, [(regression_id, "resolved")])
        assert sent == []  # the savepoint is released; nothing is committed yet
        savepoint = own.begin_nested()
        webhooks.record_deliveries(own, [(regression_id, "resolved")])
        savepoint.rollback()  # this savepoint only: its delivery goes, the first one stays
        assert sent == []

    assert sent == [[*ids, ids[0] + 1]]
    visible = {d.id for d in deliveries(session)}
    assert ids[0] in visible and ids[0] + 1 not in visible
