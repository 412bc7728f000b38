"""Hand committed cells to whatever executes them, chosen by `settings.executor`, and
webhook deliveries to the broker: the worker package's side of the service's ports.

The services never import this module: they send through app.ports, and `install()` wires
the implementations below into it (the app factory does so for an API process,
workers.tasks for a worker process). The API sends after its transaction commits, so a
worker never looks for a cell that is not there yet. If sending fails, the cells stay
`queued` in SQL and the reconciler sends them again; the caller gets a DispatchError to
report (503).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from app import ports

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)


class DispatchError(RuntimeError):
    """The executor could not take the cells (broker down, unknown queue); safe to show.
    `unsent`: the cell ids that did not reach the broker (all of them when unknown)."""

    def __init__(self, message: str, unsent: Sequence[int] | None = None) -> None:
        super().__init__(message)
        self.unsent = list(unsent) if unsent is not None else None


def enqueue_cells(cells: Sequence[tuple[int, str]], settings: Settings | None = None) -> None:
    """Send each `(cell_id, queue_name)`; the message carries the id only.

    `settings` defaults to the process settings; an API built with its own settings passes
    them, so the local executor writes to that API's database.
    """
    from app.config import get_settings

    settings = settings or get_settings()
    executor = settings.executor
    if not cells or executor == "none":
        return
    if executor == "local":
        from workers.local import get_local_executor

        executor_ = get_local_executor()
        for group in cell_groups(cells, settings.interleave_cells):
            executor_.submit_group(group, settings)
        return
    if executor == "celery":
        _send_celery(cells, settings)
        return
    raise DispatchError(f"executor {executor!r} is not one of celery, local, none")


def cell_groups(cells: Sequence[tuple[int, str]], size: int,
                consumers: Mapping[str, int] | None = None) -> list[list[int]]:
    """The cells of one send, grouped by queue in their order, at most `size` a group: each
    group is measured together by one worker (workers.execution.execute_cells). With
    `consumers` (live workers per queue), a queue's cells are split into that many groups
    at least, so a run spreads over every GPU of its class instead of waiting for one."""
    by_queue: dict[str, list[int]] = {}
    for cell_id, queue in cells:
        by_queue.setdefault(queue, []).append(cell_id)
    groups: list[list[int]] = []
    for queue, ids in by_queue.items():
        workers = max(1, (consumers or {}).get(queue, 1))
        step = max(1, min(size, math.ceil(len(ids) / workers)))
        if workers == 1:
            groups += [ids[i:i + step] for i in range(0, len(ids), step)]
            continue
        # over several workers, dealt round rather than cut in runs: a run's cells come
        # batch size by batch size, and the worker given only the largest would finish last
        count = math.ceil(len(ids) / step)
        groups += [ids[k::count] for k in range(count)]
    return groups


def live_consumers(settings: Settings) -> dict[str, int]:
    """Live workers per queue, from their heartbeats; {} when the store cannot say."""
    from app.db import session_scope
    from app.services.workers import list_workers

    try:
        with session_scope(settings) as session:
            counts: dict[str, int] = {}
            for worker in list_workers(session, settings):
                if worker.state == "alive" and worker.kind == "celery":
                    for queue in worker.queues:
                        counts[queue] = counts.get(queue, 0) + 1
            return counts
    except Exception as exc:  # sending must not depend on the registry
        log.warning("live workers unknown (%s): groups of up to %d cells", exc,
                    settings.interleave_cells)
        return {}


def _send_celery(cells: Sequence[tuple[int, str]], settings: Settings) -> None:
    """One message per group: a single cell as run_cell, several as run_cells, whose time
    limits are the per-cell limits times the cells it holds."""
    from celery.exceptions import QueueNotFound
    from kombu import Queue

    from app.services.workers import is_direct_queue
    from workers.celery_app import RUN_CELL_TASK, RUN_CELLS_TASK, celery_for, time_limits

    app = celery_for(settings)
    queue_of = dict(cells)

    def route(queue: str) -> str | Queue:
        # a worker's own queue is declared by that worker, not in the settings
        return Queue(queue, routing_key=queue) if is_direct_queue(queue) else queue

    soft, hard = time_limits(settings)
    groups = cell_groups(cells, settings.interleave_cells, live_consumers(settings))
    unroutable: list[int] = []
    sent = 0
    try:
        for group in groups:
            queue = queue_of[group[0]]
            try:
                if len(group) == 1:
                    app.send_task(RUN_CELL_TASK, args=[group[0]], queue=route(queue))
                else:
                    app.send_task(RUN_CELLS_TASK, args=[group], queue=route(queue),
                                  soft_time_limit=soft * len(group),
                                  time_limit=hard * len(group))
            except QueueNotFound:  # this group only: the others still go
                unroutable += group
            sent += 1
    except Exception as exc:  # kombu raises transport-specific errors; all mean "not sent"
        unsent = unroutable + [c for g in groups[sent:] for c in g]
        log.warning("enqueue failed after %d of %d cells: %s", len(cells) - len(unsent),
                    len(cells), exc)
        raise DispatchError(
            f"message broker unavailable ({type(exc).__name__}: {exc}); "
            f"{len(unsent)} cells stay queued and the reconciler sends them",
            unsent=unsent,
        ) from exc
    if unroutable:
        queues = sorted({queue_of[c] for c in unroutable})
        raise DispatchError(f"queue(s) {', '.join(queues)} not configured here (configured "
                            f"queues: {', '.join(settings.queue_names())})", unsent=unroutable)


def send_deliveries(delivery_ids: Sequence[int], settings: Settings) -> None:
    """Send each webhook delivery id to the webhook queue; the deliver_webhook task POSTs."""
    from workers.celery_app import DELIVER_WEBHOOK_TASK, celery_for

    app = celery_for(settings)
    for delivery_id in delivery_ids:
        app.send_task(DELIVER_WEBHOOK_TASK, args=[delivery_id], queue=settings.webhook_queue)


def send_judging(run_ids: Sequence[int], settings: Settings) -> None:
    """Send each ingest run id to the maintenance queue; the judge_ingest task judges it."""
    from workers.celery_app import JUDGE_INGEST_TASK, celery_for

    app = celery_for(settings)
    for run_id in run_ids:
        app.send_task(JUDGE_INGEST_TASK, args=[run_id], queue=settings.maintenance_queue)


class CeleryJudgeQueue:
    """app.ports.JudgeQueue: ingest runs to the broker (`send_judging`)."""

    def send(self, run_ids: Sequence[int], settings: Settings) -> None:
        send_judging(run_ids, settings)


class ExecutorCellQueue:
    """app.ports.CellQueue: cells to the executor the settings name (`enqueue_cells`)."""

    def enqueue(self, cells: Sequence[tuple[int, str]], settings: Settings) -> None:
        enqueue_cells(cells, settings)

    def warm_up(self, settings: Settings) -> None:
        """On a GPU host the embedded executor's thread starts the warm server its GPU
        cells' processes are forked from (workers.local). A Celery worker starts its own
        in each pool process (workers.registry.on_worker_process_init)."""
        from benchmarks.fingerprint import visible_gpus

        if settings.executor == "local" and visible_gpus():
            from workers.local import get_local_executor

            get_local_executor().start_fork_server(settings)


class CeleryDeliveryQueue:
    """app.ports.DeliveryQueue: webhook deliveries to the broker (`send_deliveries`)."""

    def send(self, delivery_ids: Sequence[int], settings: Settings) -> None:
        send_deliveries(delivery_ids, settings)


def install() -> None:
    """Wire this package's executors and pip's package index into the service's ports
    (idempotent)."""
    from workers.environments import PipPackageIndex

    ports.wire(cells=ExecutorCellQueue(), deliveries=CeleryDeliveryQueue(),
               index=PipPackageIndex(), judging=CeleryJudgeQueue())
