"""Ingest of results measured elsewhere (POST /api/v1/results).

Such a result has no cell of a triggered run, so it gets one: every project + revision +
environment has one "ingest" run, and each distinct spec posted for it becomes a cell of
that run with the result attached. Posting the identical document again is a retry and
returns the stored result; a different document for the same spec at the same revision and
environment is a Conflict (measure again under a new revision label, or trigger a run).
Nothing is stored unless the whole document is valid.

Judging is not part of the request. A verdict bootstraps over every round of the new
result and its baseline: cheap for a small CPU result, but a GPU result of thousands of
samples per side takes a second or more, and a CI job posting a matrix should not wait on
it. So `ingest_result` only stores; `judge_ingested` runs after the commit (the API hands it
to a background task) and `judge_pending_ingests` is the reconciler's sweep for a result
whose judging was lost with its process. Until then the ingest run's verdict is the one
from its earlier results.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import ports
from app.config import Settings
from app.environment_policy import model_refusal
from app.errors import Conflict, InvalidRequest
from app.models import Cell, Project, Result, Run, Series
from app.schemas import EnvironmentIn, ResultBatchIngest, ResultIngest
from app.services.common import (
    canonical_environment,
    canonical_hash,
    check_result_document,
    create_or_get,
    get_or_create_environment,
    get_or_create_project,
    get_or_create_series,
    spec_hash,
)
from app.services.runs import (
    RESULT_TO_CELL_STATUS,
    finish_run_if_complete,
    finished_cell_values,
    note_environment,
    result_values,
    store_result,
)
from app.services.workers import check_interpreter_announced, has_live_consumer
from benchmarks.result import BenchResult
from benchmarks.result_schema import BenchResultDocument
from benchmarks.spec import BenchSpec

log = logging.getLogger(__name__)

INGEST_QUEUE = "ingest"  # not a real queue: marks cells that no worker ran


@dataclass(frozen=True)
class CheckedDocument:
    """A posted document that passed every check the store makes, ready to store."""

    result: BenchResult
    spec: BenchSpec
    series_key: str


@dataclass(frozen=True)
class Ingested:
    """What an upload answers, read before its commit (afterwards reading the stored rows
    again would take a second connection, whose wait could fail a request that stored)."""

    result_id: int
    run_id: int
    cell_id: int
    series_key: str
    status: str
    created: bool


def check_document(document: BenchResultDocument, settings: Settings,
                   field: str = "result") -> CheckedDocument:
    """Everything the store refuses beyond the document's schema, as a 422 naming `field`."""
    result = BenchResult.from_document(document)
    spec, key = check_result_document(result, field)
    # the model rule of a trigger: a stored spec reaches other people's repro bundles
    refusal = model_refusal(spec.model, settings.model_packages, allow_absolute=True)
    if refusal is not None:
        raise InvalidRequest(f"{field}.spec.model", refusal)
    return CheckedDocument(result, spec, key)


def ingest_environment(session: Session, given: EnvironmentIn,
                       settings: Settings) -> dict[str, Any]:
    """The upload's environment in canonical form, refused where it names an interpreter
    no worker announces (as a trigger: such a name means nothing to this service)."""
    environment = canonical_environment(given, settings)
    if environment["interpreter"] is not None:
        check_interpreter_announced(session, environment["interpreter"], settings)
    return environment


def ingest_result(
    session: Session, payload: ResultIngest, settings: Settings
) -> tuple[Result, bool]:
    """Store one posted result; returns (result, created). Flushes, does not commit; call
    `judge_ingested(result.run_id)` after the commit. A document stored already rolls the
    session's transaction back (give this call a session of its own, as the route does)."""
    checked = check_document(payload.result, settings)
    environment = ingest_environment(session, payload.environment, settings)
    return store_checked(session, payload, environment, checked)


