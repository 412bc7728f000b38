"""The body that runs cells, shared by the Celery task (workers.tasks) and the embedded
local executor (workers.local).

A cell can be delivered more than once (a worker died, the reconciler re-sent it), so the
body relies on the store for idempotency: `claim_cell` returns None for a finished cell and
`record_result` keeps one result per cell. Nothing a cell does may kill the worker: the
benchmark runs in a child process, and every failure in the body becomes `fail_cell` with a
reason a person can act on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery.exceptions import SoftTimeLimitExceeded

from workers.cell_env import (
    CellEnvironment,
    annotate,
    cell_environment,
    failure_reason,
    model_env,
    model_refusal,
    resolve_python,
    run_of,
)
from workers.exclusivity import guard_for_worker, unclean_reason, wait_until_idle

if TYPE_CHECKING:
    from app.config import Settings
    from benchmarks.result import BenchResult
    from benchmarks.spec import BenchSpec

log = logging.getLogger(__name__)

OUTCOMES = {"ok": "done", "failed": "failed", "skipped": "skipped"}


def execute_cell(cell_id: int, settings: Settings | None = None) -> str:
    """Run one cell to a stored outcome: "done", "failed", "skipped" or "already-finished".

    Raises only when the store itself is unreachable; the cell then stays queued/running
    and the reconciler sends it again. `settings` defaults to the process settings (the
    local executor passes its API's own).
    """
    return execute_cells([cell_id], settings)[cell_id]


@dataclass(frozen=True)
class _Claimed:
    cell_id: int
    spec: BenchSpec
    env: CellEnvironment
    python: str


def execute_cells(cell_ids: Sequence[int], settings: Settings | None = None) -> dict[int, str]:
    """Run cells to stored outcomes, their child processes in turns; the outcome of each.

    The cells a run sends to one queue arrive together (workers.dispatch) and are measured
    together: one child process of each per turn (`run_adaptive_interleaved`), so each
    cell's processes spread over the time all of them take, beside the others'. A drift of
    the machine over minutes then reaches every cell of the run alike and shows in each
    cell's interval, where cells measured one after another landed minutes apart with
    intervals that only knew their own minute. Each cell is still adaptive on its own
    (processes until its comparison with its baseline is decided) and stored the moment
    it is done. Every claimed cell heartbeats after each child: waiting for its turn is
    progress, not a lost worker. A confirmation re-measure runs on its own, as before.
    """
    from app.config import get_settings

    settings = settings or get_settings()
    outcomes: dict[int, str] = {}
    claimed: list[_Claimed] = []
    for cell_id in dict.fromkeys(cell_ids):
        one = _claim(cell_id, settings)
        if isinstance(one, str):
            outcomes[cell_id] = one
        else:
            claimed.append(one)
    if not claimed:
        return outcomes

    _measure_claimed(claimed, settings, outcomes)
    return outcomes


def _measure_claimed(claimed: list[_Claimed], settings: Settings,
                     outcomes: dict[int, str]) -> None:
    """The claimed cells measured in turns, each stored (into `outcomes`) when it is done."""
    from benchmarks.adaptive import AdaptiveMeasurement
    from benchmarks.isolation import run_adaptive_interleaved
    from workers.confirm import heartbeat
    from workers.environments import in_use

    # Adaptive: processes are added until the comparison with the series' baseline is
    # decided at the project's threshold (or the spec's budget is spent). The baseline is
    # looked up once a cell's first process names the device class it ran on.
    measurements = [
        AdaptiveMeasurement(
            c.spec, python=c.python, timeout_s=float(settings.cell_timeout_seconds),
            env=model_env(settings), reference_for=_reference_for(c.cell_id, settings),
            baseline_python_for=_baseline_python_for(settings))
        for c in claimed]
    live = {c.cell_id for c in claimed}
    # A worker pinned to one GPU measures alone on it, or does not store the figure.
    guard = guard_for_worker(c.spec for c in claimed)
    if guard is not None:
        busy = wait_until_idle(guard, settings.gpu_idle_wait_seconds)
        if busy is not None:
            for c in claimed:
                outcomes[c.cell_id] = _measure_again(c, f"before the cell: {busy}", settings)
            return
        guard.start()
    index = {c.cell_id: i for i, c in enumerate(claimed)}

    def stored(i: int, result: BenchResult) -> None:
        c = claimed[i]
        live.discard(c.cell_id)
        reason = None
        if result.status == "ok" and c.spec.device == "cuda":
            reason = unclean_reason(guard, c.cell_id, result)
        if reason is not None:
            outcomes[c.cell_id] = _measure_again(c, reason, settings)
        else:
            outcomes[c.cell_id] = _store(c, result, settings)

    def after_each(_i: int) -> None:
        heartbeat(tuple(sorted(live)), settings)
        for cell_id, sweep_id in _cancelled(sorted(live), settings).items():
            measurements[index[cell_id]].cancel(f"cancelled: sweep {sweep_id} was cancelled "
                                                "while this cell was measuring")

    try:
        with in_use(c.python for c in claimed):  # no eviction while they measure
            run_adaptive_interleaved(measurements, after_each=after_each, on_done=stored)
    except SoftTimeLimitExceeded:
        for cell_id in sorted(live):
            _fail(cell_id, "task time limit reached (environment build or benchmark too slow)",
                  settings)
            outcomes[cell_id] = "failed"
    except Exception as exc:  # the cells still measuring fail; the worker carries on
        log.warning("cells %s failed: %s", sorted(live), exc, exc_info=True)
        for cell_id in sorted(live):
            _fail(cell_id, failure_reason(exc), settings)
            outcomes[cell_id] = "failed"
    finally:
        if guard is not None:
            guard.stop()
        _finish_runs([c.env.run_id for c in claimed], settings)


def _claim(cell_id: int, settings: Settings) -> _Claimed | str:
    """The cell claimed, with its spec, environment and interpreter; or its outcome when
    there is nothing to measure here (a confirmation measured on its own, a cell finished
    already, a model this worker refuses, an interpreter it cannot make)."""
    from app.db import session_scope
    from app.services.confirmation import confirmation_pair
    from app.services.runs import claim_cell, finish_run_if_complete
    from workers.confirm import execute_confirmation

    with session_scope(settings) as session:
        pair = confirmation_pair(session, cell_id)
    if pair is not None:  # a confirmation re-measure: both of its cells, interleaved
        return execute_confirmation(pair, settings)
    with session_scope(settings) as session:
        spec = claim_cell(session, cell_id, settings=settings)
        if spec is None:
            # Finished already (a redelivery), unknown, or just failed by claim_cell
            # for running out of attempts: in that last case the run may now be complete.
            run_id = run_of(session, cell_id)
            if run_id is not None:
                finish_run_if_complete(session, run_id, settings=settings)
            return "already-finished"
        env = cell_environment(session, cell_id)
    refusal = model_refusal(spec.model, settings)
    if refusal is not None:  # the API checked it too; this worker's list is the one
        _fail(cell_id, refusal, settings)
        _finish_runs([env.run_id], settings)
        return "failed"
    try:
        python = resolve_python(env.pins, env.interpreter, settings)
    except SoftTimeLimitExceeded:
        _fail(cell_id, "task time limit reached (environment build too slow)", settings)
        _finish_runs([env.run_id], settings)
        return "failed"
    except Exception as exc:  # a bad cell fails; the others carry on
        log.warning("cell %s failed: %s", cell_id, exc, exc_info=True)
        _fail(cell_id, failure_reason(exc), settings)
        _finish_runs([env.run_id], settings)
        return "failed"
    return _Claimed(cell_id, spec, env, python)


def _measure_again(claimed: _Claimed, reason: str, settings: Settings) -> str:
    """Not stored: the cell goes back to its queue with the reason (or fails, out of
    attempts), and is sent again now; the reconciler sends it if that send fails."""
    from app.db import session_scope
    from app.services.runs import requeue_contaminated
    from app.services.triggering import enqueue

    log.warning("cell %s contaminated: %s", claimed.cell_id, reason)
    with session_scope(settings) as session:
        again = requeue_contaminated(session, claimed.cell_id, reason, settings)
    if again is None:
        _finish_runs([claimed.env.run_id], settings)
        return "failed"
    with session_scope(settings) as session:
        warning = enqueue(session, [again], settings)
    if warning is not None:
        log.warning("cell %s not sent again yet: %s", claimed.cell_id, warning)
    return "contaminated"


def _cancelled(cell_ids: list[int], settings: Settings) -> dict[int, int]:
    """Cells of a cancelled sweep among `cell_ids` (never raises: a lookup that fails
    cancels nothing, the cells go on measuring)."""
    from app.db import session_scope
    from app.services.sweep_progress import cancelled_cells

    try:
        with session_scope(settings) as session:
            return cancelled_cells(session, cell_ids)
    except Exception as exc:
        log.warning("could not check cells %s for a cancelled sweep: %s", cell_ids, exc)
        return {}


def _store(claimed: _Claimed, result: BenchResult, settings: Settings) -> str:
    """Record one finished cell's result and finish its run if that was its last cell."""
    from app.db import session_scope
    from app.services.runs import record_result

    try:
        annotate(result, claimed.env, claimed.python)
        with session_scope(settings) as session:
            stored = record_result(session, claimed.cell_id, result)
        outcome = OUTCOMES[result.status] if stored is not None else "failed"
    except Exception as exc:  # this cell fails; the others go on measuring
        log.warning("cell %s failed: %s", claimed.cell_id, exc, exc_info=True)
        _fail(claimed.cell_id, failure_reason(exc), settings)
        outcome = "failed"
    _finish_runs([claimed.env.run_id], settings)
    return outcome


def _finish_runs(run_ids: Sequence[int], settings: Settings) -> None:
    from app.db import session_scope
    from app.services.runs import finish_run_if_complete

    for run_id in dict.fromkeys(run_ids):
        with session_scope(settings) as session:
            finish_run_if_complete(session, run_id, settings=settings)


def _reference_for(cell_id: int, settings: Settings) -> Callable[[BenchResult], Any]:
    """A cell's `reference_for`: its baseline, asked with the first process's series key."""
    return lambda first: _reference(cell_id, first.series_key, settings)


def _reference(cell_id: int, series_key: str, settings: Settings) -> Any:
    """The reference a measurement of this cell must decide against (see run_adaptive)."""
    from app.db import session_scope
    from app.services.detection import decision_reference

    with session_scope(settings) as session:
        return decision_reference(session, cell_id, series_key)


def _baseline_python_for(settings: Settings) -> Callable[[Any], str | None]:
    """A cell's `baseline_python_for`: the interpreter of the environment its baseline
    result was measured in (a CPU cell whose software differs measures both environments
    in turns: benchmarks.adaptive.AdaptiveMeasurement)."""
    return lambda reference: _baseline_python(reference.result_id, settings)


def _baseline_python(result_id: int | None, settings: Settings) -> str | None:
    from app.db import session_scope
    from app.models import Result

    if result_id is None:
        return None
    with session_scope(settings) as session:
        row = session.get(Result, result_id)
        if row is None:
            return None
        env = cell_environment(session, row.cell_id)
    return resolve_python(env.pins, env.interpreter, settings)


def _fail(cell_id: int, reason: str, settings: Settings) -> None:
    from app.db import session_scope
    from app.services.runs import fail_cell

    with session_scope(settings) as session:
        fail_cell(session, cell_id, reason)
