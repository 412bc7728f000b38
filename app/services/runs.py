"""Runs and cells: triggering, the cell life cycle the workers drive, and finishing a run.

Life cycle (statuses are CHECK-constrained strings):
    run:  queued -> running (first cell claimed) -> done | failed (any cell failed)
    cell: queued -> running -> done | failed | skipped;  running -> queued (reconciler)

Concurrency: a cell is locked (SELECT ... FOR UPDATE on PostgreSQL) before its status
changes, and `finish_run_if_complete` locks the run row before counting cells. Two workers
finishing the last two cells at once therefore serialise on the run row, and the second one
(a new statement under READ COMMITTED) sees the first one's committed cell: exactly one of
them finishes the run. Lock order is always cell, then run. The locks are FOR NO KEY
UPDATE: inserting a result takes FOR KEY SHARE on its run (foreign key), and a plain FOR
UPDATE would deadlock two workers that each hold that share lock.

None of these functions commits; the caller's transaction does (see app/services/__init__).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, load_only

from app.config import Settings, get_settings
from app.errors import DATABASE_ERRORS, InvalidRequest, NotFound
from app.models import CELL_TERMINAL, Cell, Project, Result, Run
from app.services.common import (
    canonical_hash,
    check_result_document,
    get_or_create_series,
    spec_hash,
)
from app.services.tokens import EVERY_PROJECT, ProjectAccess
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec

log = logging.getLogger(__name__)


MAX_ERROR_CHARS = 4000


MAX_REASONS = 50


RESULT_TO_CELL_STATUS = {"ok": "done", "failed": "failed", "skipped": "skipped"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _lock_cell(session: Session, cell_id: int) -> Cell | None:
    return session.execute(
        select(Cell).where(Cell.id == cell_id).with_for_update(of=Cell, key_share=True)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def _lock_run(session: Session, run_id: int) -> Run | None:
    return session.execute(
        select(Run).where(Run.id == run_id).with_for_update(of=Run, key_share=True)
        .execution_options(populate_existing=True)
    ).unique().scalar_one_or_none()


def claim_cell(
    session: Session, cell_id: int, *, settings: Settings | None = None
) -> BenchSpec | None:
    """Mark the cell running (attempts += 1) and return its spec; None if there is nothing to
    run: unknown id, already finished, or out of attempts (then it is failed here)."""
    settings = settings or get_settings()
    cell = _lock_cell(session, cell_id)
    if cell is None:
        log.warning("claim of unknown cell %s", cell_id)
        return None
    if cell.status in CELL_TERMINAL:
        return None
    if cell.attempts >= settings.max_cell_attempts:
        _fail(cell, f"gave up after {cell.attempts} attempts (worker lost each time)")
        return None
    now = _now()
    cell.status = "running"
    cell.attempts += 1
    cell.started_at = now
    cell.updated_at = now
    run = _lock_run(session, cell.run_id)
    if run is not None and run.status == "queued":
        run.status = "running"
        run.started_at = now
    session.flush()
    return BenchSpec.from_dict(cell.spec)


def record_result(session: Session, cell_id: int, result: BenchResult) -> Result | None:
    """Store the cell's result and set the cell's status from it; idempotent per cell.

    A second call for the same cell (a redelivered task) returns the stored result and
    changes nothing. A document that contradicts its cell (another spec, a series key its
    spec and fingerprint do not give) fails the cell with that reason instead of storing
    it, and returns None. Call `finish_run_if_complete` afterwards.
    """
    cell = _lock_cell(session, cell_id)
    if cell is None:
        raise NotFound(f"cell {cell_id} not found")
    existing = session.scalars(select(Result).where(Result.cell_id == cell_id)).first()
    if existing is not None:
        return existing
    try:
        spec, key = check_result_document(result)
    except InvalidRequest as exc:
        _fail(cell, f"result rejected: {exc.message}")
        return None
    # the cell's own spec, hashed: a confirmation's later GPUs store a placed hash
    # (app.services.confirmation) for the same spec
    if spec_hash(spec) != spec_hash(BenchSpec.from_dict(cell.spec)):
        _fail(cell, "result rejected: its spec is not the cell's spec")
        return None
    run = session.get(Run, cell.run_id)
    assert run is not None
    return store_result(session, run, cell, result, key)


def store_result(
    session: Session, run: Run, cell: Cell, result: BenchResult, key: str,
    document_hash: str | None = None, *, series_id: int | None = None, flush: bool = True,
) -> Result:
    """Insert the result row for a checked document and move the cell to its final status.

    `cell` may be new and not yet added (ingest): it is then inserted with its result.
    `document_hash`: the document's canonical hash when the caller has it already (ingest
    hashes it to recognise a retry), so the document is not serialised twice.
    `series_id`: the id of the run's project's series of `key` when the caller read it
    already (ingest reads it with the run); else it is looked up, or created.
    `flush` False leaves the inserts to the caller's flush (a batch's rows go out together).
    """
    series = None
    if series_id is None:
        series = get_or_create_series(session, run.project_id, key)
        series_id = series.id
    for name, value in finished_cell_values(result, key, _now()).items():
        setattr(cell, name, value)
    row = result_row(result, document_hash)
    if cell.id is None:
        row.cell = cell  # a new cell (ingest) and its result go out in one flush
    else:
        row.cell_id = cell.id
    row.run_id = run.id
    row.series_id = series_id
    if series is not None:
        row.series = series  # a caller's answer may name its key: no lazy load for it
    if run.confirms_cell_id is not None:
        # A re-measure for a confirmation: a real result, but no point of its series.
        row.confirms_result_id = session.scalar(
            select(Result.id).where(Result.cell_id == run.confirms_cell_id))
    # A sweep's measurement of another release: no point of its series either.
    row.sweep_id = run.sweep_id
    session.add(row)
    note_environment(run, row.installed_versions, row.fingerprint)
    if flush:
        session.flush()
    return row


def finished_cell_values(result: BenchResult, key: str, now: datetime) -> dict[str, Any]:
    """A cell's columns once its result is stored: its final status, error and key."""
    return {"status": RESULT_TO_CELL_STATUS[result.status],
            "error": None if result.status == "ok" else _clip(result.reason or result.status),
            "series_key": key, "finished_at": now, "updated_at": now}


