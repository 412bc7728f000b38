"""Confirm before alarming, on real PostgreSQL: a triggered run's candidate regression is
re-measured (candidate and baseline environments, as two confirm runs measured together)
before its alert opens; the re-measure decides.

The re-measures here are result documents recorded through the worker's own calls
(claim_cell, record_result, finish_run_if_complete); tests/e2e/test_confirmation_e2e.py
measures them for real. Sending the confirm cell to the executor is recorded instead of
done, so these tests run no benchmark.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.models import Cell, Regression, Result, Run, WebhookDelivery
from app.schemas import RunCreate
from app.services import confirmation, triggering
from app.services import runs as run_service
from app.services.series import get_series, series_points
from benchmarks.spec import BenchSpec
from devkit.factories import bearer, bench_result, ingest_body, run_request

ONE_CELL = {"weights": ["constant"]}
OLD_ENV = {"pins": ["onnxruntime==1.22.0"]}
NEW_ENV = {"pins": ["onnxruntime==1.23.0"]}


@pytest.fixture
def local(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """A server that runs cells (so it can confirm) and has one webhook (process settings,
    as webhooks are read there; their executor stays "none", so nothing is posted)."""
    monkeypatch.setenv("SPEEDWATCH_WEBHOOKS", '[{"url": "http://127.0.0.1:9/hook"}]')
    get_settings.cache_clear()
    yield get_settings().model_copy(update={"executor": "local"})
    get_settings.cache_clear()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, str]]]:
    """Confirm cells handed to the executor (after the commit), instead of run here."""
    calls: list[tuple[int, str]] = []
    monkeypatch.setattr(confirmation, "send", lambda cells, _settings: calls.extend(cells))
    yield calls


def measured_run(session: Session, settings: Settings, revision: str, speedup: float,
                 environment: dict[str, Any], half: float | None = None) -> Run:
    """A triggered one-cell run whose cell measured `speedup`, finished and committed
    (`half`: a multi-process result whose interval is +-half, see `loose`)."""
    run, _ = triggering.create_run(session, RunCreate.model_validate(run_request(
        revision=revision, environment=environment, matrix=ONE_CELL)), settings=settings)
    session.commit()
    cell = run.cells[0]
    spec = run_service.claim_cell(session, cell.id, settings=settings)
    assert spec is not None
    document = bench_result(spec, speedup=speedup) if half is None else loose(spec, speedup, half)
    run_service.record_result(session, cell.id, document)
    run_service.finish_run_if_complete(session, run.id, settings=settings)
    session.commit()
    session.refresh(run)
    return run


def confirm_runs(session: Session, run: Run) -> dict[str, Run]:
    found = session.scalars(select(Run).join(Cell, Cell.id == Run.confirms_cell_id)
                            .where(Cell.run_id == run.id)).unique().all()
    return {confirmation.side_of(r): r for r in found}


def remeasure(session: Session, settings: Settings, run: Run,
              speedups: dict[str, float | None]) -> None:
    """What the confirmation task stores: one result per side (None: that side failed)."""
    for side, confirm in confirm_runs(session, run).items():
        cell = confirm.cells[0]
        spec = run_service.claim_cell(session, cell.id, settings=settings)
        assert spec is not None
        value = speedups[side]
        if value is None:
            run_service.record_result(session, cell.id, bench_result(spec, status="failed"))
        else:
            run_service.record_result(session, cell.id, bench_result(spec, speedup=value))
        session.commit()
    for confirm in confirm_runs(session, run).values():
        run_service.finish_run_if_complete(session, confirm.id, settings=settings)
        session.commit()
    session.refresh(run)


def regressions(session: Session) -> list[Regression]:
    return list(session.scalars(select(Regression)).unique())


def deliveries(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(WebhookDelivery)) or 0


def test_a_candidate_regression_queues_a_re_measure_and_opens_no_alert_yet(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV)
    run = measured_run(session, local, "v2", 1.6, NEW_ENV)

    assert (run.status, run.verdict) == ("running", None)  # CI waiting on it keeps waiting
    assert run.reasons[0].startswith(
        f"{run.cells[0].series_key}: regression suspected: confirming (re-measure queued")
    assert regressions(session) == [] and deliveries(session) == 0
    pair = confirm_runs(session, run)
    candidate, baseline = pair["candidate"], pair["baseline"]
    # the candidate side in this run's environment, the baseline side in v1's
    assert candidate.environment.pins == ["onnxruntime==1.23.0"]
    assert baseline.environment.pins == ["onnxruntime==1.22.0"] and baseline.revision == "v1"
    assert {r.kind for r in pair.values()} == {"confirm"}
    spec = BenchSpec.from_dict(candidate.cells[0].spec)
    assert spec.timing.processes == 3  # the policy's confirm_processes, 3 by default
    assert spec.series_key("cpu") == run.cells[0].series_key
    # only the candidate cell is sent (its task measures the pair), after the commit
    assert sent == [(candidate.cells[0].id, candidate.cells[0].queue)]

    # another caller finding the run complete neither finishes it nor asks again
    assert not run_service.finish_run_if_complete(session, run.id, settings=local)
    session.commit()
    assert len(confirm_runs(session, run)) == 2 and len(sent) == 1


def test_a_confirmed_drop_opens_the_regression_and_its_webhook_delivery(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV)
    run = measured_run(session, local, "v2", 1.6, NEW_ENV)
    remeasure(session, local, run, {"candidate": 1.6, "baseline": 2.0})

    assert (run.status, run.verdict) == ("done", "regression")
    text = " ".join(run.reasons)
    assert "confirmed by re-measure: speedup 2.00x -> 1.60x (-20.0%" in text
    assert "the baseline's environment (v1) re-measured alternately with it" in text
    [regression] = regressions(session)
    assert regression.status == "open" and regression.opened_by_run_id == run.id
    assert any(r.startswith("confirmed by re-measure") for r in regression.reasons)
    assert deliveries(session) == 1


def test_a_drop_the_re_measure_does_not_show_passes_without_an_alert(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV)
    run = measured_run(session, local, "v2", 1.6, NEW_ENV)
    # measured side by side, both environments give the same speedup: the drop was noise
    remeasure(session, local, run, {"candidate": 1.96, "baseline": 2.0})

    assert (run.status, run.verdict) == ("done", "pass")
    assert run.reasons[0].startswith(
        f"{run.cells[0].series_key}: regression not confirmed: re-measure shows speedup "
        "2.00x -> 1.96x")
    assert regressions(session) == [] and deliveries(session) == 0


def test_a_failed_re_measure_opens_the_alert_marked_unconfirmed(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV)
    run = measured_run(session, local, "v2", 1.6, NEW_ENV)
    remeasure(session, local, run, {"candidate": 1.6, "baseline": None})

    assert (run.status, run.verdict) == ("done", "regression")
    [regression] = regressions(session)
    assert "unconfirmed: the baseline re-measure failed: backend unavailable" in \
        " ".join(regression.reasons)


def test_re_measures_are_neither_series_points_nor_baselines(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV)
    run = measured_run(session, local, "v2", 1.6, NEW_ENV)
    remeasure(session, local, run, {"candidate": 1.96, "baseline": 2.0})
    confirms = session.scalars(select(Result).where(Result.confirms_result_id.is_not(None))).all()
    assert len(confirms) == 2  # stored, as real results ...
    original = session.scalar(select(Result.id).where(Result.cell_id == run.cells[0].id))
    assert {r.confirms_result_id for r in confirms} == {original}

    series = get_series(session, run.cells[0].series_key)
    assert [p.revision for p in series_points(session, series, limit=10)] == ["v1", "v2"]
    # ... and the next run is judged against v2 (1.6x), not a re-measure (1.96x or 2.0x)
    after = measured_run(session, local, "v3", 1.6, NEW_ENV)
    assert (after.status, after.verdict) == ("done", "pass")


def test_without_an_executor_the_regression_opens_at_once_marked_unconfirmed(
    session: Session, settings: Settings, sent: list[tuple[int, str]]
) -> None:
    assert settings.executor == "none"
    measured_run(session, settings, "v1", 2.0, OLD_ENV)
    run = measured_run(session, settings, "v2", 1.6, NEW_ENV)
    assert (run.status, run.verdict) == ("done", "regression")
    [regression] = regressions(session)
    assert "unconfirmed: this server runs no cells (executor 'none')" in regression.reasons
    assert confirm_runs(session, run) == {} and sent == []


def test_a_project_can_turn_confirmation_off(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    first = measured_run(session, local, "v1", 2.0, OLD_ENV)
    first.project.detection = {"confirm": False}
    session.commit()
    run = measured_run(session, local, "v2", 1.6, NEW_ENV)
    assert (run.status, run.verdict) == ("done", "regression")
    [regression] = regressions(session)
    assert "unconfirmed: confirmation is off in the project's detection policy" in \
        regression.reasons
    assert sent == []


def test_an_accuracy_failure_opens_at_once_without_a_re_measure(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV)
    run, _ = triggering.create_run(session, RunCreate.model_validate(run_request(
        revision="v2", environment=NEW_ENV, matrix=ONE_CELL)), settings=local)
    session.commit()
    spec = run_service.claim_cell(session, run.cells[0].id, settings=local)
    assert spec is not None
    run_service.record_result(session, run.cells[0].id,
                              bench_result(spec, speedup=1.6, accuracy_passed=False))
    run_service.finish_run_if_complete(session, run.id, settings=local)
    session.commit()
    assert run.verdict == "regression" and len(regressions(session)) == 1 and sent == []


def test_an_ingested_regression_opens_at_once_marked_unconfirmed(
    client: TestClient, ci_token: str, session: Session
) -> None:
    for revision, speedup in (("v1", 2.0), ("v2", 1.6)):
        response = client.post("/api/v1/results", headers=bearer(ci_token), json=ingest_body(
            bench_result(speedup=speedup), revision=revision))
        assert response.status_code == 201, response.text
    [regression] = regressions(session)
    assert "unconfirmed: measured elsewhere (an ingested result), so it cannot be " \
        "re-measured here" in regression.reasons


# ---- undecided drops: re-measured, never a plain pass ---------------------------------------

def loose(spec: BenchSpec, speedup: float, half: float) -> Any:
    """A multi-process result whose interval is +-half (relative): judged on its interval."""
    from benchmarks.stats import PROCESSES_METHOD

    result = bench_result(spec, speedup=speedup)
    result.speedup = type(result.speedup)(speedup, speedup * (1 - half), speedup * (1 + half),
                                          method=PROCESSES_METHOD)
    return result


def test_an_undecided_large_drop_is_re_measured_and_never_a_plain_pass(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV, half=0.005)
    # 5% down, but measured to +-8%: not decided, and past the threshold: suspect
    run = measured_run(session, local, "v2", 1.9, NEW_ENV, half=0.08)
    assert (run.status, run.verdict) == ("running", None)
    assert run.reasons[0].startswith(
        f"{run.cells[0].series_key}: drop suspected: confirming (re-measure queued")
    assert "suspect: past the 3% threshold, but the interval does not exclude" in \
        " ".join(run.reasons)
    assert len(sent) == 1 and regressions(session) == []

    # side by side, the re-measure shows the drop clearly: a regression, alert opened
    remeasure(session, local, run, {"candidate": 1.9, "baseline": 2.0})
    assert (run.status, run.verdict) == ("done", "regression")
    assert any("confirmed by re-measure" in r for r in run.reasons)
    # like a regression decided at once, it says what changed against its baseline
    assert any(": what changed: " in r for r in run.reasons)
    assert [r.status for r in regressions(session)] == ["open"]


def test_an_undecided_drop_whose_re_measure_is_undecided_too_is_inconclusive(
    session: Session, local: Settings, sent: list[tuple[int, str]]
) -> None:
    measured_run(session, local, "v1", 2.0, OLD_ENV, half=0.005)
    run = measured_run(session, local, "v2", 1.9, NEW_ENV, half=0.08)
    for side, confirm in confirm_runs(session, run).items():
        cell = confirm.cells[0]
        spec = run_service.claim_cell(session, cell.id, settings=local)
        assert spec is not None
        value = 1.92 if side == "candidate" else 2.0
        run_service.record_result(session, cell.id, loose(spec, value, 0.06))
        session.commit()
    for confirm in confirm_runs(session, run).values():
        run_service.finish_run_if_complete(session, confirm.id, settings=local)
        session.commit()
    session.refresh(run)
    assert (run.status, run.verdict) == ("done", "inconclusive")
    assert run.reasons[0].startswith(
        f"{run.cells[0].series_key}: re-measure inconclusive: ")
    assert regressions(session) == []


def test_an_undecided_drop_that_cannot_be_re_measured_is_inconclusive_with_the_reason(
    session: Session, settings: Settings
) -> None:
    none = settings.model_copy(update={"executor": "none"})
    measured_run(session, none, "v1", 2.0, OLD_ENV, half=0.005)
    run = measured_run(session, none, "v2", 1.9, NEW_ENV, half=0.08)
    assert (run.status, run.verdict) == ("done", "inconclusive")
    assert any("not re-measured: this server runs no cells" in r for r in run.reasons)
    assert regressions(session) == []


def test_a_small_drop_measured_too_loosely_is_inconclusive_not_a_pass(
    session: Session, settings: Settings
) -> None:
    """1% down, +-6%: a 3% drop is not ruled out, and not suspected either."""
    none = settings.model_copy(update={"executor": "none"})
    measured_run(session, none, "v1", 2.0, OLD_ENV, half=0.005)
    run = measured_run(session, none, "v2", 1.98, NEW_ENV, half=0.06)
    assert run.verdict == "inconclusive"
    assert "uncertain: a drop beyond 3% is not ruled out" in run.reasons[0]
