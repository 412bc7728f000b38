"""The service's ports: how app/ hands work to the executors without importing them.

The services decide *what* to send (committed cell ids with their queues, webhook delivery
ids) and *when* (after their commit); the worker package decides *how* (Celery on a
broker, the embedded thread). workers/ sits above app/ and imports it, so app/ cannot import
workers/ back: instead each process wires the worker package's implementations in here at
start-up (`workers.dispatch.install()`), from its composition root:

- an API process: the app factory, app.main.create_app (`speedwatch serve`, `demo`);
- a worker process: workers.tasks, the module every Celery worker and the local executor
  load (cells they run may request confirmations and record webhook deliveries).

A process with nothing wired behaves as if the broker were down: `cell_queue()` and
`delivery_queue()` raise QueueNotWired, the callers log a warning and leave the cells
queued and the deliveries pending, and the reconciler sends them later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.config import Settings


class CellQueue(Protocol):
    """Where committed cells go to be measured."""

    def enqueue(self, cells: Sequence[tuple[int, str]], settings: Settings) -> None:
        """Send each `(cell_id, queue_name)` to the executor `settings.executor` names;
        raise if they could not all be sent (the caller keeps them queued)."""


class DeliveryQueue(Protocol):
    """Where committed webhook deliveries go when the broker delivers them (executor
    "celery"; the embedded executor delivers them in a thread of its own process)."""

    def send(self, delivery_ids: Sequence[int], settings: Settings) -> None:
        """Send each delivery id to the webhook queue; raise if they could not all be sent
        (the caller leaves them pending)."""


class QueueNotWired(RuntimeError):
    """No executor was wired into this process, so nothing can be sent from it."""


@dataclass(frozen=True)
class _Wiring:
    cells: CellQueue
    deliveries: DeliveryQueue


_wiring: _Wiring | None = None


def wire(*, cells: CellQueue, deliveries: DeliveryQueue) -> None:
    """Install the queues every later send in this process goes through (idempotent)."""
    global _wiring
    _wiring = _Wiring(cells, deliveries)


def unwire() -> None:
    """Forget the wiring: sends fail as with no executor (tests of that path)."""
    global _wiring
    _wiring = None


def cell_queue() -> CellQueue:
    if _wiring is None:
        raise QueueNotWired("no cell queue is wired in this process "
                            "(workers.dispatch.install() wires it)")
    return _wiring.cells


def delivery_queue() -> DeliveryQueue:
    if _wiring is None:
        raise QueueNotWired("no webhook delivery queue is wired in this process "
                            "(workers.dispatch.install() wires it)")
    return _wiring.deliveries
