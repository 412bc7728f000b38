"""Regression notifications: one logged delivery per event and configured webhook.

The delivery rows are written in the same transaction that opens or resolves the
regression, so an event is never lost and never announced before it is committed. Only
after the commit are their ids handed to the executor (Celery task on the webhook queue,
which its own worker consumes, reached through app.ports; a thread of the local executor;
or nobody for "none"), so posting to a slow webhook never holds up a result, nor a worker
that measures cells.

Each attempt is one POST; a connection error or a 5xx answer is worth retrying (with
exponential backoff, up to `webhook_max_retries`), a 4xx is not (the receiver refuses the
payload; sending it again will not change that). Every attempt is logged on the row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Literal

import httpx
from sqlalchemy.orm import Session

from app import ports
from app.config import Settings, get_settings
from app.models import Regression, WebhookDelivery
from app.services import after_commit

log = logging.getLogger(__name__)

PENDING_DELIVERIES = "webhook deliveries"  # the after-commit key of deliveries
Outcome = Literal["delivered", "retry", "failed", "gone"]
MAX_ERROR_CHARS = 1000


def record_deliveries(
    session: Session, events: Sequence[tuple[int, str]], settings: Settings | None = None
) -> list[int]:
    """Insert one pending delivery per (regression id, event) and webhook; ids are sent
    to the executor after the session commits."""
    settings = settings or get_settings()
    if not settings.webhooks or not events:
        return []
    rows = [
        WebhookDelivery(regression_id=regression_id, event=name, url=hook.url, kind=hook.kind,
                        attempt=0, status="pending", attempts_log=[])
        for regression_id, name in events for hook in settings.webhooks
    ]
    session.add_all(rows)
    session.flush()
    ids = [row.id for row in rows]
    after_commit.send_after_commit(session, PENDING_DELIVERIES, ids, _dispatch_committed)
    return ids


def _dispatch_committed(delivery_ids: list[int], settings: Settings) -> None:
    dispatch(delivery_ids, settings)  # looked up when sent: tests replace `dispatch`


def dispatch(delivery_ids: Sequence[int], settings: Settings) -> None:
    """Hand committed deliveries to the executor; never raises (they stay pending).

    The local executor's thread runs here, in this process; the broker is reached through
    the delivery queue the worker package wired into app.ports."""
    if settings.executor == "none":
        return  # record only
    try:
        if settings.executor == "local":
            thread = threading.Thread(
                target=_deliver_all, args=(list(delivery_ids), settings),
                name="speedwatch-webhooks", daemon=True)
            thread.start()
            return
        ports.delivery_queue().send(delivery_ids, settings)
    except Exception as exc:  # broker down: the rows stay pending, the event is not lost
        log.warning("webhook deliveries %s not dispatched: %s", list(delivery_ids), exc)


def _deliver_all(delivery_ids: list[int], settings: Settings) -> None:
    for delivery_id in delivery_ids:
        try:
            deliver_with_retries(delivery_id, settings)
        except Exception:  # a thread must not die silently on one bad delivery
            log.exception("webhook delivery %s", delivery_id)


def backoff_seconds(attempt: int, settings: Settings) -> float:
    """Wait before retry number `attempt` (1-based): backoff * 2**(attempt-1), capped."""
    return float(min(settings.webhook_backoff_max_seconds,
                     settings.webhook_backoff_seconds * 2 ** max(0, attempt - 1)))


def deliver_with_retries(delivery_id: int, settings: Settings) -> Outcome:
    """Attempt until delivered or out of retries, sleeping the backoff in between (the
    local executor's thread; the Celery task schedules its retries instead)."""
    retries = 0
    while True:
        outcome = attempt_delivery(delivery_id, settings,
                                   final=retries >= settings.webhook_max_retries)
        if outcome != "retry":
            return outcome
        retries += 1
        time.sleep(backoff_seconds(retries, settings))


def attempt_delivery(delivery_id: int, settings: Settings, *, final: bool) -> Outcome:
    """One POST of the delivery's payload, logged on its row.

    Returns "delivered", "failed" (4xx, or a retryable failure on the `final` attempt),
    "retry" (connection error or 5xx with retries left) or "gone" (unknown id, or a
    delivery that already finished: a redelivered task does nothing).
    """
    from app.db import session_scope

    with session_scope(settings) as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        if delivery is None or delivery.status != "pending":
            return "gone"
        regression = session.get(Regression, delivery.regression_id)
        if regression is None:
            return "gone"
        payload = build_payload(regression, delivery.event, delivery.kind)
        url = delivery.url
        attempt = delivery.attempt + 1
    # The row's count, not the caller's: a delivery the reconciler re-dispatched starts a
    # new Celery task (retries 0) but must not get a fresh set of retries.
    final = final or attempt > settings.webhook_max_retries

    status_code: int | None = None
    error: str | None = None
    try:
        response = httpx.post(url, json=payload, timeout=settings.webhook_timeout_seconds)
        status_code = response.status_code
        if status_code >= 400:
            error = f"HTTP {status_code}: {response.text[:200]}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]

    retryable = error is not None and (status_code is None or status_code >= 500)
    outcome: Outcome
    if error is None:
        outcome = "delivered"
    elif retryable and not final:
        outcome = "retry"
    else:
        outcome = "failed"
    with session_scope(settings) as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        if delivery is None:
            return "gone"
        delivery.attempt = attempt
        delivery.status_code = status_code
        delivery.error = error
        delivery.status = "pending" if outcome == "retry" else outcome
        delivery.attempts_log = [*delivery.attempts_log, {
            "attempt": attempt, "at": datetime.now(timezone.utc).isoformat(),
            "status_code": status_code, "error": error,
        }]
    log.info("webhook delivery %s attempt %s: %s", delivery_id, attempt, outcome)
    return outcome


def build_payload(regression: Regression, event_name: str, kind: str) -> dict[str, Any]:
    """The generic JSON document, or Slack's {"text": ...} with the same facts in words."""
    magnitude = (f"{regression.magnitude * 100:+.1f}%" if regression.magnitude is not None
                 else "accuracy")
    if kind == "slack":
        verb = "opened" if event_name == "opened" else "resolved"
        lines = [
            f"Speedwatch regression {regression.id} {verb}: {regression.series.key} "
            f"({regression.project.name}), speedup {magnitude} against "
            f"{regression.baseline_description}",
        ]
        if regression.evidence:
            lines.append(f"What changed: {regression.evidence}")
        return {"text": "\n".join(lines)}
    return {
        "event": f"regression.{event_name}",
        "regression": {
            "id": regression.id,
            "project": regression.project.name,
            "series_key": regression.series.key,
            "status": regression.status,
            "magnitude": regression.magnitude,
            "baseline": regression.baseline_description,
            "evidence": regression.evidence,
            "reasons": list(regression.reasons or []),
            "opened_by_run_id": regression.opened_by_run_id,
            "resolved_by_result_id": regression.resolved_by_result_id,
        },
    }
