"""The safety net under at-least-once delivery: cells that stopped moving get moving again.

Messages can be lost (broker restarted without persistence, API committed but the broker was
down, a worker host vanished), and a worker can die in the middle of a cell. The store knows
which cells should be moving, so a periodic sweep (Celery beat) decides from SQL alone:

- never enqueued (`enqueued_at` NULL) for a minute: enqueue now.
- queued and last sent more than `reconcile_after_seconds` ago: send again (a duplicate
  message is harmless). A busy queue legitimately holds cells for hours, so a queued cell
  fails only when it was sent, has waited `max_cell_attempts` deadlines, *and* no worker
  of its queue was alive within the last deadline ("no worker consumes queue X"). Alive
  is what the workers say: their heartbeats (app.services.workers), or a cell of the
  queue starting or beating. A cell the broker never took is not failed for want of a
  worker, however long the broker is away: it is sent when the broker is back.
- a send that fails (broker down) leaves the unsent cells marked "never enqueued", so the
  next sweep tries again instead of waiting a deadline, and nothing counts it as sent.
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

from sqlalchemy import func, or_, select, update

from app.services.workers import is_direct_queue

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
    unsent: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"requeued": len(self.requeued), "failed": len(self.failed),
                "judged_runs": len(self.judged_runs),
                "redispatched_deliveries": len(self.redispatched_deliveries),
                "unsent": len(self.unsent)}


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
    from app.services.workers import forget_old

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
        forget_old(session, settings, now)
    if to_send:
        try:
            enqueue(to_send)
        except Exception as exc:  # the broker is away: these cells were not sent
            unsent = getattr(exc, "unsent", None)
            report.unsent = [c for c, _ in to_send] if unsent is None else list(unsent)
            _mark_unsent(settings, report.unsent)
            log.warning("reconciler: %d cells not sent (%s); sent when the broker is back",
                        len(report.unsent), exc)
    if report.redispatched_deliveries:
        dispatch_deliveries(report.redispatched_deliveries)
    if report.requeued or report.failed or report.judged_runs or report.redispatched_deliveries:
        # "requeued" counts decisions; `unsent` says which of them the broker refused
        log.info("reconciler: re-queued %s, failed %s, judged ingest runs %s, "
                 "re-dispatched webhook deliveries %s", report.requeued, report.failed,
                 report.judged_runs, report.redispatched_deliveries)
    return report


def _mark_unsent(settings: Settings, cell_ids: Sequence[int]) -> None:
    """Cells the broker did not take are "never enqueued" again: the next sweep sends them,
    and the give-up rule (which needs a cell that was sent) leaves them alone."""
    from app.db import session_scope
    from app.models import Cell

    if not cell_ids:
        return
    try:
        with session_scope(settings) as session:
            session.execute(update(Cell).where(Cell.id.in_(list(cell_ids)),
                                               Cell.status == "queued")
                            .values(enqueued_at=None))
    except Exception as exc:  # the store went too: the cells stay marked sent, and the
        # next sweep after a deadline sends them again, as for a lost message
        log.warning("reconciler: unsent cells %s not marked: %s", list(cell_ids), exc)


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
    # A short deadline (tests, impatient deployments) shortens the grace with it.
    grace = timedelta(seconds=min(NEVER_ENQUEUED_GRACE_S, settings.reconcile_after_seconds))
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
    last_seen = {q: _queue_last_seen(session, q, settings, now) for q in sorted(queues)}
    runs_touched: set[int] = set()
    for cell in stuck:
        reason = _give_up_reason(cell, settings, now, after, last_seen.get(cell.queue))
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


def _queue_last_seen(session: Session, queue: str, settings: Settings,
                     now: datetime) -> datetime | None:
    """The queue's last sign of a consumer: a worker's heartbeat announcing it, a cell of
    it starting, or a running cell's own heartbeat (updated after every benchmark process,
    so one long adaptive cell keeps its queue alive)."""
    from app.models import Cell
    from app.services.workers import queue_last_seen

    started = session.scalar(select(func.max(Cell.started_at)).where(Cell.queue == queue))
    beat = session.scalar(select(func.max(Cell.updated_at))
                          .where(Cell.queue == queue, Cell.status == "running"))
    announced = queue_last_seen(session, queue, settings, now)
    return max((t for t in (started, beat, announced) if t is not None), default=None)


def _give_up_reason(
    cell: Cell, settings: Settings, now: datetime, after: timedelta,
    queue_last_seen: datetime | None,
) -> str | None:
    limit = settings.max_cell_attempts
    if cell.status == "running" and cell.attempts >= limit:
        return (
            f"gave up after {cell.attempts} attempts: the last one made no progress for "
            f"{settings.reconcile_after_seconds} s (worker lost or stuck)"
        )
    if cell.status == "queued" and cell.queue not in settings.queue_names() \
            and not is_direct_queue(cell.queue):  # a worker's own queue: it declares it
        # No send can ever succeed from here, and retrying it every sweep would only hide
        # the configuration change that removed the queue.
        return (f"queue {cell.queue!r} is not configured on this server any more "
                f"(configured: {', '.join(settings.queue_names())})")
    if cell.status != "queued" or cell.enqueued_at is None:
        return None  # never taken by the broker: nothing to say about its workers yet
    queue_dead = queue_last_seen is None or queue_last_seen < now - after
    if queue_dead and cell.created_at < now - after * limit:
        seen = ("no worker of it has ever announced itself" if queue_last_seen is None
                else f"none was alive since {queue_last_seen:%Y-%m-%d %H:%M:%S} UTC")
        return (
            f"no worker consumes queue {cell.queue!r}: {seen} (at least "
            f"{settings.reconcile_after_seconds} s), and the cell, sent to it, waited "
            f"{int((now - cell.created_at).total_seconds())} s"
        )
    return None
