"""The task that runs one cell, and its body shared with the embedded local executor.

A cell can be delivered more than once (a worker died, the reconciler re-sent it), so the
body relies on the store for idempotency: `claim_cell` returns None for a finished cell and
`record_result` keeps one result per cell. Nothing a cell does may kill the worker: the
benchmark runs in a child process, and every failure in the body becomes `fail_cell` with a
reason a person can act on.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery.exceptions import SoftTimeLimitExceeded

from workers import dispatch
from workers.celery_app import (
    DELIVER_WEBHOOK_TASK,
    RECONCILE_TASK,
    RUN_CELL_TASK,
    celery_app,
)

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

# Every worker process loads this module (Celery's `include`, the local executor's thread):
# the cells it runs may request confirmations and record webhook deliveries, which the
# services send through app.ports, so the worker's own executors are wired in here.
dispatch.install()

MAX_REASON = 2000
OUTCOMES = {"ok": "done", "failed": "failed", "skipped": "skipped"}


@dataclass(frozen=True)
class CellEnvironment:
    """What the claimed cell runs in, read from its run's environment."""

    run_id: int
    pins: list[str]
    interpreter: str | None


def execute_cell(cell_id: int, settings: Settings | None = None) -> str:
    """Run one cell to a stored outcome: "done", "failed", "skipped" or "already-finished".

    Raises only when the store itself is unreachable; the cell then stays queued/running
    and the reconciler sends it again. `settings` defaults to the process settings (the
    local executor passes its API's own).
    """
    from app.config import get_settings
    from app.db import session_scope
    from app.services.confirmation import confirmation_pair
    from app.services.runs import claim_cell, finish_run_if_complete, record_result
    from benchmarks.isolation import run_adaptive
    from workers.confirm import _heartbeat, execute_confirmation

    settings = settings or get_settings()
    with session_scope(settings) as session:
        pair = confirmation_pair(session, cell_id)
    if pair is not None:  # a confirmation re-measure: both of its cells, interleaved
        return execute_confirmation(pair, settings)
    with session_scope(settings) as session:
        spec = claim_cell(session, cell_id, settings=settings)
        if spec is None:
            # Finished already (a redelivery), unknown, or just failed by claim_cell for
            # running out of attempts: in that last case the run may now be complete.
            run_id = _run_of(session, cell_id)
            if run_id is not None:
                finish_run_if_complete(session, run_id, settings=settings)
            return "already-finished"
        env = _cell_environment(session, cell_id)

    outcome = "failed"
    try:
        python = resolve_python(env.pins, env.interpreter, settings)
        # Adaptive: processes are added until the comparison with the series' baseline is
        # decided at the project's threshold (or the spec's budget is spent). The baseline
        # is looked up once the first process names the device class it ran on.
        result = run_adaptive(
            spec, reference_for=lambda first: _reference(cell_id, first.series_key, settings),
            timeout_s=float(settings.cell_timeout_seconds), python=python,
            after_each=lambda: _heartbeat((cell_id,), settings))
        _annotate(result, env, python)
        with session_scope(settings) as session:
            stored = record_result(session, cell_id, result)
        outcome = OUTCOMES[result.status] if stored is not None else "failed"
    except SoftTimeLimitExceeded:
        _fail(cell_id, "task time limit reached (environment build or benchmark too slow)",
              settings)
    except Exception as exc:  # a bad cell fails; the worker carries on with the next one
        log.warning("cell %s failed: %s", cell_id, exc, exc_info=True)
        _fail(cell_id, _reason(exc), settings)
    finally:
        with session_scope(settings) as session:
            finish_run_if_complete(session, env.run_id, settings=settings)
    return outcome


def _reference(cell_id: int, series_key: str, settings: Settings) -> Any:
    """The reference a measurement of this cell must decide against (see run_adaptive)."""
    from app.db import session_scope
    from app.services.detection import decision_reference

    with session_scope(settings) as session:
        return decision_reference(session, cell_id, series_key)


def resolve_python(
    pins: list[str], interpreter: str | None, settings: Settings | None = None
) -> str:
    """The interpreter for an environment: a named one from settings (as the policy allows),
    or a cached venv."""
    from app.config import get_settings
    from app.environment_policy import InterpreterError, named_interpreter
    from workers.environments import EnvironmentBuildError, materialize

    settings = settings or get_settings()
    if interpreter:
        try:
            return named_interpreter(interpreter, pins, settings.interpreters)
        except InterpreterError as exc:  # a cell's reason names the build step that refused
            raise EnvironmentBuildError(str(exc)) from None
    return materialize(pins, allowlist=settings.env_allowlist,
                       cache_dir=settings.venv_cache_dir)


def _run_of(session: Any, cell_id: int) -> int | None:
    from app.models import Cell

    cell = session.get(Cell, cell_id)
    return None if cell is None else int(cell.run_id)


def _cell_environment(session: Any, cell_id: int) -> CellEnvironment:
    from app.models import Cell

    cell = session.get(Cell, cell_id)
    environment = cell.run.environment
    return CellEnvironment(
        run_id=cell.run_id,
        pins=list(environment.pins or []),
        interpreter=environment.interpreter,
    )


def _annotate(result: Any, env: CellEnvironment, python: str) -> None:
    """Store what the cell asked for beside what the child found installed."""
    from app.environment_policy import normalize_name
    from workers.environments import installed_versions

    fingerprint = result.fingerprint
    fingerprint["environment"] = {
        "requested": env.pins, "interpreter": env.interpreter, "python": python,
    }
    if env.pins:
        installed = installed_versions(python)
        packages = dict(fingerprint.get("packages") or {})
        for pin in env.pins:
            name = normalize_name(pin.split("==")[0])
            if name in installed:
                packages[name] = installed[name]
        fingerprint["packages"] = packages


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or "".join(traceback.format_exception_only(type(exc), exc)).strip()
    reason = f"{type(exc).__name__}: {text}"
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


def _fail(cell_id: int, reason: str, settings: Settings) -> None:
    from app.db import session_scope
    from app.services.runs import fail_cell

    with session_scope(settings) as session:
        fail_cell(session, cell_id, reason)


@celery_app.task(name=RUN_CELL_TASK, acks_late=True, reject_on_worker_lost=True)
def run_cell(cell_id: int) -> str:
    """Celery entry point; the message carries the cell id and nothing else."""
    outcome = execute_cell(int(cell_id))
    log.info("cell %s: %s", cell_id, outcome)
    return outcome


@celery_app.task(name=RECONCILE_TASK, acks_late=False)
def reconcile_task() -> dict[str, int]:
    """Beat's periodic sweep; see workers.reconciler."""
    from workers.reconciler import reconcile

    return reconcile().as_dict()


@celery_app.task(name=DELIVER_WEBHOOK_TASK, bind=True, acks_late=True, max_retries=None)
def deliver_webhook(self: Any, delivery_id: int) -> str:
    """POST one regression notification; on a connection error or 5xx, retry later with
    exponential backoff (settings webhook_backoff_seconds, webhook_max_retries). Each
    attempt is logged on the delivery row; the last one marks it failed."""
    from app.config import get_settings
    from app.services.webhooks import attempt_delivery, backoff_seconds

    settings = get_settings()
    retries = int(self.request.retries or 0)
    outcome = attempt_delivery(int(delivery_id), settings,
                               final=retries >= settings.webhook_max_retries)
    if outcome == "retry":
        raise self.retry(countdown=backoff_seconds(retries + 1, settings))
    return outcome
