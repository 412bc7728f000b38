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

A third port, `package_index()`, lists the released versions of a package as pip sees
them (a sweep's and a bisect's versions): the workers' pip configuration decides which
index that is (PIP_INDEX_URL, PIP_FIND_LINKS, pip.conf), so a private mirror works.
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

    def warm_up(self, settings: Settings) -> None:
        """Get ready to measure before any cell arrives (an API process calls it once it
        starts serving); never raises."""


class DeliveryQueue(Protocol):
    """Where committed webhook deliveries go when the broker delivers them (executor
    "celery"; the embedded executor delivers them in a thread of its own process)."""

    def send(self, delivery_ids: Sequence[int], settings: Settings) -> None:
        """Send each delivery id to the webhook queue; raise if they could not all be sent
        (the caller leaves them pending)."""


class JudgeQueue(Protocol):
    """Where ingest runs go to be judged when a worker judges them (executor "celery"):
    judging bootstraps over every round, so it is kept off the API process's cores."""

    def send(self, run_ids: Sequence[int], settings: Settings) -> None:
        """Send each run id to the maintenance queue; raise if they could not all be sent
        (the caller judges them itself)."""


class PackageIndex(Protocol):
    """Where released versions of a package are read from (pip's configured index)."""

    def versions(self, package: str, *, pre: bool, settings: Settings) -> list[str]:
        """Every version of `package` with a wheel this interpreter can install, in any
        order; pre-releases only if `pre`. [] when the index has none; raise
        PackageIndexError when the index cannot be read."""


class PackageIndexError(RuntimeError):
    """The package index could not be read (unreachable, misconfigured); safe to show."""


class QueueNotWired(RuntimeError):
    """No executor was wired into this process, so nothing can be sent from it."""


@dataclass(frozen=True)
class _Wiring:
    cells: CellQueue
    deliveries: DeliveryQueue
    index: PackageIndex | None = None
    judging: JudgeQueue | None = None


_wiring: _Wiring | None = None


def wire(*, cells: CellQueue, deliveries: DeliveryQueue,
         index: PackageIndex | None = None, judging: JudgeQueue | None = None) -> None:
    """Install the queues every later send in this process goes through (idempotent)."""
    global _wiring
    _wiring = _Wiring(cells, deliveries, index, judging)


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


def judge_queue() -> JudgeQueue:
    if _wiring is None or _wiring.judging is None:
        raise QueueNotWired("no judging queue is wired in this process "
                            "(workers.dispatch.install() wires it)")
    return _wiring.judging


def package_index() -> PackageIndex:
    if _wiring is None or _wiring.index is None:
        raise PackageIndexError("no package index is wired in this process "
                                "(workers.dispatch.install() wires pip's)")
    return _wiring.index
