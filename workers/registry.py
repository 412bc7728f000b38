"""A worker announces itself: its row in the store, written at start, on a heartbeat and at
a clean stop (app.services.workers reads it).

The heartbeat is a daemon thread of the Celery worker's main process, started when the
worker is ready to consume (`worker_ready`) and stopped at `worker_shutdown`. It writes to
SQL, not the broker, so a broker outage does not make live workers look dead, and a
killed worker simply stops beating and reads as lost after `worker_lost_after()`. A failed
beat (database down) is logged and tried again on the next tick; it never stops the worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable
from dataclasses import replace
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings
    from app.services.workers import Announcement

log = logging.getLogger(__name__)


def announcement(name: str, queues: Iterable[str], settings: Settings,
                 concurrency: int = 1) -> Announcement:
    """This process's account of itself: what it consumes, where, with what."""
    from app.services.workers import Announcement, is_direct_queue
    from benchmarks.fingerprint import visible_gpus

    try:
        version = metadata.version("speedwatch")
    except metadata.PackageNotFoundError:
        version = ""
    queues = sorted(set(queues))
    # a worker of webhooks and maintenance alone never measures: the host's GPUs are not
    # its to show (the workers page listed them under it beside the GPU workers' own)
    service = {settings.webhook_queue, settings.maintenance_queue}
    measures = any(q not in service and not is_direct_queue(q) for q in queues)
    return Announcement(
        name=name, host=socket.gethostname(), pid=os.getpid(), queues=queues,
        interpreters=sorted(settings.interpreters), gpus=visible_gpus() if measures else [],
        concurrency=concurrency, version=version,
    )


class Heartbeat:
    """Writes the announcement now and then every `settings.worker_heartbeat_seconds`."""

    def __init__(self, announcement: Announcement, settings: Settings) -> None:
        self.announcement = announcement
        self.settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, *, starting: bool = False) -> bool:
        from app.db import session_scope
        from app.services.workers import heartbeat
        from benchmarks.fingerprint import visible_gpus

        if self.announcement.gpus:  # each GPU's state now: busy, memory, heat, processes
            self.announcement = replace(self.announcement, gpus=visible_gpus(state=True))

        try:
            with session_scope(self.settings) as session:
                heartbeat(session, self.announcement, starting=starting)
            return True
        except Exception as exc:  # the store is down: beat again on the next tick
            log.warning("worker heartbeat of %s not written: %s", self.announcement.name, exc)
            return False

    def start(self) -> None:
        self.beat(starting=True)
        self._thread = threading.Thread(target=self._loop, name="speedwatch-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.worker_heartbeat_seconds):
            self.beat()

    def stop(self) -> None:
        """Stop beating and mark the row stopped (a clean shutdown reads as such at once)."""
        from app.db import session_scope
        from app.services.workers import stopped

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            with session_scope(self.settings) as session:
                stopped(session, self.announcement.name, self.announcement.pid)
        except Exception as exc:
            log.warning("worker %s not marked stopped: %s", self.announcement.name, exc)


_current: Heartbeat | None = None


def on_worker_ready(sender: Any = None, **_: Any) -> None:
    """Celery `worker_ready`: the consumer knows its node name and queues; start beating."""
    global _current
    from app.config import get_settings

    if sender is None:
        return
    settings = get_settings()
    app = sender.app
    queues = list(app.amqp.queues.consume_from) or [settings.cpu_queue]
    concurrency = int(getattr(sender.controller, "concurrency", None) or 1)
    _current = Heartbeat(announcement(sender.hostname, queues, settings, concurrency),
                         settings)
    _current.start()
    log.info("worker %s announced: queues %s, interpreters %s, %d GPU(s)",
             sender.hostname, ", ".join(queues), ", ".join(settings.interpreters) or "none",
             len(_current.announcement.gpus))


def on_worker_shutdown(**_: Any) -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None


def on_worker_process_init(**_: Any) -> None:
    """Celery `worker_process_init`, in each pool process before its first task: start the
    warm server that the processes of the cells it consumes are forked from (GPU cells by
    default), so its first cell does not wait for the server's imports (13-18 s on an
    H200). The pool process runs its tasks in this thread, which the server serves."""
    from app.config import get_settings
    from workers.celery_app import celery_app
    from workers.cell_env import start_fork_server_ahead

    settings = get_settings()
    consumed = set(celery_app.amqp.queues.consume_from or ())
    devices = [d for d in settings.devices() if settings.queue_for_device(d) in consumed]
    if devices and start_fork_server_ahead(settings, devices):
        log.info("warm fork server starting for the cells of %s", ", ".join(devices))


def connect_signals() -> None:
    """Hook the heartbeat and the warm fork server into Celery's worker life cycle
    (idempotent: Celery keys receivers by function)."""
    from celery.signals import worker_process_init, worker_ready, worker_shutdown

    worker_ready.connect(on_worker_ready, weak=False)
    worker_shutdown.connect(on_worker_shutdown, weak=False)
    worker_process_init.connect(on_worker_process_init, weak=False)
