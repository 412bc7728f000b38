"""Triggering a run: a matrix expanded into cells (checked against what the workers can
measure), the run created once per idempotency key, and its cells queued for the
executor. None of these functions commits; the caller's transaction does."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import ports
from app.config import Settings, get_settings
from app.environment_policy import model_refusal
from app.errors import Conflict, InvalidRequest
from app.models import Cell, Run
from app.schemas import MatrixIn, RunCreate
from app.services.common import (
    canonical_environment,
    canonical_hash,
    get_or_create_environment,
    get_or_create_project,
    spec_hash,
)
from app.services.runs import _now, short_error
from app.services.workers import check_interpreter
from benchmarks.spec import OPT_LEVELS, BenchSpec, SpecError
from benchmarks.timing_policy import default_sides, default_timing

log = logging.getLogger(__name__)


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
    base = _base_spec(matrix, spec_device, settings)

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


def _base_spec(matrix: MatrixIn, spec_device: str, settings: Settings) -> BenchSpec:
    """What every cell of the matrix shares: the timing (the device's defaults, the server's
    load guard, what the request asked), the model's size, threads and sides."""
    timing = replace(default_timing(spec_device), max_host_load=settings.max_host_load)
    asked = matrix.timing.model_dump(exclude_none=True) if matrix.timing is not None else {}
    timing = replace(timing, **asked)
    if timing.min_rounds > timing.rounds:
        if "min_rounds" in asked:
            raise InvalidRequest("matrix.timing.min_rounds", "must not exceed rounds")
        timing = replace(timing, min_rounds=timing.rounds)
    if timing.max_processes and timing.max_processes < timing.processes:
        if "max_processes" in asked:
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
    return base


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
            f"cells not sent to the executor yet ({short_error(exc)}); the run is stored and "
            "the reconciler sends its cells when the broker is back"
        )
    return None