def ingest_batch(session: Session, payload: ResultBatchIngest,
                 settings: Settings) -> list[Ingested]:
    """Store a batch's documents in one transaction (committed here), each as if it were
    posted alone (the same run, series and answer): all of them or, where any is refused,
    none. A document stored already is answered (`created` false), so a batch posted again
    stores nothing twice; one that differs from the stored document of its spec is a 409
    naming it."""
    checked = [check_document(doc, settings, f"results[{i}]")
               for i, doc in enumerate(payload.results)]
    environment = ingest_environment(session, payload.environment, settings)
    try:
        return _store_batch(session, payload, environment, checked)
    except IntegrityError:
        # a request beside this one stored one of these specs first: read it as stored
        session.rollback()
        return _store_batch(session, payload, environment, checked)


class _Stored(NamedTuple):
    """A batch document's stored row, as its answer and a repeat's check read it."""

    result_id: int
    cell_id: int
    status: str
    document_hash: str
    series_key: str


def _store_batch(session: Session, where: ResultBatchIngest, environment: dict[str, Any],
                 checked: list[CheckedDocument]) -> list[Ingested]:
    run, _ = _ingest_run(session, where, environment, checked[0].series_key)
    digests = [spec_hash(c.spec) for c in checked]
    hashes = [canonical_hash(c.result.to_dict()) for c in checked]
    stored = {digest: _Stored(result.id, result.cell_id, result.status, result.document_hash,
                              key)
              for result, digest, key in session.execute(
                  select(Result, Cell.spec_hash, Cell.series_key)
                  .join(Cell, Cell.id == Result.cell_id)
                  .where(Cell.run_id == run.id, Cell.spec_hash.in_(set(digests))))}
    keys = {c.series_key for c in checked}
    series_ids: dict[str, int] = {key: id_ for key, id_ in session.execute(
        select(Series.key, Series.id)
        .where(Series.project_id == run.project_id, Series.key.in_(keys)))}
    for key in sorted(keys - series_ids.keys()):  # a series' first result
        series_ids[key] = get_or_create_series(session, run.project_id, key).id
    fresh: dict[str, int] = {}  # digest -> index of the document stored
    for i, (digest, document_hash) in enumerate(zip(digests, hashes, strict=True)):
        if digest in stored:  # a retry: answered from the stored row
            known, result_id = stored[digest].document_hash, stored[digest].result_id
        elif digest in fresh:  # a repeat of one earlier in the batch: stored once
            known, result_id = hashes[fresh[digest]], None
        else:
            fresh[digest] = i
            continue
        if known != document_hash:
            raise Conflict(f"results[{i}]: {_conflict(result_id)}; nothing of this batch "
                           "was stored")
    new = [checked[i] for i in fresh.values()]
    if new:
        _insert_new(session, run, new, [digests[i] for i in fresh.values()],
                    [hashes[i] for i in fresh.values()], series_ids, stored)
    answers = [Ingested(stored[d].result_id, run.id, stored[d].cell_id, stored[d].series_key,
                        stored[d].status, fresh.get(d) == i)
               for i, d in enumerate(digests)]
    session.commit()
    return answers


def _insert_new(session: Session, run: Run, new: list[CheckedDocument], digests: list[str],
                hashes: list[str], series_ids: dict[str, int],
                stored: dict[str, _Stored]) -> None:
    now = datetime.now(timezone.utc)
    cell_ids = session.scalars(
        insert(Cell).returning(Cell.id, sort_by_parameter_order=True),
        [{"run_id": run.id, "spec": one.spec.to_dict(), "spec_hash": digest,
          "queue": INGEST_QUEUE, "attempts": 0, "created_at": now,
          **finished_cell_values(one.result, one.series_key, now)}
         for one, digest in zip(new, digests, strict=True)]).all()
    values = [result_values(one.result, document_hash) for one, document_hash
              in zip(new, hashes, strict=True)]
    result_ids = session.scalars(
        insert(Result).returning(Result.id, sort_by_parameter_order=True),
        [{**row, "cell_id": cell_id, "run_id": run.id,
          "series_id": series_ids[one.series_key], "sweep_id": run.sweep_id}
         for row, cell_id, one in zip(values, cell_ids, new, strict=True)]).all()
    for one, digest, row, cell_id, result_id in zip(new, digests, values, cell_ids, result_ids,
                                                    strict=True):
        stored[digest] = _Stored(result_id, cell_id, row["status"], row["document_hash"],
                                 one.series_key)
        note_environment(run, row["installed_versions"], row["fingerprint"])


