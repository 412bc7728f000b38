"""The workers' own accounts of themselves: heartbeats in, liveness and announcements out.

A worker writes its row when it starts, every `worker_heartbeat_seconds`, and when it stops
cleanly (workers.registry). Everything that needs to know whether a queue has a consumer, or
which interpreters exist, asks here instead of guessing from cells that did or did not start:
a broker outage stops cells, not workers, and a guess from cells once failed a whole run
"for lack of a worker" while one was consuming the queue.

The embedded executor (`executor = "local"`) is the API process itself: it has no row, and
is listed as an in-process worker announcing this server's own settings.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.config import Settings
from app.errors import InvalidRequest
from app.models import Cell, Worker

WorkerState = Literal["alive", "lost", "stopped"]
# Every Celery worker also consumes a queue of its own (`direct_queue` of its node name), so
# a cell can be measured by one chosen worker: a confirmation on a named GPU of a fleet.
DIRECT_QUEUE_PREFIX = "direct-"


def direct_queue(worker_name: str) -> str:
    """The queue only the worker of this node name consumes (short enough for Cell.queue)."""
    return DIRECT_QUEUE_PREFIX + hashlib.sha256(worker_name.encode()).hexdigest()[:20]


def is_direct_queue(queue: str) -> bool:
    return queue.startswith(DIRECT_QUEUE_PREFIX)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Announcement:
    """What a worker says about itself on every heartbeat."""

    name: str
    host: str
    pid: int
    queues: list[str]
    interpreters: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    concurrency: int = 1
    version: str = ""


@dataclass(frozen=True)
class WorkerView:
    """A worker as the API and the dashboard show it."""

    name: str
    host: str
    pid: int | None
    kind: Literal["celery", "in-process"]
    state: WorkerState
    queues: list[str]
    interpreters: list[str]
    gpus: list[dict[str, Any]]
    concurrency: int
    version: str
    started_at: datetime | None
    last_heartbeat_at: datetime
    stopped_at: datetime | None


@dataclass(frozen=True)
class QueueView:
    name: str
    alive_workers: int
    queued_cells: int
    running_cells: int


def heartbeat(session: Session, announcement: Announcement, now: datetime | None = None,
              *, starting: bool = False) -> Worker:
    """Write the worker's row (insert or take over the row of its name). `starting`: a new
    process, so its start time and pid replace a previous holder's. Flushes only."""
    now = now or _now()
    values: dict[str, Any] = {
        "host": announcement.host[:200], "pid": announcement.pid,
        "queues": sorted(set(announcement.queues)),
        "interpreters": sorted(set(announcement.interpreters)),
        "gpus": announcement.gpus, "concurrency": announcement.concurrency,
        "version": announcement.version[:64], "last_heartbeat_at": now, "stopped_at": None,
    }
    worker = session.scalars(select(Worker).where(Worker.name == announcement.name)).first()
    if worker is None:
        try:
            with session.begin_nested():
                worker = Worker(name=announcement.name[:200], started_at=now, **values)
                session.add(worker)
            return worker
        except IntegrityError:  # its twin wrote the row first (a restart racing a beat)
            worker = session.scalars(
                select(Worker).where(Worker.name == announcement.name)).one()
    if starting or worker.pid != announcement.pid:
        worker.started_at = now
    for key, value in values.items():
        setattr(worker, key, value)
    session.flush()
    return worker


def stopped(session: Session, name: str, pid: int, now: datetime | None = None) -> None:
    """A clean shutdown: the row says so at once instead of going stale. Only the process
    that holds the row may mark it (a restarted worker of the same name keeps it alive)."""
    worker = session.scalars(select(Worker).where(Worker.name == name)).first()
    if worker is not None and worker.pid == pid:
        worker.stopped_at = now or _now()
        session.flush()


def state_of(worker: Worker, settings: Settings, now: datetime | None = None) -> WorkerState:
    now = now or _now()
    if worker.stopped_at is not None:
        return "stopped"
    lost_after = timedelta(seconds=settings.worker_lost_after())
    return "alive" if worker.last_heartbeat_at >= now - lost_after else "lost"


def _remembered(session: Session, settings: Settings, now: datetime) -> list[Worker]:
    since = now - timedelta(seconds=settings.worker_forget_seconds)
    return list(session.scalars(
        select(Worker).where(Worker.last_heartbeat_at >= since).order_by(Worker.name)))


def list_workers(session: Session, settings: Settings,
                 now: datetime | None = None) -> list[WorkerView]:
    """Every worker heard from within `worker_forget_seconds`, alive ones first, plus the
    in-process executor when this server runs cells itself."""
    now = now or _now()
    views: list[WorkerView] = []
    if settings.executor == "local":
        views.append(_in_process(settings, now))
    rows = _remembered(session, settings, now)
    order = {"alive": 0, "lost": 1, "stopped": 2}
    for worker in sorted(rows, key=lambda w: (order[state_of(w, settings, now)], w.name)):
        state = state_of(worker, settings, now)
        views.append(WorkerView(
            name=worker.name, host=worker.host, pid=worker.pid, kind="celery", state=state,
            queues=list(worker.queues), interpreters=list(worker.interpreters),
            gpus=list(worker.gpus), concurrency=worker.concurrency, version=worker.version,
            started_at=worker.started_at, last_heartbeat_at=worker.last_heartbeat_at,
            stopped_at=worker.stopped_at,
        ))
    return views


