"""The safety net under at-least-once delivery: cells that stopped moving get moving again.

Messages can be lost (broker restarted without persistence, API committed but the broker was
down, a worker host vanished), and a worker can die in the middle of a cell. The store knows
which cells should be moving, so a periodic sweep (Celery beat) decides from SQL alone:

- never enqueued (`enqueued_at` NULL) for a minute: enqueue now.
- queued and last sent more than `reconcile_after_seconds` ago: send again (a duplicate
  message is harmless). A busy queue legitimately holds cells for hours, so a queued cell
  fails only when it has waited `max_cell_attempts` deadlines *and* no worker has started
  any cell from its queue within the last deadline ("no worker consumes queue X").
- running, not updated for `reconcile_after_seconds`: the worker is presumed lost; put back
  to queued and send again while `attempts < max_cell_attempts`, else fail with the reason.
- an ingested result nobody judged for a minute (the API process died between the commit
  and its background judging): judge it now (app.services.results.judge_pending_ingests).
- a webhook delivery still pending and untouched for longer than its longest legitimate
  wait (the backoff cap plus a request timeout plus a minute): its dispatch was lost (broker
  down at commit time, the process died, a retry message vanished); dispatch it again
  (app.services.webhooks.dispatch). Each attempt counts on the row, so a re-dispatched
  delivery still stops after `webhook_max_retries` retries in all.

Re-sending is safe because the task body is idempotent. Keep `reconcile_after_seconds`
above the longest cell (`cell_timeout_seconds` plus an environment build), or a slow cell
that is still running gets a second, wasted run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from sqlalchemy import func, or_, select

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.config import Settings
    from app.models import Cell

log = logging.getLogger(__name__)

# A cell the API has just committed but not yet sent must not be sent twice.
NEVER_ENQUEUED_GRACE_S = 60.0


@dataclass
class ReconcileReport:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    judged_runs: list[int] = field(default_factory=list)
    redispatched_deliveries: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"requeued": len(self.requeued), "failed": len(self.failed),
                "judged_runs": len(self.judged_runs),
                "redispatched_deliveries": len(self.redispatched_deliveries)}


Enqueue = Callable[[Sequence[tuple[int, str]]], None]
DispatchDeliveries = Callable[[Sequence[int]], None]


def stale_delivery_seconds(settings: Settings) -> float:
    """How long a pending delivery may sit untouched before its dispatch counts as lost: a
    delivery waiting out its retry backoff (at most the cap) is not lost."""
    return (settings.webhook_backoff_max_seconds + settings.webhook_timeout_seconds
            + NEVER_ENQUEUED_GRACE_S)


def reconcile(
    *,
    now: datetime | None = None,
    settings: Settings | None = None,
    enqueue: Enqueue | None = None,
    dispatch_deliveries: DispatchDeliveries | None = None,
) -> ReconcileReport:
    """One sweep; commits its decisions, then sends the re-queued cells via `enqueue` and
    the lost webhook deliveries via `dispatch_deliveries` (default: the configured
    executor, as after a regression's commit)."""
    from app.config import get_settings
    from app.db import session_scope

    settings = settings or get_settings()
    now = now or datetime.now(timezone.utc)
    if enqueue is None:
        from workers.dispatch import enqueue_cells

        def enqueue(cells: Sequence[tuple[int, str]]) -> None:
            enqueue_cells(cells, settings)
    if dispatch_deliveries is None:
        from app.services.webhooks import dispatch

        def dispatch_deliveries(ids: Sequence[int]) -> None:
            dispatch(ids, settings)
    with session_scope(settings) as session:
        report, to_send = _decide(session, settings, now)
        report.redispatched_deliveries = _lost_deliveries(session, settings, now)
    if to_send:
        enqueue(to_send)
    if report.redispatched_deliveries:
        dispatch_deliveries(report.redispatched_deliveries)
    if report.requeued or report.failed or report.judged_runs or report.redispatched_deliveries:
        log.info("reconciler: re-queued %s, failed %s, judged ingest runs %s, "
                 "re-dispatched webhook deliveries %s", report.requeued, report.failed,
                 report.judged_runs, report.redispatched_deliveries)
    return report


def _lost_deliveries(session: Session, settings: Settings, now: datetime) -> list[int]:
    """Pending deliveries untouched for too long; marked as touched now, so the next sweep
    waits another full period before sending them again."""
    from app.models import WebhookDelivery

    cutoff = now - timedelta(seconds=stale_delivery_seconds(settings))
    lost = session.scalars(
        select(WebhookDelivery)
        .where(WebhookDelivery.status == "pending", WebhookDelivery.updated_at < cutoff)
        .order_by(WebhookDelivery.id)
        .with_for_update(skip_locked=True)
    ).all()
    for delivery in lost:
        delivery.updated_at = now
    session.flush()
    return [d.id for d in lost]


def _decide(
    session: Session, settings: Settings, now: datetime
) -> tuple[ReconcileReport, list[tuple[int, str]]]:
    from app.models import Cell
    from app.services.results import judge_pending_ingests
    from app.services.runs import fail_cell, finish_run_if_complete

    after = timedelta(seconds=settings.reconcile_after_seconds)
    grace = timedelta(seconds=NEVER_ENQUEUED_GRACE_S)
    report = ReconcileReport()
    to_send: list[tuple[int, str]] = []
    stuck = session.scalars(
        select(Cell)
        .where(
            or_(
                (Cell.status == "queued") & Cell.enqueued_at.is_(None)
                & (Cell.created_at < now - grace),
                (Cell.status == "queued") & (Cell.enqueued_at < now - after),
                (Cell.status == "running") & (Cell.updated_at < now - after),
            )
        )
        .order_by(Cell.id)
        .with_for_update(skip_locked=True)
    ).all()
    queues = {c.queue for c in stuck if c.status == "queued"}
    # A worker shows it consumes a queue by starting its cells, and while one cell runs
    # long (an adaptive cell adds processes) by its heartbeat: the cell's updated_at moves
    # after every benchmark process. Either counts as the queue's last sign of life.
    last_start = {q: _last_activity(session, q) for q in sorted(queues)}
    runs_touched: set[int] = set()
    for cell in stuck:
        reason = _give_up_reason(cell, settings, now, after, last_start.get(cell.queue))
        if reason is not None:
            fail_cell(session, cell.id, reason)
            report.failed.append(cell.id)
            runs_touched.add(cell.run_id)
            continue
        if cell.status == "running":
            cell.error = (
                f"attempt {cell.attempts} lost: no progress for "
                f"{settings.reconcile_after_seconds} s; sent again"
            )
        cell.status = "queued"
        cell.enqueued_at = now
        cell.updated_at = now
        to_send.append((cell.id, cell.queue))
        report.requeued.append(cell.id)
    session.flush()
    for run_id in sorted(runs_touched):
        finish_run_if_complete(session, run_id, settings=settings)
    report.judged_runs = judge_pending_ingests(session, older_than_s=NEVER_ENQUEUED_GRACE_S,
                                               now=now)
    return report, to_send


def _last_activity(session: Session, queue: str) -> datetime | None:
    from app.models import Cell

    started = session.scalar(select(func.max(Cell.started_at)).where(Cell.queue == queue))
    beat = session.scalar(select(func.max(Cell.updated_at))
                          .where(Cell.queue == queue, Cell.status == "running"))
    return max((t for t in (started, beat) if t is not None), default=None)


def _give_up_reason(
    cell: Cell, settings: Settings, now: datetime, after: timedelta,
    queue_last_start: datetime | None,
) -> str | None:
    limit = settings.max_cell_attempts
    if cell.status == "running" and cell.attempts >= limit:
        return (
            f"gave up after {cell.attempts} attempts: the last one made no progress for "
            f"{settings.reconcile_after_seconds} s (worker lost or stuck)"
        )
    queue_idle = queue_last_start is None or queue_last_start < now - after
    if cell.status == "queued" and queue_idle and cell.created_at < now - after * limit:
        return (
            f"no worker consumes queue {cell.queue!r}: the cell waited "
            f"{settings.reconcile_after_seconds * limit} s and no cell of that queue started "
            f"in the last {settings.reconcile_after_seconds} s"
        )
    return None
