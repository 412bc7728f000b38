"""The task body of a confirmation: both cells of a pair, measured interleaved.

A confirmation (app.services.confirmation) is two confirm runs with one cell each, the
same spec in the candidate's environment and in the baseline's. They are measured by one
task so their child processes can alternate (benchmarks.isolation.run_interleaved); either
cell's id starts it. Like `execute_cell` it relies on the store for idempotency: a pair
whose cells have ended is not measured again, and a half-claimed pair (one cell ended, by
the reconciler giving up on it) ends the other cell with a reason, so the run waiting on
the pair always finishes.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from celery.exceptions import SoftTimeLimitExceeded

if TYPE_CHECKING:
    from app.config import Settings
    from app.services.confirmation import ConfirmationPair
    from workers.cell_env import CellEnvironment

log = logging.getLogger(__name__)


def execute_confirmation(pair: ConfirmationPair, settings: Settings) -> str:
    """Measure the pair and store both results; "done", "failed" or "already-finished"."""
    from app.db import session_scope
    from app.services.confirmation import pair_threshold
    from app.services.runs import claim_cell, fail_cell, record_result
    from benchmarks.isolation import run_interleaved
    from workers.cell_env import (
        annotate,
        cell_environment,
        failure_reason,
        model_env,
        resolve_python,
    )
    from workers.environments import in_use
    from workers.exclusivity import guard_for_worker, unclean_reason, wait_until_idle

    ids = (pair.candidate_cell_id, pair.baseline_cell_id)
    with session_scope(settings) as session:
        specs = [claim_cell(session, cell_id, settings=settings) for cell_id in ids]
        envs = [cell_environment(session, cell_id) for cell_id in ids]
        threshold = pair_threshold(session, pair)
        if any(spec is None for spec in specs):
            for cell_id, spec in zip(ids, specs, strict=True):
                if spec is not None:
                    fail_cell(session, cell_id, "its paired re-measure in the other "
                              "environment ended without it; a pair is only measured together")
    if any(spec is None for spec in specs):
        _finish(envs, settings)
        return "already-finished"
    spec = specs[0]
    assert spec is not None
    outcome = "failed"
    # A pair on a GPU of a fleet is measured alone on it, like any cell (workers.exclusivity);
    # a contaminated pair fails with the reason: its GPU then counts as not measured.
    guard = guard_for_worker([spec])
    try:
        if guard is not None:  # before building environments for a GPU that is not free
            busy = wait_until_idle(guard, settings.gpu_idle_wait_seconds)
            if busy is not None:
                raise Contaminated(f"before the re-measure: {busy}")
            guard.start()
        pythons = [resolve_python(e.pins, e.interpreter, settings) for e in envs]
        with in_use(pythons):  # no eviction while they measure
            results = run_interleaved(
                spec, pythons, timeout_s=float(settings.cell_timeout_seconds),
                env=model_env(settings), after_each=lambda: heartbeat(ids, settings),
                threshold=threshold)
        for cell_id, result in zip(ids, results, strict=True):
            why = unclean_reason(guard, cell_id, result) \
                if result.status == "ok" and spec.device == "cuda" else None
            if why is not None:
                raise Contaminated(f"contaminated: {why}")
        for result, env, python in zip(results, envs, pythons, strict=True):
            annotate(result, env, python)
        with session_scope(settings) as session:
            stored = [record_result(session, cell_id, result)
                      for cell_id, result in zip(ids, results, strict=True)]
        ok = all(s is not None for s in stored) and all(r.status == "ok" for r in results)
        outcome = "done" if ok else "failed"
    except SoftTimeLimitExceeded:
        _fail_all(ids, "task time limit reached (environment build or benchmark too slow)",
                  settings)
    except Contaminated as exc:
        log.warning("confirmation cells %s: %s", ids, exc)
        _fail_all(ids, str(exc), settings)
    except Exception as exc:  # a bad pair fails; the worker carries on with the next cell
        log.warning("confirmation cells %s failed: %s", ids, exc, exc_info=True)
        _fail_all(ids, failure_reason(exc), settings)
    finally:
        if guard is not None:
            guard.stop()
        _finish(envs, settings)
    return outcome


class Contaminated(RuntimeError):
    """The pair's GPU was not the pair's alone; the message says why."""


def heartbeat(ids: tuple[int, ...], settings: Settings) -> None:
    """Mark the cells as moving after each child: a pair takes 2 * K children and an
    adaptive cell up to `max_processes`, and the reconciler takes a running cell without
    progress for `reconcile_after_seconds` as lost."""
    from sqlalchemy import update

    from app.db import session_scope
    from app.models import Cell

    try:
        with session_scope(settings) as session:
            session.execute(update(Cell).where(Cell.id.in_(ids), Cell.status == "running")
                            .values(updated_at=datetime.now(timezone.utc)))
    except Exception as exc:  # a missed heartbeat costs at most a re-send, never the pair
        log.warning("heartbeat of confirmation cells %s failed: %s", ids, exc)


def _fail_all(ids: tuple[int, int], reason: str, settings: Settings) -> None:
    from app.db import session_scope
    from app.services.runs import fail_cell

    with session_scope(settings) as session:
        for cell_id in ids:
            fail_cell(session, cell_id, reason)


def _finish(envs: list[CellEnvironment], settings: Settings) -> None:
    """Finish both confirm runs; the second to finish finishes the run they confirm."""
    from app.db import session_scope
    from app.services.runs import finish_run_if_complete

    for env in envs:
        with session_scope(settings) as session:
            finish_run_if_complete(session, env.run_id, settings=settings)
