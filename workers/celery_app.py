"""The Celery application: broker, explicit queues, delivery guarantees and time limits.

State lives in SQL, not in Celery: tasks carry a cell id only, there is no result backend,
and a message that is delivered twice is harmless because `claim_cell` and `record_result`
are idempotent. What Celery must guarantee is at-least-once delivery, hence:

- `acks_late` + `reject_on_worker_lost`: a message is acknowledged after the task body
  returns, and put back if the pool process running it dies (OOM killer, segfault).
- prefetch 1: a worker holds one cell at a time; benchmarks must not share a machine.
- `visibility_timeout` above the hard time limit: Redis re-delivers an unacknowledged
  message after that long, so it must not fire while the first delivery is still running.
- explicit queues, `task_create_missing_queues=False`: a cell routed to a queue no worker
  was told about is an error at enqueue time, not a message that waits forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery import Celery
from kombu import Queue

from workers.environments import BUILD_TIMEOUT_S

if TYPE_CHECKING:
    from app.config import Settings

RUN_CELL_TASK = "speedwatch.run_cell"
RUN_CELLS_TASK = "speedwatch.run_cells"
RECONCILE_TASK = "speedwatch.reconcile"
DELIVER_WEBHOOK_TASK = "speedwatch.deliver_webhook"
JUDGE_INGEST_TASK = "speedwatch.judge_ingest"


def queue_names(settings: Settings) -> list[str]:
    """Every queue a worker may consume: cpu, webhooks, maintenance and one per configured
    GPU class."""
    return settings.queue_names()


def reconcile_interval(settings: Settings) -> float:
    """Seconds between beat's reconciler sweeps."""
    return settings.reconcile_interval_seconds or float(
        max(15, settings.reconcile_after_seconds // 4))


def time_limits(settings: Settings) -> tuple[float, float]:
    """(soft, hard) task limits in seconds.

    The child benchmark has its own timeout (cell_timeout_seconds) and so has building an
    environment; these limits are the backstop above both, for a task body that is stuck
    somewhere else (a database that never answers).
    """
    soft = float(settings.cell_timeout_seconds) + BUILD_TIMEOUT_S + 60.0
    return soft, soft + 60.0


def visibility_timeout(settings: Settings) -> int:
    """Seconds after which Redis hands an unacknowledged message to another worker.

    Past the hard limit of the longest message there is: a group of `interleave_cells`
    cells, whose limits are the per-cell ones times its size (workers.dispatch), so a
    group still measuring is never handed to a second worker. A worker that died is
    covered sooner by the reconciler, which re-sends its cells once their heartbeat is
    `reconcile_after_seconds` old.
    """
    if settings.broker_visibility_timeout_seconds is not None:
        return settings.broker_visibility_timeout_seconds
    return int(time_limits(settings)[1] * max(1, settings.interleave_cells) * 2 + 300)


def transport_options(settings: Settings) -> dict[str, int]:
    """Redis transport options: the visibility timeout, and how often workers look for
    messages whose worker died.

    Every worker sweeps the unacknowledged set and puts back messages older than the
    visibility timeout. kombu's default sweep runs about every 100 s; here it runs every
    quarter of the timeout (1 to 60 s), so a message of a dead worker waits little longer
    than the timeout itself.

    The sweep holds a Redis lock that kombu lets expire after 300 s: a worker killed while
    holding it (the sweep runs every few seconds) stopped every other worker's sweep for
    five minutes, so the dead worker's cell waited that long (seen once in the fault test of
    a SIGKILLed worker: its cell did not reach the second worker within 120 s). The lock
    now lasts as long as one interval, at least 10 s; a sweep of a few messages takes
    milliseconds.
    """
    timeout = visibility_timeout(settings)
    interval = max(1, min(60, timeout // 4))
    return {
        "visibility_timeout": timeout,
        "unacked_restore_interval": interval,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": max(10, interval),
    }


def make_celery(settings: Settings | None = None) -> Celery:
    if settings is None:
        from app.config import get_settings

        settings = get_settings()
    soft, hard = time_limits(settings)
    app = Celery("speedwatch", broker=settings.broker_url, include=["workers.tasks"])
    app.conf.update(
        task_queues=[Queue(name, routing_key=name) for name in queue_names(settings)],
        task_default_queue=settings.cpu_queue,
        task_create_missing_queues=False,
        task_routes={RECONCILE_TASK: {"queue": settings.maintenance_queue},
                     JUDGE_INGEST_TASK: {"queue": settings.maintenance_queue},
                     DELIVER_WEBHOOK_TASK: {"queue": settings.webhook_queue}},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=soft,
        task_time_limit=hard,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        broker_transport_options=transport_options(settings),
        # Publishing happens inside an API request: fail fast so the caller can answer 503;
        # the reconciler enqueues again whatever was committed but never sent.
        task_publish_retry_policy={
            "max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1,
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        beat_schedule={
            "reconcile-stuck-cells": {
                "task": RECONCILE_TASK,
                "schedule": reconcile_interval(settings),
                # a sweep nobody took within its interval is stale: the next one does its
                # work, so sweeps never pile up behind a missing consumer
                "options": {"expires": reconcile_interval(settings)},
            }
        },
    )
    return app


celery_app = make_celery()

_apps: dict[tuple[str, tuple[str, ...]], Celery] = {}


def celery_for(settings: Settings) -> Celery:
    """An app that publishes with `settings` (its broker, its queues).

    The module-level app follows the process settings; an API or a sweep built with other
    settings (tests, a second broker) gets its own, made once.
    """
    key = (settings.broker_url, tuple(queue_names(settings)))
    if key == (celery_app.conf.broker_url, tuple(q.name for q in celery_app.conf.task_queues)):
        return celery_app
    if key not in _apps:
        _apps[key] = make_celery(settings)
    return _apps[key]