def _in_process(settings: Settings, now: datetime) -> WorkerView:
    from benchmarks.fingerprint import visible_gpus

    gpus = visible_gpus()
    # a host without a GPU does not serve the GPU queues, though it would take their cells
    # (only to skip them): it is not shown as their consumer
    queues = _cell_queues(settings) if gpus else [settings.cpu_queue]
    return WorkerView(
        name=f"in-process@{socket.gethostname()}", host=socket.gethostname(), pid=None,
        kind="in-process", state="alive", queues=queues,
        interpreters=sorted(settings.interpreters), gpus=gpus, concurrency=1,
        version="", started_at=None, last_heartbeat_at=now, stopped_at=None,
    )


def _cell_queues(settings: Settings) -> list[str]:
    return sorted({settings.cpu_queue, *settings.gpu_queues.values()})


def list_queues(session: Session, settings: Settings,
                workers: Iterable[WorkerView]) -> list[QueueView]:
    """Each queue a live worker consumes or a cell waits on, with its live consumers and its
    cells: "6 cells queued, 0 workers alive" is the line that tells an operator what to
    start. A configured queue nothing consumes and no cell waits on is left out."""
    rows = session.execute(
        select(Cell.queue, Cell.status, func.count())
        .where(Cell.status.in_(("queued", "running"))).group_by(Cell.queue, Cell.status)
    ).all()
    counts: dict[tuple[str, str], int] = {(row[0], row[1]): int(row[2]) for row in rows}
    alive: dict[str, int] = {}
    for worker in workers:
        if worker.state == "alive":
            for queue in worker.queues:
                alive[queue] = alive.get(queue, 0) + 1
    # a worker's own queue is a row only while a cell waits on it (a confirmation sent to
    # that GPU): otherwise it is one more row per worker that says nothing
    names = sorted({q for q in alive if not is_direct_queue(q)} | {q for q, _ in counts})
    return [QueueView(name, alive.get(name, 0), counts.get((name, "queued"), 0),
                      counts.get((name, "running"), 0)) for name in names]


def queue_last_seen(session: Session, queue: str, settings: Settings,
                    now: datetime | None = None) -> datetime | None:
    """The last heartbeat of any worker that announced `queue` (now, when the in-process
    executor serves it); None when no worker ever did."""
    now = now or _now()
    if settings.executor == "local" and queue in _cell_queues(settings):
        return now
    beats = [w.last_heartbeat_at if w.stopped_at is None else w.stopped_at
             for w in session.scalars(select(Worker)) if queue in (w.queues or [])]
    return max(beats, default=None)


def has_live_consumer(session: Session, queue: str, settings: Settings,
                      now: datetime | None = None) -> bool:
    """Whether a worker alive now (`state_of`) announced `queue`: what a task sent there
    needs to be done soon."""
    now = now or _now()
    return any(queue in (worker.queues or []) and state_of(worker, settings, now) == "alive"
               for worker in _remembered(session, settings, now))


def announced_interpreters(session: Session, queue: str, settings: Settings,
                           now: datetime | None = None) -> set[str]:
    """Interpreter names announced by the workers of `queue` heard from within
    `worker_forget_seconds` (a worker being restarted still counts)."""
    now = now or _now()
    if settings.executor == "local":
        return set(settings.interpreters)
    names: set[str] = set()
    for worker in _remembered(session, settings, now):
        if queue in (worker.queues or []):
            names.update(worker.interpreters or [])
    return names


def check_interpreter(session: Session, queue: str, interpreter: str,
                      settings: Settings) -> None:
    """Refuse, at the API, an interpreter no worker of the run's queue announces: the run
    would otherwise be accepted and fail on the worker."""
    known = announced_interpreters(session, queue, settings)
    if interpreter in known:
        return
    if known:
        listed = f"announced there: {', '.join(sorted(known))}"
    else:
        listed = "no worker of that queue announces any (SPEEDWATCH_INTERPRETERS on the worker)"
    raise InvalidRequest(
        "environment.interpreter",
        f"{interpreter!r} is not an interpreter of any worker of queue {queue!r}; {listed}",
    )


def check_interpreter_announced(session: Session, interpreter: str,
                                settings: Settings) -> None:
    """Refuse, at the API, an uploaded result's interpreter that no worker announces (of
    any queue: the result was measured elsewhere), as a trigger refuses one: a name
    nothing here runs would file the result under an environment nobody can measure
    again, and its runs would never be comparable with a triggered one."""
    known: set[str] = set(settings.interpreters) if settings.executor == "local" else set()
    for worker in _remembered(session, settings, _now()):
        known.update(worker.interpreters or [])
    if interpreter in known:
        return
    listed = (f"announced: {', '.join(sorted(known))}" if known else
              "no worker announces any (SPEEDWATCH_INTERPRETERS on the worker)")
    raise InvalidRequest("environment.interpreter",
                         f"{interpreter!r} is not an interpreter of any worker; {listed}")


def forget_old(session: Session, settings: Settings, now: datetime | None = None) -> int:
    """Delete rows of workers not heard from within `worker_forget_seconds`."""
    now = now or _now()
    since = now - timedelta(seconds=settings.worker_forget_seconds)
    result = session.execute(delete(Worker).where(Worker.last_heartbeat_at < since))
    return int(getattr(result, "rowcount", 0) or 0)