def note_environment(run: Run, installed: dict[str, str], fingerprint: dict[str, Any]) -> None:
    """What a result found installed, added to its run's environment, and the worker's
    last build of its venv (workers.environments)."""
    env = run.environment
    merged = {**(env.installed or {}), **installed}
    if merged != (env.installed or {}):
        # Written only when it changes: the row is shared by every run of the environment,
        # and an UPDATE would hold its lock until this transaction commits.
        env.installed = merged
    build = (fingerprint.get("environment") or {}).get("build")
    if isinstance(build, dict) and build != env.build:
        env.build = build


def result_row(result: BenchResult, document_hash: str | None = None) -> Result:
    """The Result row for a document (without its cell, run and series ids);
    `document_hash` is `canonical_hash(result.to_dict())`, computed here when not given."""
    return Result(**result_values(result, document_hash))


def result_values(result: BenchResult, document_hash: str | None = None) -> dict[str, Any]:
    """The Result columns for a document (without its cell, run and series ids), as a
    row object takes them and as a multi-row INSERT does (a batch upload)."""
    base, cand, sp, acc = result.baseline, result.candidate, result.speedup, result.accuracy
    packages = result.fingerprint.get("packages") or {}
    return dict(
        status=result.status,
        reason=result.reason,
        schema_version=result.schema_version,
        document_hash=document_hash or canonical_hash(result.to_dict()),
        baseline_samples_ms=result.baseline_samples_ms,
        candidate_samples_ms=result.candidate_samples_ms,
        samples_per_side=sum(len(r) for r in result.baseline_samples_ms) or None,
        baseline_median_ms=base.median_ms if base else None,
        baseline_iqr_ms=base.iqr_ms if base else None,
        baseline_p05_ms=base.p05_ms if base else None,
        baseline_p95_ms=base.p95_ms if base else None,
        baseline_mean_ms=base.mean_ms if base else None,
        candidate_median_ms=cand.median_ms if cand else None,
        candidate_iqr_ms=cand.iqr_ms if cand else None,
        candidate_p05_ms=cand.p05_ms if cand else None,
        candidate_p95_ms=cand.p95_ms if cand else None,
        candidate_mean_ms=cand.mean_ms if cand else None,
        speedup=sp.value if sp else None,
        ci_low=sp.ci_low if sp else None,
        ci_high=sp.ci_high if sp else None,
        ci_confidence=sp.confidence if sp else None,
        ci_method=sp.method if sp else None,
        accuracy_rel_l2=acc.rel_l2 if acc else None,
        accuracy_max_abs=acc.max_abs if acc else None,
        accuracy_tolerance=acc.tolerance if acc else None,
        accuracy_passed=acc.passed if acc else None,
        compile_seconds=result.compile_seconds,
        peak_memory_bytes=result.peak_memory_bytes,
        evidence=result.evidence,
        fingerprint=result.fingerprint,
        installed_versions={str(k): str(v) for k, v in dict(packages).items()},
        started_at=result.started_at,
        finished_at=result.finished_at,
        duration_seconds=result.duration_seconds,
        stderr_tail=result.stderr_tail,
    )


