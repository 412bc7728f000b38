"""The reconciler decides from SQL alone which cells stopped moving, and moves them.

Time is passed in (`now=`) instead of slept through; sends are collected by the `enqueue`
callable the reconciler takes, and one test sends through the real broker.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db import session_scope
from app.models import Cell, WebhookDelivery
from app.schemas import ResultIngest
from app.services.results import ingest_result
from app.services.workers import Announcement, direct_queue, heartbeat
from devkit.factories import bearer
from tests.app.detection_docs import body, measured
from tests.workers.helpers import new_run, reload_run
from workers.dispatch import DispatchError
from workers.reconciler import NEVER_ENQUEUED_GRACE_S, reconcile, stale_delivery_seconds
from workers.tasks import deliver_webhook

pytestmark = pytest.mark.usefixtures("clean_db")


class Sent:
    """Collects what the reconciler hands to the executor."""

    def __init__(self) -> None:
        self.cells: list[tuple[int, str]] = []

    def __call__(self, cells: Sequence[tuple[int, str]]) -> None:
        self.cells.extend(cells)


def _set(session: Session, cell_id: int, **values: object) -> None:
    cell = session.get(Cell, cell_id)
    assert cell is not None
    for key, value in values.items():
        setattr(cell, key, value)
    session.commit()


def _later(settings: Settings, factor: float = 1.0, extra_s: float = 5.0) -> datetime:
    return datetime.now(timezone.utc) + timedelta(
        seconds=settings.reconcile_after_seconds * factor + extra_s
    )


def test_a_running_cell_that_stopped_moving_is_queued_and_sent_again(
    session: Session, settings: Settings
) -> None:
    _, [cell_id] = new_run(session, settings)
    now = datetime.now(timezone.utc)
    _set(session, cell_id, status="running", attempts=1, started_at=now, enqueued_at=now)
    sent = Sent()

    report = reconcile(now=_later(settings), settings=settings, enqueue=sent)

    assert report.requeued == [cell_id] and report.failed == []
    assert sent.cells == [(cell_id, settings.cpu_queue)]
    session.expire_all()
    cell = session.get(Cell, cell_id)
    assert cell is not None
    assert cell.status == "queued"
    assert "attempt 1 lost" in (cell.error or "")


def test_a_running_cell_out_of_attempts_is_failed_with_the_reason_and_its_run_finishes(
    session: Session, settings: Settings
) -> None:
    run_id, [cell_id] = new_run(session, settings)
    now = datetime.now(timezone.utc)
    _set(session, cell_id, status="running", attempts=settings.max_cell_attempts,
         started_at=now, enqueued_at=now)
    sent = Sent()

    report = reconcile(now=_later(settings), settings=settings, enqueue=sent)

    assert report.failed == [cell_id] and sent.cells == []
    run = reload_run(session, run_id)
    assert run.cells[0].status == "failed"
    assert f"gave up after {settings.max_cell_attempts} attempts" in (run.cells[0].error or "")
    assert (run.status, run.verdict) == ("failed", "error")


def test_a_cell_that_is_still_within_its_deadline_is_left_alone(
    session: Session, settings: Settings
) -> None:
    _, [cell_id] = new_run(session, settings)
    now = datetime.now(timezone.utc)
    _set(session, cell_id, status="running", attempts=1, started_at=now, enqueued_at=now)
    sent = Sent()

    report = reconcile(now=_later(settings, factor=0.5), settings=settings, enqueue=sent)

    assert report.requeued == [] and report.failed == [] and sent.cells == []


def test_a_cell_never_handed_to_the_broker_is_sent_after_a_short_grace(
    session: Session, settings: Settings
) -> None:
    _, [cell_id] = new_run(session, settings)  # enqueued_at stays NULL: the broker was down
    sent = Sent()
    soon = datetime.now(timezone.utc) + timedelta(seconds=NEVER_ENQUEUED_GRACE_S / 2)
    assert reconcile(now=soon, settings=settings, enqueue=sent).requeued == []

    later = datetime.now(timezone.utc) + timedelta(seconds=NEVER_ENQUEUED_GRACE_S + 5)
    report = reconcile(now=later, settings=settings, enqueue=sent)

    assert report.requeued == [cell_id]
    assert sent.cells == [(cell_id, settings.cpu_queue)]
    session.expire_all()
    cell = session.get(Cell, cell_id)
    assert cell is not None and cell.enqueued_at is not None


def test_a_queued_cell_nobody_took_is_sent_again_and_failed_once_its_queue_looks_dead(
    session: Session, settings: Settings
) -> None:
    run_id, [cell_id] = new_run(session, settings)
    _set(session, cell_id, enqueued_at=datetime.now(timezone.utc))
    sent = Sent()

    report = reconcile(now=_later(settings), settings=settings, enqueue=sent)
    assert report.requeued == [cell_id]

    report = reconcile(now=_later(settings, factor=settings.max_cell_attempts),
                       settings=settings, enqueue=sent)
    assert report.failed == [cell_id]
    run = reload_run(session, run_id)
    assert f"no worker consumes queue {settings.cpu_queue!r}" in (run.cells[0].error or "")
    assert run.status == "failed"


def test_a_queued_cell_in_a_busy_queue_waits_however_long_it_takes(
    session: Session, settings: Settings
) -> None:
    _, [waiting, busy] = new_run(session, settings, weights=["constant", "tensor"])
    _set(session, waiting, enqueued_at=datetime.now(timezone.utc))
    late = _later(settings, factor=settings.max_cell_attempts)
    # a worker started another cell of the same queue recently: the queue is alive
    _set(session, busy, status="running", attempts=1, started_at=late - timedelta(seconds=5),
         updated_at=late - timedelta(seconds=5), enqueued_at=late)
    sent = Sent()

    report = reconcile(now=late, settings=settings, enqueue=sent)

    assert report.failed == []
    assert report.requeued == [waiting]


class BrokerDown:
    """An executor whose broker is away: every send raises, as workers.dispatch does."""

    def __init__(self) -> None:
        self.tries = 0

    def __call__(self, cells: Sequence[tuple[int, str]]) -> None:
        self.tries += 1
        raise DispatchError("message broker unavailable (ConnectionError: refused)",
                            unsent=[c for c, _ in cells])


def _announce(session: Session, queue: str, at: datetime, name: str = "w1@host") -> None:
    heartbeat(session, Announcement(name=name, host="host", pid=4242, queues=[queue]), now=at)
    session.commit()


def test_cells_the_broker_never_took_are_sent_when_it_returns_however_long_it_was_away(
    session: Session, settings: Settings
) -> None:
    """An outage of ten deadlines, swept all along: the cells are neither failed ("no
    worker consumes queue" is not what happened) nor counted as sent; the first sweep
    after the broker is back sends them."""
    run_id, [cell_id] = new_run(session, settings)  # the API could not send it
    start = datetime.now(timezone.utc)
    down = BrokerDown()
    for step in range(1, 11):
        at = start + timedelta(seconds=settings.reconcile_after_seconds * step + 61)
        report = reconcile(now=at, settings=settings, enqueue=down)
        assert report.failed == [] and report.unsent == [cell_id]
    assert down.tries == 10
    session.expire_all()
    cell = session.get(Cell, cell_id)
    assert cell is not None and (cell.status, cell.enqueued_at) == ("queued", None)

    sent = Sent()
    report = reconcile(now=start + timedelta(seconds=settings.reconcile_after_seconds * 11),
                       settings=settings, enqueue=sent)
    assert report.failed == [] and report.unsent == []
    assert sent.cells == [(cell_id, settings.cpu_queue)]
    assert reload_run(session, run_id).status == "queued"


def test_a_sent_cell_waits_as_long_as_a_worker_of_its_queue_heartbeats(
    session: Session, settings: Settings
) -> None:
    """No cell of the queue started for many deadlines (the worker is busy elsewhere, or
    the broker lost the message), but its worker says it is alive: send again, never fail."""
    _, [cell_id] = new_run(session, settings)
    _set(session, cell_id, enqueued_at=datetime.now(timezone.utc))
    late = _later(settings, factor=settings.max_cell_attempts * 3)
    _announce(session, settings.cpu_queue, at=late - timedelta(seconds=10))
    report = reconcile(now=late, settings=settings, enqueue=Sent())
    assert report.failed == [] and report.requeued == [cell_id]


def test_a_worker_of_another_queue_does_not_keep_a_queue_alive(
    session: Session, settings: Settings
) -> None:
    run_id, [cell_id] = new_run(session, settings)
    _set(session, cell_id, enqueued_at=datetime.now(timezone.utc))
    late = _later(settings, factor=settings.max_cell_attempts)
    _announce(session, "gpu", at=late - timedelta(seconds=10))
    report = reconcile(now=late, settings=settings, enqueue=Sent())
    assert report.failed == [cell_id]
    error = reload_run(session, run_id).cells[0].error or ""
    assert f"no worker consumes queue {settings.cpu_queue!r}" in error
    assert "no worker of it has ever announced itself" in error


def test_the_failure_names_when_the_queue_last_had_a_live_worker(
    session: Session, settings: Settings
) -> None:
    run_id, [cell_id] = new_run(session, settings)
    _set(session, cell_id, enqueued_at=datetime.now(timezone.utc))
    late = _later(settings, factor=settings.max_cell_attempts)
    last = late - timedelta(seconds=settings.reconcile_after_seconds + 60)
    _announce(session, settings.cpu_queue, at=last)
    report = reconcile(now=late, settings=settings, enqueue=Sent())
    assert report.failed == [cell_id]
    assert f"none was alive since {last:%Y-%m-%d %H:%M:%S} UTC" in (
        reload_run(session, run_id).cells[0].error or "")


def test_a_send_that_fails_part_way_marks_only_the_unsent_cells_unsent(
    session: Session, settings: Settings
) -> None:
    _, [first, second] = new_run(session, settings, weights=["constant", "tensor"])
    at = datetime.now(timezone.utc) + timedelta(seconds=NEVER_ENQUEUED_GRACE_S + 5)

    def half(cells: Sequence[tuple[int, str]]) -> None:
        raise DispatchError("broker went away after one", unsent=[second])

    report = reconcile(now=at, settings=settings, enqueue=half)
    assert report.unsent == [second]
    session.expire_all()
    assert session.get(Cell, first).enqueued_at is not None  # type: ignore[union-attr]
    assert session.get(Cell, second).enqueued_at is None  # type: ignore[union-attr]


def test_the_sweep_sends_through_the_configured_broker(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"cpu-reconcile-{secrets.token_hex(4)}"
    broker = "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("SPEEDWATCH_CPU_QUEUE", queue)
    monkeypatch.setenv("SPEEDWATCH_EXECUTOR", "celery")
    monkeypatch.setenv("SPEEDWATCH_BROKER_URL", broker)
    get_settings.cache_clear()
    celery_settings = get_settings()
    _, [cell_id] = new_run(session, celery_settings)
    client = redis.Redis.from_url(broker)
    try:
        report = reconcile(now=_later(celery_settings, extra_s=NEVER_ENQUEUED_GRACE_S),
                           settings=celery_settings)
        assert report.requeued == [cell_id]
        assert client.llen(queue) == 1
    finally:
        client.delete(queue)
        client.close()


def test_an_ingested_result_whose_judging_was_lost_is_judged_by_the_sweep(
    session: Session, settings: Settings
) -> None:
    """The API judges an ingested result after its response; if the process dies in
    between, the result is stored but unjudged, and the next sweep past the grace judges
    it (the run gets its verdict, the regression opens)."""
    project = f"lost-judging-{secrets.token_hex(4)}"
    run_ids = []
    for speedup, revision in ((2.0, "v1"), (1.6, "v2")):
        stored, created = ingest_result(
            session, ResultIngest(**body(measured(speedup), revision, project=project)),
            settings)
        session.commit()
        assert created
        run_ids.append(stored.run_id)
    assert [reload_run(session, r).verdict for r in run_ids] == [None, None]

    early = reconcile(now=datetime.now(timezone.utc), settings=settings, enqueue=Sent())
    assert early.judged_runs == []  # within the grace: the API may be judging right now

    report = reconcile(now=_later(settings, extra_s=NEVER_ENQUEUED_GRACE_S),
                       settings=settings, enqueue=Sent())

    assert report.judged_runs == run_ids
    assert [reload_run(session, r).verdict for r in run_ids] == ["pass", "regression"]
    again = reconcile(now=_later(settings, extra_s=NEVER_ENQUEUED_GRACE_S),
                      settings=settings, enqueue=Sent())
    assert again.judged_runs == []


# ---- webhook deliveries whose dispatch was lost -------------------------------------------

class Dispatched:
    """Collects the delivery ids the reconciler hands to the executor."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def __call__(self, ids: Sequence[int]) -> None:
        self.ids.extend(ids)


def _pending_delivery(client: TestClient, token: str, monkeypatch: pytest.MonkeyPatch,
                      url: str, **env: str) -> tuple[int, Settings]:
    """Open a regression over HTTP with one webhook configured; with executor "none" its
    delivery is committed and never dispatched, as when the broker was down at commit.
    `env` then changes the settings (SPEEDWATCH_ + upper-cased key) for the sweep."""
    monkeypatch.setenv("SPEEDWATCH_WEBHOOKS", json.dumps([{"url": url, "kind": "json"}]))
    get_settings.cache_clear()
    for speedup, revision in ((2.0, "v1"), (1.6, "v2")):
        response = client.post("/api/v1/results", json=body(measured(speedup), revision),
                               headers=bearer(token))
        assert response.status_code == 201, response.text
    for key, value in env.items():  # the settings the sweep then runs with
        monkeypatch.setenv(f"SPEEDWATCH_{key.upper()}", value)
    get_settings.cache_clear()
    with session_scope(get_settings()) as session:
        [delivery] = session.scalars(select(WebhookDelivery)).all()
        assert delivery.status == "pending" and delivery.attempt == 0
        return delivery.id, get_settings()


def _delivery(session: Session, delivery_id: int) -> WebhookDelivery:
    session.expire_all()
    delivery = session.get(WebhookDelivery, delivery_id)
    assert delivery is not None
    return delivery


def test_a_pending_delivery_whose_dispatch_was_lost_is_dispatched_again_once(
    session: Session, client: TestClient, ci_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivery_id, live = _pending_delivery(client, ci_token, monkeypatch,
                                          "http://127.0.0.1:9/hook")
    now = datetime.now(timezone.utc)
    stale = timedelta(seconds=stale_delivery_seconds(live) + 1)
    # within the longest legitimate wait (a retry's backoff) it is left alone
    waiting = Dispatched()
    reconcile(now=now + stale - timedelta(seconds=5), settings=live, enqueue=Sent(),
              dispatch_deliveries=waiting)
    assert waiting.ids == []

    lost = Dispatched()
    report = reconcile(now=now + stale, settings=live, enqueue=Sent(), dispatch_deliveries=lost)
    assert lost.ids == report.redispatched_deliveries == [delivery_id]
    assert report.as_dict()["redispatched_deliveries"] == 1
    # touched now: the next sweep waits another full period before sending it again
    again = Dispatched()
    reconcile(now=now + stale + timedelta(seconds=30), settings=live, enqueue=Sent(),
              dispatch_deliveries=again)
    assert again.ids == []
    # a finished delivery is never sent again
    _delivery(session, delivery_id).status = "failed"
    session.commit()
    finished = Dispatched()
    reconcile(now=now + 3 * stale, settings=live, enqueue=Sent(), dispatch_deliveries=finished)
    assert finished.ids == []


def test_a_redispatched_delivery_goes_through_the_broker_and_keeps_its_retry_budget(
    session: Session, client: TestClient, ci_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's default dispatch is the one used after a commit (a task on the webhook
    queue); the task it starts has retries 0, but the delivery's own attempt count caps it:
    one attempt made before the loss plus `webhook_max_retries` retries, no more."""
    queue = f"webhooks-reconcile-{secrets.token_hex(4)}"
    delivery_id, live = _pending_delivery(
        client, ci_token, monkeypatch, "http://127.0.0.1:9/hook", executor="celery",
        broker_url="redis://127.0.0.1:6379/0", webhook_queue=queue, webhook_max_retries="2",
        webhook_backoff_seconds="0.01")
    broker = redis.Redis.from_url(live.broker_url)
    try:
        report = reconcile(
            now=datetime.now(timezone.utc) + timedelta(seconds=stale_delivery_seconds(live) + 1),
            settings=live, enqueue=Sent())
        assert report.redispatched_deliveries == [delivery_id]
        assert broker.llen(queue) == 1
    finally:
        broker.delete(queue)
        broker.close()

    delivery = _delivery(session, delivery_id)
    delivery.attempt = 1  # one attempt was made before the process died
    session.commit()
    assert deliver_webhook.apply(args=[delivery_id]).get() == "failed"
    failed = _delivery(session, delivery_id)
    assert (failed.status, failed.attempt) == ("failed", 3)  # 1 + webhook_max_retries
    assert len(failed.attempts_log) == 2


def test_a_queue_whose_long_cell_keeps_its_heartbeat_is_alive(
    session: Session, settings: Settings
) -> None:
    """An adaptive cell can run longer than the deadline; its heartbeat (updated_at after
    every process) shows the queue's worker is there, so the cells waiting behind it are
    sent again, never failed with "no worker consumes queue"."""
    _, [long_id] = new_run(session, settings)
    _, [waiting_id] = new_run(session, settings, revision="v2")
    then = _later(settings, factor=settings.max_cell_attempts)
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    _set(session, long_id, status="running", attempts=1, started_at=long_ago,
         enqueued_at=long_ago, updated_at=then - timedelta(seconds=1))
    _set(session, waiting_id, enqueued_at=datetime.now(timezone.utc))

    report = reconcile(now=then, settings=settings, enqueue=Sent())
    assert report.failed == []
    assert report.requeued == [waiting_id]


def test_a_cell_on_a_queue_this_server_no_longer_has_fails_with_that_reason(
    session: Session, settings: Settings
) -> None:
    """It could never be sent from here; retried every sweep it would only hide the change
    of configuration (and, sent first, it held up every cell after it)."""
    run_id, [cell_id] = new_run(session, settings)
    _set(session, cell_id, queue="gpu-retired")
    report = reconcile(now=_later(settings, extra_s=NEVER_ENQUEUED_GRACE_S), settings=settings,
                       enqueue=Sent())
    assert report.failed == [cell_id]
    assert (reload_run(session, run_id).cells[0].error or "").startswith(
        "queue 'gpu-retired' is not configured on this server any more")


def test_a_cell_on_a_workers_own_queue_is_sent_again_not_failed_as_unconfigured(
    session: Session, settings: Settings
) -> None:
    """A worker declares its own queue itself (a confirmation on a named GPU goes there):
    it is no queue of the settings, and still routable."""
    _, [cell_id] = new_run(session, settings)
    own = direct_queue("speedwatch-gpu1-nvidia-h100@host-a")
    _set(session, cell_id, queue=own)
    sent = Sent()
    report = reconcile(now=_later(settings, extra_s=NEVER_ENQUEUED_GRACE_S), settings=settings,
                       enqueue=sent)
    assert report.failed == [] and report.requeued == [cell_id]


def test_an_unroutable_group_does_not_hold_up_the_others(
    session: Session, settings: Settings
) -> None:
    from workers.dispatch import enqueue_cells

    queue = f"cpu-route-{secrets.token_hex(4)}"
    live = settings.model_copy(update={"executor": "celery", "cpu_queue": queue,
                                       "broker_url": "redis://127.0.0.1:6379/0"})
    broker = redis.Redis.from_url(live.broker_url)
    try:
        with pytest.raises(DispatchError) as refused:
            enqueue_cells([(1, "nowhere"), (2, queue)], live)
        assert refused.value.unsent == [1]
        assert "queue(s) nowhere not configured here" in str(refused.value)
        assert broker.llen(queue) == 1
    finally:
        broker.delete(queue)
        broker.close()
