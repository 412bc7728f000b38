"""The embedded executor: cells run in one background thread of the API process.

For the one-command set-up (SQLite, no broker). One thread, one cell at a time, because
two benchmarks measured side by side would disturb each other. It calls the same task body
as the Celery worker, so a cell behaves the same whichever executor ran it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _StartForkServer:
    """Queued work that is no cell: start the GPU fork server from the executor's thread."""

    settings: Settings


class LocalExecutor:
    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[list[int], Settings | None] | _StartForkServer] = \
            queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._busy = 0  # cells submitted and not yet finished

    def submit(self, cell_ids: Iterable[int], settings: Settings | None = None) -> None:
        """Queue cells; they run in submission order, one at a time, with `settings`."""
        for cell_id in cell_ids:
            self.submit_group([cell_id], settings)

    def submit_group(self, cell_ids: Iterable[int], settings: Settings | None = None) -> None:
        """Queue cells measured together, one child process of each in turn
        (workers.execution.execute_cells); groups run in submission order, one at a time."""
        group = list(cell_ids)
        if not group:
            return
        with self._lock:
            self._busy += len(group)
            self._queue.put((group, settings))
            self._ensure_thread()

    def start_fork_server(self, settings: Settings) -> None:
        """Have this executor's thread start the warm server its GPU cells' processes are
        forked from (a server serves the thread that started it:
        workers.cell_env.start_fork_server_ahead), in turn with what is queued already: the
        service calls it as it starts, before any cell."""
        with self._lock:
            self._queue.put(_StartForkServer(settings))
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._loop, name="speedwatch-local-executor", daemon=True
            )
            self._thread.start()

    @property
    def pending(self) -> int:
        """Cells submitted here and not yet finished (queued or running)."""
        with self._lock:
            return self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every submitted cell finished; False if `timeout_s` passed first."""
        done = threading.Event()

        def check() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=check, daemon=True).start()
        return done.wait(timeout_s)

    def _loop(self) -> None:
        from workers.execution import execute_cells

        while True:
            item = self._queue.get()
            if isinstance(item, _StartForkServer):
                from workers.cell_env import start_fork_server_ahead

                started = start_fork_server_ahead(item.settings, ["cuda"])
                log.info("warm GPU fork server %s", "starting" if started else "not needed")
                self._queue.task_done()
                continue
            group, settings = item
            try:
                outcomes = execute_cells(group, settings)
                log.info("cells %s: %s", group, outcomes)
            except Exception:  # the thread outlives any cell, as a worker process does
                log.exception("cells %s: task body raised", group)
            finally:
                with self._lock:
                    self._busy -= len(group)
                self._queue.task_done()


_executor: LocalExecutor | None = None
_executor_lock = threading.Lock()


def get_local_executor() -> LocalExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = LocalExecutor()
        return _executor
