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

import itertools
import logging
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, load_only

from app import ports
from app.config import Settings, get_settings
from app.environment_policy import model_refusal
from app.errors import DATABASE_ERRORS, Conflict, InvalidRequest, NotFound
from app.models import CELL_TERMINAL, Cell, Project, Result, Run
from app.schemas import MatrixIn, RunCreate
from app.services.common import (
    canonical_environment,
    canonical_hash,
    check_result_document,
    get_or_create_environment,
    get_or_create_project,
    get_or_create_series,
    spec_hash,
)
from app.services.tokens import EVERY_PROJECT, ProjectAccess
from app.services.workers import check_interpreter
from benchmarks.result import BenchResult
from benchmarks.spec import OPT_LEVELS, BenchSpec, SpecError, default_sides, default_timing

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 4000
MAX_REASONS = 50
RESULT_TO_CELL_STATUS = {"ok": "done", "failed": "failed", "skipped": "skipped"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ---- triggering ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PlannedCell:
    spec: BenchSpec
    spec_hash: str
    queue: str
    series_key: str


def expand_matrix(matrix: MatrixIn, settings: Settings) -> list[PlannedCell]:
    """One planned cell per valid matrix point; raises InvalidRequest naming the field."""
    try:
        queue = settings.queue_for_device(matrix.device)
    except KeyError:
        raise InvalidRequest(
            "matrix.device", f"{matrix.device!r} is not one of {', '.join(settings.devices())}"
        ) from None
    spec_device = "cpu" if matrix.device == "cpu" else "cuda"
    timing = replace(default_timing(spec_device), max_host_load=settings.max_host_load)
    if matrix.timing is not None:
        timing = replace(timing, **matrix.timing.model_dump(exclude_none=True))
    if timing.min_rounds > timing.rounds:
        if matrix.timing is not None and matrix.timing.min_rounds is not None:
            raise InvalidRequest("matrix.timing.min_rounds", "must not exceed rounds")
        timing = replace(timing, min_rounds=timing.rounds)
    if timing.max_processes and timing.max_processes < timing.processes:
        if matrix.timing is not None and matrix.timing.max_processes is not None:
            raise InvalidRequest("matrix.timing.max_processes", "must not be below processes")
        timing = replace(timing, max_processes=timing.processes)
    base = BenchSpec(device=spec_device, timing=timing)
    if matrix.image_size is not None:
        base = replace(base, image_size=matrix.image_size)
    if matrix.width is not None:
        base = replace(base, width=matrix.width)
    options: dict[str, Any] = {}
    if matrix.threads is not None:
        options["threads"] = matrix.threads
    sides = matrix.sides or default_sides(spec_device)
    if sides != "paired":  # the default design leaves no trace in the spec or the key
        options["sides"] = sides
    if options:
        base = replace(base, options=options)

    for i, model in enumerate(matrix.models):
        refusal = model_refusal(model, settings.model_packages)
        if refusal is not None:
            raise InvalidRequest(f"matrix.models[{i}]", refusal)
    axes = [
        _unique(matrix.models),
        _unique(matrix.backends),
        _unique(matrix.weights),
        _unique(matrix.precisions),
        _unique(matrix.batch_sizes),
        _unique(matrix.shape_modes),
        _unique(matrix.opt_levels),
    ]
    total = 1
    for axis in axes:
        total *= len(axis)
    if total > settings.max_matrix_cells:
        raise InvalidRequest(
            "matrix",
            f"{total} cells is more than this server's limit of {settings.max_matrix_cells}",
        )
    planned: list[PlannedCell] = []
    for level in _unique(matrix.opt_levels):
        if not any(level in OPT_LEVELS.get(b, ()) for b in matrix.backends):
            raise InvalidRequest("matrix.opt_levels", f"{level!r} is a level of none of the "
                                 f"backends {', '.join(_unique(matrix.backends))}")
    for model, backend, weights, precision, batch_size, shape_mode, opt_level in \
            itertools.product(*axes):
        spec = replace(
            base, model=model, backend=backend, weights=weights, precision=precision,
            batch_size=batch_size, shape_mode=shape_mode, opt_level=opt_level,
        )
        try:
            spec.validate()
        except SpecError as exc:
            if str(exc).startswith(("weights: 'refit'", "opt_level:", "precision: 'int8'")):
                continue  # a combination that does not exist, not a mistake in the request
            raise InvalidRequest(f"matrix.{str(exc).split(':', 1)[0]}", str(exc)) from None
        # A model of the user's is keyed without its fingerprint until the worker has
        # built it; the result's key (with it) replaces this one (store_result).
        planned.append(
            PlannedCell(spec, spec_hash(spec), queue, spec.series_key(matrix.device))
        )
    if not planned:
        raise InvalidRequest("matrix", "no valid combination (weights 'refit' needs a tensorrt "
                             "backend, precision 'int8' onnxruntime or tensorrt, an opt_level "
                             "a backend that has it)")
    return planned


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def create_run(
    session: Session,
    request: RunCreate,
    *,
    idempotency_key: str | None = None,
    settings: Settings | None = None,
) -> tuple[Run, bool]:
    """The run for this request: an existing one (False) or a new one with its cells (True).

    Existing means: the same Idempotency-Key in this project (a different request under the
    same key is a Conflict), or, without a key, a run with the same project, revision,
    environment and matrix. A client that wants a fresh run of an identical request sends a
    new Idempotency-Key. Flushes, does not commit.
    """
    settings = settings or get_settings()
    environment = canonical_environment(request.environment, settings)
    planned = expand_matrix(request.matrix, settings)
    if environment["interpreter"] is not None:
        check_interpreter(session, planned[0].queue, environment["interpreter"], settings)
    request_hash = canonical_hash({
        "project": request.project,
        "revision": request.revision,
        "environment": environment,
        "cells": sorted(p.spec_hash for p in planned),
        "device": request.matrix.device,
    })
    project = get_or_create_project(session, request.project)
    existing = _find_existing(session, project.id, idempotency_key, request_hash)
    if existing is not None:
        return existing, False

    env = get_or_create_environment(session, environment)
    run = Run(
        project_id=project.id,
        environment_id=env.id,
        kind="triggered",
        revision=request.revision,
        branch=request.branch,
        trigger=request.trigger,
        status="queued",
        reasons=[],
        idempotency_key=idempotency_key or f"sha256:{request_hash}",
        request_hash=request_hash,
        matrix=request.matrix.model_dump(mode="json"),
    )
    run.cells = [
        Cell(spec=p.spec.to_dict(), spec_hash=p.spec_hash, queue=p.queue,
             series_key=p.series_key, status="queued", attempts=0)
        for p in planned
    ]
    try:
        with session.begin_nested():
            session.add(run)
    except IntegrityError:
        # An identical request (or the same key) committed between our look-up and insert.
        raced = _find_existing(session, project.id, idempotency_key, request_hash)
        if raced is None:
            raise
        return raced, False
    return run, True


def _find_existing(
    session: Session, project_id: int, idempotency_key: str | None, request_hash: str
) -> Run | None:
    if idempotency_key is not None:
        run = session.scalars(
            select(Run).where(Run.project_id == project_id, Run.idempotency_key == idempotency_key)
        ).first()
        if run is not None and run.request_hash != request_hash:
            raise Conflict(
                f"Idempotency-Key {idempotency_key!r} was used for run {run.id} with a "
                "different request"
            )
        return run
    return session.scalars(
        select(Run)
        .where(Run.project_id == project_id, Run.request_hash == request_hash,
               Run.kind == "triggered")
        .order_by(Run.id.desc())
        .limit(1)
    ).first()


@dataclass
class SubmitOutcome:
    run: Run
    created: bool
    warning: str | None


def submit_run(
    session: Session,
    request: RunCreate,
    *,
    idempotency_key: str | None = None,
    settings: Settings | None = None,
) -> SubmitOutcome:
    """Create (or find) the run, COMMIT, then hand its unsent cells to the executor.

    Committing first means a worker never receives an id it cannot find. If the executor
    cannot take the cells (broker down, no executor wired in), the run is kept and the
    outcome carries a warning: the cells stay `queued` with `enqueued_at` NULL, and the
    reconciler, or a retry of this same request, sends them.
    """
    settings = settings or get_settings()
    run, created = create_run(session, request, idempotency_key=idempotency_key,
                              settings=settings)
    session.commit()
    unsent = [(c.id, c.queue) for c in run.cells
              if c.status == "queued" and c.enqueued_at is None]
    warning = enqueue(session, unsent, settings)
    return SubmitOutcome(run=run, created=created, warning=warning)


def enqueue(session: Session, cells: list[tuple[int, str]], settings: Settings) -> str | None:
    """Send committed cells to the executor (through app.ports); returns a warning instead
    of raising."""
    if not cells or settings.executor == "none":
        return None  # "none" = record only: nothing here executes cells
    ids = [cell_id for cell_id, _ in cells]
    stamp = _now()
    # Stamped before sending so a fast worker's own update is never overwritten by ours.
    session.execute(
        update(Cell).where(Cell.id.in_(ids)).values(enqueued_at=stamp)
    )
    session.commit()
    try:
        ports.cell_queue().enqueue(cells, settings)
    except Exception as exc:  # broker down, no executor wired: the run is kept anyway
        log.warning("enqueue of %d cells failed: %s", len(cells), exc)
        session.execute(
            update(Cell)
            .where(Cell.id.in_(ids), Cell.enqueued_at == stamp, Cell.status == "queued")
            .values(enqueued_at=None)
        )
        session.commit()
        return (
            f"cells not sent to the executor yet ({_short(exc)}); the run is stored and "
            "the reconciler sends its cells when the broker is back"
        )
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


# ---- the cell life cycle (called by workers) ----------------------------------------------

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
    document_hash: str | None = None,
) -> Result:
    """Insert the result row for a checked document and move the cell to its final status.

    `cell` may be new and not yet added (ingest): it is then inserted with its result.
    `document_hash`: the document's canonical hash when the caller has it already (ingest
    hashes it to recognise a retry), so the document is not serialised twice.
    """
    series = get_or_create_series(session, run.project_id, key)
    now = _now()
    cell.status = RESULT_TO_CELL_STATUS[result.status]
    cell.error = None if result.status == "ok" else _clip(result.reason or result.status)
    cell.series_key = key
    cell.finished_at = now
    cell.updated_at = now
    row = result_row(result, document_hash)
    if cell.id is None:
        row.cell = cell  # a new cell (ingest) and its result go out in one flush
    else:
        row.cell_id = cell.id
    row.run_id = run.id
    row.series_id = series.id
    row.series = series  # the caller's answer names its key: no lazy load to fetch it again
    if run.confirms_cell_id is not None:
        # A re-measure for a confirmation: a real result, but no point of its series.
        row.confirms_result_id = session.scalar(
            select(Result.id).where(Result.cell_id == run.confirms_cell_id))
    # A sweep's measurement of another release: no point of its series either.
    row.sweep_id = run.sweep_id
    session.add(row)
    env = run.environment
    merged = {**(env.installed or {}), **row.installed_versions}
    if merged != (env.installed or {}):
        # Written only when it changes: the row is shared by every run of the environment,
        # and an UPDATE would hold its lock until this transaction commits.
        env.installed = merged
    build = (row.fingerprint.get("environment") or {}).get("build")
    if isinstance(build, dict) and build != env.build:
        env.build = build  # the worker's last build of its venv (workers.environments)
    session.flush()
    return row


def result_row(result: BenchResult, document_hash: str | None = None) -> Result:
    """The Result columns for a document (without its cell, run and series ids);
    `document_hash` is `canonical_hash(result.to_dict())`, computed here when not given."""
    base, cand, sp, acc = result.baseline, result.candidate, result.speedup, result.accuracy
    packages = result.fingerprint.get("packages") or {}
    return Result(
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
                       f"{_short(exc)}); the results are stored"]
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


# ---- the verdict ---------------------------------------------------------------------------

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