def _ingest_run(session: Session, where: ResultIngest | ResultBatchIngest,
                environment: dict[str, Any], series_key: str) -> tuple[Run, int | None]:
    """The project's ingest run for the revision and environment, created where it is the
    first result; with the id of the project's series of `series_key` where it exists."""
    env_hash = canonical_hash(environment)
    run_key = "ingest:" + canonical_hash(
        {"kind": "ingest", "revision": where.revision, "environment": env_hash}
    )
    run, series_id = _find_ingest_run(session, where.project, run_key, series_key)
    if run is None:
        project = get_or_create_project(session, where.project)
        env = get_or_create_environment(session, environment)
        run = create_or_get(  # (not found just above)
            session,
            Run,
            {"project_id": project.id, "idempotency_key": run_key},
            {
                # the row itself, not its id: storing a result reads run.environment
                "environment": env, "kind": "ingest", "revision": where.revision,
                "branch": where.branch, "trigger": "ingest", "status": "running",
                "reasons": [], "request_hash": run_key.removeprefix("ingest:"), "matrix": {},
            },
        )
    return run, series_id


def _ingest_cell(run: Run, checked: CheckedDocument, digest: str) -> Cell:
    """The new cell of the ingest run that a posted document's result is filed under."""
    return Cell(
        run_id=run.id, spec=checked.spec.to_dict(), spec_hash=digest,
        series_key=checked.series_key, queue=INGEST_QUEUE,
        status=RESULT_TO_CELL_STATUS[checked.result.status], attempts=0,
    )


def store_checked(session: Session, where: ResultIngest, environment: dict[str, Any],
                  checked: CheckedDocument) -> tuple[Result, bool]:
    """Store a checked document under `where`'s project and revision; (result, created)."""
    result, spec, key = checked.result, checked.spec, checked.series_key
    run, series_id = _ingest_run(session, where, environment, key)
    digest = spec_hash(spec)
    document_hash = canonical_hash(result.to_dict())
    cell = _ingest_cell(run, checked, digest)
    run_id = run.id
    try:
        stored = store_result(session, run, cell, result, key, document_hash,
                              series_id=series_id)
    except IntegrityError:
        # Unique (run, spec): this spec already has a result at this revision (a retry, or
        # a conflicting re-measurement). Cheaper to learn it here than to look first, and
        # without a savepoint around the inserts (two statements of seven per upload): the
        # failed insert ends the transaction, which held nothing a duplicate does not
        # imply exists already, so it is rolled back and the stored result read.
        session.rollback()
        existing = _existing(session, run_id, digest)
        if existing is None:
            raise
        return _replay(existing, document_hash), False
    return stored, True


def judge_ingested(run_id: int, settings: Settings) -> None:
    """Judge an ingest run's new results in a transaction of its own (after the ingest
    committed): verdict, regressions, webhook deliveries (sent after this commit)."""
    from app.db import session_scope

    with session_scope(settings) as session:
        finish_run_if_complete(session, run_id, settings=settings)