def fail_cell(session: Session, cell_id: int, reason: str) -> None:
    """Mark the cell failed with `reason`; a cell that already finished is left alone."""
    cell = _lock_cell(session, cell_id)
    if cell is None:
        log.warning("fail_cell for unknown cell %s: %s", cell_id, reason)
        return
    if cell.status in CELL_TERMINAL:
        return
    _fail(cell, reason)
    session.flush()


def requeue_contaminated(session: Session, cell_id: int, reason: str,
                         settings: Settings | None = None) -> tuple[int, str] | None:
    """A running cell whose measurement was contaminated (a foreign process on its GPU, a
    throttled GPU) goes back to its queue unsent, to be measured again; returns
    `(cell_id, queue)` to send. Out of attempts, it fails with the reason (None)."""
    settings = settings or get_settings()
    cell = _lock_cell(session, cell_id)
    if cell is None or cell.status != "running":
        return None
    if cell.attempts >= settings.max_cell_attempts:
        _fail(cell, f"contaminated on all {cell.attempts} attempts, the last: {reason}")
        return None
    cell.status = "queued"
    cell.error = _clip(f"attempt {cell.attempts} contaminated, measured again: {reason}")
    cell.enqueued_at = None
    cell.updated_at = _now()
    return cell.id, cell.queue


def _fail(cell: Cell, reason: str) -> None:
    now = _now()
    cell.status = "failed"
    cell.error = _clip(reason)
    cell.finished_at = now
    cell.updated_at = now


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def cell_counts(session: Session, run_id: int) -> Counter[str]:
    rows = session.execute(
        select(Cell.status, func.count()).where(Cell.run_id == run_id).group_by(Cell.status)
    ).all()
    return Counter({status: count for status, count in rows})


def finish_run_if_complete(
    session: Session, run_id: int, *, settings: Settings | None = None
) -> bool:
    """If no cell of the run is queued or running, set the run's final status and verdict.

    Returns True when this call finished the run (so exactly one caller sees True for a
    triggered run). Status: "failed" if any cell failed, else "done". Ingest runs grow with
    every posted result, so they are re-judged on each call.

    Confirmation (app.services.confirmation): a triggered run whose judging asked for a
    re-measure stays "running" (False here) until its confirm runs end; finishing a confirm
    run then finishes the run it confirms, in the same transaction (lock order: confirm
    cell, confirm run, original run). The original run's row lock serialises those callers
    as it does the callers of its own cells.
    """
    from app.services.confirmation import confirmation_pending, forget_pending
    from app.services.sweep_progress import forget_pending as forget_sweep_steps

    settings = settings or get_settings()
    run = _lock_run(session, run_id)
    if run is None:
        return False
    if run.kind != "ingest" and run.status in ("done", "failed"):
        return False
    counts = cell_counts(session, run_id)
    if counts["queued"] or counts["running"]:
        return False
    if run.kind == "triggered" and confirmation_pending(session, run_id):
        return False
    now = _now()
    run.status = "failed" if counts["failed"] else "done"
    run.started_at = run.started_at or now
    run.finished_at = now
    try:
        with session.begin_nested(), session.no_autoflush:
            on_run_finished(session, run_id, settings)
    except DATABASE_ERRORS:
        raise  # the store is unreachable: nothing finished, the caller's retry decides
    except Exception as exc:
        # A bug in judging must not leave the run running for ever: nothing would finish it
        # again once its last cell is stored. It ends with verdict "error" and the reason.
        log.exception("judging run %s failed", run_id)
        forget_pending(session)  # confirmations it asked for were rolled back with it
        forget_sweep_steps(session)  # so was a bisect's next step
        run.verdict = "error"
        run.reasons = [f"the verdict could not be computed ({type(exc).__name__}: "
                       f"{short_error(exc)}); the results are stored"]
    if run.kind == "triggered" and confirmation_pending(session, run_id):
        # Judging sent a candidate regression for a re-measure: not finished yet.
        run.status = "running"
        run.finished_at = None
        run.verdict = None
        session.flush()
        return False
    session.flush()
    if run.kind == "confirm" and run.confirms_cell_id is not None:
        origin = session.get(Cell, run.confirms_cell_id)
        if origin is not None:
            finish_run_if_complete(session, origin.run_id, settings=settings)
    return True


