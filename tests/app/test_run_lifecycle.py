"""The cell life cycle the workers drive, on real PostgreSQL: claims, idempotent results,
failures, and exactly one finisher when the last two cells land at the same moment."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import session_scope
from app.models import Result, Run
from app.schemas import RunCreate
from app.services import runs as run_service
from app.services import triggering
from devkit.factories import bench_result, run_request


def new_run(session: Session, settings: Settings, **overrides: object) -> Run:
    run, created = triggering.create_run(
        session, RunCreate.model_validate(run_request(**overrides)), settings=settings)
    session.commit()
    assert created
    return run


def test_claim_marks_running_and_counts_attempts(session: Session, settings: Settings) -> None:
    run = new_run(session, settings)
    cell = run.cells[0]
    spec = run_service.claim_cell(session, cell.id)
    session.commit()
    assert spec is not None and spec.model == "resnet18" and spec.width == 8
    session.refresh(cell)
    session.refresh(run)
    assert (cell.status, cell.attempts, run.status) == ("running", 1, "running")
    assert run.started_at is not None


def test_claim_returns_none_for_finished_unknown_and_exhausted_cells(
    session: Session, settings: Settings
) -> None:
    run = new_run(session, settings)
    finished, exhausted = run.cells
    spec = run_service.claim_cell(session, finished.id)
    assert spec is not None
    run_service.record_result(session, finished.id, bench_result(spec))
    assert run_service.claim_cell(session, finished.id) is None
    assert run_service.claim_cell(session, 999_999) is None

    exhausted.attempts = settings.max_cell_attempts
    session.flush()
    assert run_service.claim_cell(session, exhausted.id, settings=settings) is None
    assert exhausted.status == "failed" and "gave up after" in (exhausted.error or "")


def test_recording_twice_keeps_the_first_result(session: Session, settings: Settings) -> None:
    run = new_run(session, settings)
    cell = run.cells[0]
    spec = run_service.claim_cell(session, cell.id)
    assert spec is not None
    first = run_service.record_result(session, cell.id, bench_result(spec, speedup=1.5))
    second = run_service.record_result(session, cell.id, bench_result(spec, speedup=9.0))
    session.commit()
    assert first is not None and second is not None and second.id == first.id
    assert session.scalar(select(func.count()).select_from(Result)) == 1
    assert session.scalars(select(Result.speedup)).one() == 1.5


def test_a_result_that_contradicts_its_cell_fails_the_cell(
    session: Session, settings: Settings
) -> None:
    run = new_run(session, settings)
    constant, tensor = run.cells
    spec = run_service.claim_cell(session, constant.id)
    assert spec is not None
    other_spec = run_service.claim_cell(session, tensor.id)
    assert other_spec is not None
    assert run_service.record_result(session, constant.id, bench_result(other_spec)) is None
    assert constant.status == "failed"
    assert constant.error == "result rejected: its spec is not the cell's spec"


def test_fail_cell_never_overwrites_a_finished_cell(session: Session, settings: Settings) -> None:
    run = new_run(session, settings)
    cell = run.cells[0]
    spec = run_service.claim_cell(session, cell.id)
    assert spec is not None
    run_service.record_result(session, cell.id, bench_result(spec))
    run_service.fail_cell(session, cell.id, "late timeout from a lost worker")
    assert cell.status == "done" and cell.error is None


def test_an_accuracy_failure_is_a_regression_and_a_skip_only_a_note(
    session: Session, settings: Settings
) -> None:
    run = new_run(session, settings)
    skipped, inaccurate = run.cells
    for cell in (skipped, inaccurate):
        spec = run_service.claim_cell(session, cell.id)
        assert spec is not None
        if cell is skipped:
            run_service.record_result(session, cell.id, bench_result(spec, status="skipped"))
        else:
            run_service.record_result(session, cell.id, bench_result(spec, accuracy_passed=False))
    assert run_service.finish_run_if_complete(session, run.id) is True
    # a fast wrong answer is not a speedup: the accuracy failure counts against the run
    assert run.status == "done" and run.verdict == "regression"
    assert "accuracy: rel_l2" in run.reasons[0] and "exceeds the tolerance" in run.reasons[0]
    assert "skipped: backend unavailable" in run.reasons[-1]
    assert run_service.finish_run_if_complete(session, run.id) is False


def test_a_run_whose_every_cell_was_skipped_is_inconclusive_not_a_pass(
    session: Session, settings: Settings
) -> None:
    """CI must not go green on a run that measured nothing (say, a backend not installed)."""
    run = new_run(session, settings)
    for cell in run.cells:
        spec = run_service.claim_cell(session, cell.id)
        assert spec is not None
        run_service.record_result(session, cell.id, bench_result(spec, status="skipped"))
    assert run_service.finish_run_if_complete(session, run.id) is True
    assert (run.status, run.verdict) == ("done", "inconclusive")
    assert run.reasons[0].startswith("no cell was measured")
    assert all("skipped: backend unavailable" in r for r in run.reasons[1:])
    assert len(run.reasons) == 1 + len(run.cells)


def test_last_two_cells_landing_together_finish_the_run_exactly_once(
    session: Session, settings: Settings
) -> None:
    """Both workers record their cell, then both ask to finish before either commits. Without
    the run-row lock each would count the other's cell as still running and the run would
    never finish."""
    run = new_run(session, settings)
    # As after the environment's first results: recording does not touch the shared row.
    run.environment.installed = {"onnxruntime": "1.22.0"}
    specs = {}
    for cell in run.cells:
        spec = run_service.claim_cell(session, cell.id)
        assert spec is not None
        specs[cell.id] = spec
    session.commit()

    both_recorded = threading.Barrier(2, timeout=20)
    finished: list[bool] = []
    errors: list[BaseException] = []

    def worker(cell_id: int) -> None:
        try:
            with session_scope(settings) as own:
                run_service.record_result(own, cell_id, bench_result(specs[cell_id]))
                both_recorded.wait()
                finished.append(run_service.finish_run_if_complete(own, run.id))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(cell_id,)) for cell_id in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    assert sorted(finished) == [False, True]
    session.expire_all()
    final = session.get(Run, run.id)
    assert final is not None and final.status == "done" and final.verdict == "pass"


def test_a_run_whose_judging_breaks_still_finishes_with_an_error_verdict(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Injected failure: judging raised on real ONNX Runtime evidence once, and the run then
    # stayed "running" for ever, since nothing finishes a run after its last cell.
    def broken_judge(_session: Session, _run_id: int, _settings: object) -> list[object]:
        raise TypeError("a bug in judging")

    monkeypatch.setattr("app.services.detection.judge_run", broken_judge)
    run = new_run(session, settings)
    for cell in run.cells:
        spec = run_service.claim_cell(session, cell.id)
        assert spec is not None
        run_service.record_result(session, cell.id, bench_result(spec))
    assert run_service.finish_run_if_complete(session, run.id) is True
    session.commit()
    session.refresh(run)
    assert (run.status, run.verdict) == ("done", "error")
    assert run.reasons == ["the verdict could not be computed (TypeError: a bug in judging); "
                           "the results are stored"]
    assert session.scalar(select(func.count()).select_from(Result)
                          .where(Result.run_id == run.id)) == 2