class JudgingCoalescer:
    """Judge ingest runs a short while after their results arrive, once per run.

    Posting a matrix result by result would otherwise judge the run once per POST, each
    pass competing with the next request for this process. The process keeps the run ids
    posted within `delay_s` and judges each once when the window closes (own thread, own
    transactions). A process that dies with ids pending loses nothing: the reconciler's
    `judge_pending_ingests` sweep judges them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, Settings] = {}
        self._timer: threading.Timer | None = None

    def schedule(self, run_id: int, settings: Settings) -> None:
        with self._lock:
            self._pending[run_id] = settings
            if self._timer is None:
                self._timer = threading.Timer(settings.ingest_judge_delay_seconds, self._drain)
                self._timer.daemon = True
                self._timer.start()

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending, self._timer = self._pending, {}, None
        by_settings: dict[int, tuple[Settings, list[int]]] = {}
        for run_id, settings in sorted(pending.items()):
            by_settings.setdefault(id(settings), (settings, []))[1].append(run_id)
        for settings, run_ids in by_settings.values():
            judge_soon(run_ids, settings)


def judge_soon(run_ids: list[int], settings: Settings) -> None:
    """Have ingest runs judged: by a worker (the maintenance queue) where the settings ask
    for it and Celery executes, so the bootstrap does not take the API's cores from the
    next uploads; else here, now, as also when no live worker consumes that queue (the
    verdict would wait for one, and the reconciler that would sweep it up runs on such a
    worker too) or the broker does not take them. Never raises: a run whose judging is
    lost is judged by the reconciler's sweep."""
    if settings.ingest_judging == "worker" and settings.executor == "celery":
        try:
            if _maintenance_consumed(settings):
                ports.judge_queue().send(run_ids, settings)
                return
            why = f"no live worker consumes the {settings.maintenance_queue} queue"
        except Exception as exc:  # the broker or the store down, nothing wired
            why = str(exc)
        log.warning("ingest runs %s judged in the API process: %s", run_ids, why)
    for run_id in run_ids:
        try:
            judge_ingested(run_id, settings)
        except Exception:  # a timer thread must not die silently; the sweep retries
            log.exception("judging ingest run %s failed; the reconciler will retry", run_id)


def _maintenance_consumed(settings: Settings) -> bool:
    from app.db import session_scope

    with session_scope(settings) as session:
        return has_live_consumer(session, settings.maintenance_queue, settings)


coalescer = JudgingCoalescer()


def judge_pending_ingests(session: Session, *, older_than_s: float,
                          now: datetime | None = None) -> list[int]:
    """Ingest runs with a stored result that nobody judged for `older_than_s` seconds (the
    process died between the commit and its background judging); judges them, returns
    their ids. The grace keeps the sweep off results whose judging is under way."""
    now = now or datetime.now(timezone.utc)
    run_ids = list(session.scalars(
        select(Cell.run_id).join(Run, Run.id == Cell.run_id)
        .where(Run.kind == "ingest", Cell.judgement.is_(None),
               Cell.created_at < now - timedelta(seconds=older_than_s))
        .distinct().order_by(Cell.run_id)
    ))
    for run_id in run_ids:
        finish_run_if_complete(session, run_id)
    return run_ids


def _find_ingest_run(session: Session, project: str, run_key: str,
                     series_key: str) -> tuple[Run | None, int | None]:
    """The common case in one query: the project's ingest run for this revision exists,
    and so does the series (its id read with the run: one statement fewer per upload)."""
    found = session.execute(
        select(Run, Series.id).join(Project, Project.id == Run.project_id)
        .outerjoin(Series, (Series.project_id == Project.id) & (Series.key == series_key))
        .where(Project.name == project, Run.idempotency_key == run_key)
    ).first()
    return (None, None) if found is None else (found[0], found[1])


def _existing(session: Session, run_id: int, digest: str) -> Result | None:
    return session.scalars(
        select(Result).join(Cell, Cell.id == Result.cell_id)
        .where(Cell.run_id == run_id, Cell.spec_hash == digest)
    ).first()


def _replay(existing: Result, document_hash: str) -> Result:
    if existing.document_hash != document_hash:
        raise Conflict(_conflict(existing.id))
    return existing


def _conflict(result_id: int | None) -> str:
    stored = f" (result {result_id})" if result_id is not None else " (earlier in this batch)"
    return (f"a different result for this spec is already stored for this revision and "
            f"environment{stored}; post it under another revision label")