def on_run_finished(session: Session, run_id: int, settings: Settings | None = None) -> None:
    """Decide the run's verdict and reasons once its cells are all finished.

    Each cell is judged against its series' baseline (app.services.detection); regressions
    open and resolve here, and each event gets a pending delivery per configured webhook in
    this same transaction. The deliveries are sent only after the caller commits, so a
    notification never announces something a rollback took back.
    """
    from app.services.detection import judge_run
    from app.services.sweep_progress import sweep_run_finished
    from app.services.webhooks import record_deliveries

    run = session.get(Run, run_id)
    if run is not None and run.kind == "sweep":
        # A sweep's or bisect's measurement of another release: no baseline, no regression;
        # its sweep takes its next step instead.
        sweep_run_finished(session, run, settings or get_settings())
        return
    events = judge_run(session, run_id, settings)
    if events:
        record_deliveries(session, [(e.regression_id, e.event) for e in events])


def get_run(session: Session, run_id: int, access: ProjectAccess = EVERY_PROJECT) -> Run:
    """Another project's run is as unknown as a missing one (ProjectAccess says why)."""
    run = session.get(Run, run_id)
    if run is None or not access.allows(run.project.name):
        raise NotFound(f"run {run_id} not found")
    return run


def run_summary_counts(session: Session, run_ids: list[int]) -> dict[int, Counter[str]]:
    """Cell counts by status for several runs in one query (list endpoint)."""
    out: dict[int, Counter[str]] = {run_id: Counter() for run_id in run_ids}
    if not run_ids:
        return out
    rows = session.execute(
        select(Cell.run_id, Cell.status, func.count())
        .where(Cell.run_id.in_(run_ids)).group_by(Cell.run_id, Cell.status)
    ).all()
    for run_id, status, count in rows:
        out[run_id][status] = count
    return out


def results_by_id(session: Session, ids: list[int]) -> dict[int, Result]:
    """Result rows by id (the baselines a run's cells were judged against)."""
    if not ids:
        return {}
    return {r.id: r for r in session.scalars(select(Result).where(Result.id.in_(ids)))}


def run_cells(
    session: Session, run_id: int, *, result_fields: tuple[str, ...] | None = None
) -> list[tuple[Cell, Result | None]]:
    """The run's cells in order, each with its result (None while it has none).

    `result_fields` loads only those result columns: CI polls the run, and a result row
    also holds raw samples that a summary does not need.
    """
    query = (
        select(Cell, Result).outerjoin(Result, Result.cell_id == Cell.id)
        .where(Cell.run_id == run_id).order_by(Cell.id)
    )
    if result_fields is not None:
        query = query.options(load_only(*(getattr(Result, f) for f in result_fields)))
    return [(cell, result) for cell, result in session.execute(query).all()]


def list_runs(
    session: Session, *, project: str | None = None, status: str | None = None,
    branch: str | None = None, limit: int = 50, cursor: int | None = None,
    access: ProjectAccess = EVERY_PROJECT, revision: str | None = None,
) -> tuple[list[Run], int | None]:
    """Newest first; returns (page, next cursor)."""
    query = access.restrict(select(Run), Run.project_id)
    if revision is not None:
        query = query.where(Run.revision == revision)
    if project is not None:
        query = query.join(Project, Project.id == Run.project_id).where(Project.name == project)
    if status is not None:
        query = query.where(Run.status == status)
    if branch is not None:
        query = query.where(Run.branch == branch)
    if cursor is not None:
        query = query.where(Run.id < cursor)
    found = list(session.scalars(query.order_by(Run.id.desc()).limit(limit + 1)).unique())
    page = found[:limit]
    return page, (page[-1].id if len(found) > limit else None)
