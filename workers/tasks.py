"""The Celery tasks: a cell or a group of cells (workers.execution), beat's reconciler sweep
(workers.reconciler) and a webhook delivery. Every worker process loads this module
(Celery's `include`)."""

from __future__ import annotations

import logging
from typing import Any

from workers import dispatch, registry
from workers.celery_app import (
    DELIVER_WEBHOOK_TASK,
    JUDGE_INGEST_TASK,
    RECONCILE_TASK,
    RUN_CELL_TASK,
    RUN_CELLS_TASK,
    celery_app,
)
from workers.execution import execute_cell, execute_cells

log = logging.getLogger(__name__)

# The cells a worker runs may request confirmations and record webhook deliveries, which
# the services send through app.ports, so the worker's own executors are wired in here.
dispatch.install()
# ...and a Celery worker announces itself (queues, host, GPUs, interpreters) on a heartbeat.
registry.connect_signals()


@celery_app.task(name=RUN_CELL_TASK, acks_late=True, reject_on_worker_lost=True)
def run_cell(cell_id: int) -> str:
    """Celery entry point; the message carries the cell id and nothing else."""
    outcome = execute_cell(int(cell_id))
    log.info("cell %s: %s", cell_id, outcome)
    return outcome


@celery_app.task(name=RUN_CELLS_TASK, acks_late=True, reject_on_worker_lost=True)
def run_cells(cell_ids: list[int]) -> dict[str, str]:
    """Celery entry point for the cells a run sent to one queue together (ids only);
    measured in turns (`execute_cells`). Its time limits were scaled by the number of
    cells when it was sent (workers.dispatch)."""
    outcomes = execute_cells([int(c) for c in cell_ids])
    log.info("cells %s: %s", list(outcomes), list(outcomes.values()))
    return {str(k): v for k, v in outcomes.items()}


@celery_app.task(name=RECONCILE_TASK, acks_late=False)
def reconcile_task() -> dict[str, int]:
    """Beat's periodic sweep; see workers.reconciler."""
    from workers.reconciler import reconcile

    return reconcile().as_dict()


@celery_app.task(name=JUDGE_INGEST_TASK, acks_late=True, reject_on_worker_lost=True)
def judge_ingest(run_id: int) -> str:
    """Judge an ingest run's new results, sent by the API after their upload committed
    (app.services.results): the bootstrap runs here, not on the API's cores. An ingest
    run is judged again from its rows whenever it gets a result, so a redelivered message
    only decides it again."""
    from app.config import get_settings
    from app.services.results import judge_ingested

    judge_ingested(int(run_id), get_settings())
    return "judged"


@celery_app.task(name=DELIVER_WEBHOOK_TASK, bind=True, acks_late=True, max_retries=None)
def deliver_webhook(self: Any, delivery_id: int) -> str:
    """POST one regression notification; on a connection error or 5xx, retry later with
    exponential backoff (settings webhook_backoff_seconds, webhook_max_retries). Each
    attempt is logged on the delivery row; the last one marks it failed."""
    from app.config import get_settings
    from app.services.webhooks import attempt_delivery, backoff_seconds

    settings = get_settings()
    retries = int(self.request.retries or 0)
    outcome = attempt_delivery(int(delivery_id), settings,
                               final=retries >= settings.webhook_max_retries)
    if outcome == "retry":
        raise self.retry(countdown=backoff_seconds(retries + 1, settings))
    return outcome
