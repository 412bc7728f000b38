"""Under the window policy the worker measures a cell against the number its verdict is
judged against: one median rule, also for an even window (the default is 10)."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy.orm import Session

from app.config import Settings
from app.detection.baselines import window_median
from app.detection.policy import DetectionPolicy
from app.detection.verdict_types import VerdictError
from app.models import Result, Run
from app.schemas import ResultIngest, RunCreate
from app.services.detection import choose_baseline, decision_reference
from app.services.policy import set_policy
from app.services.results import ingest_result
from app.services.triggering import create_run
from benchmarks.spec import BenchSpec
from devkit.factories import bench_result, ingest_body, run_request


def test_the_median_of_an_even_window_is_the_mean_of_its_middle_two() -> None:
    assert window_median([1.2, 1.4]) == pytest.approx(1.3)
    assert window_median([1.4, 1.0, 1.2]) == pytest.approx(1.2)
    with pytest.raises(VerdictError, match="window"):
        window_median([])


def test_the_decision_reference_and_the_verdicts_baseline_agree_on_an_even_window(
        session: Session, settings: Settings) -> None:
    project = f"win-{secrets.token_hex(3)}"
    run, _ = create_run(session, RunCreate.model_validate(
        run_request(project=project, revision="head")), settings=settings)
    session.flush()
    policy = DetectionPolicy(baseline="window", window=2)
    set_policy(session, project, policy)
    cell = run.cells[0]
    spec = BenchSpec.from_dict(cell.spec)

    def ingest(revision: str, speedup: float) -> Result:
        stored, created = ingest_result(session, ResultIngest.model_validate(ingest_body(
            bench_result(spec, speedup=speedup), project=project, revision=revision,
            branch="main")), settings)
        assert created
        return stored

    ingest("old", 1.2)
    ingest("newer", 1.4)
    reference = decision_reference(session, cell.id, cell.series_key)
    new = ingest("new", 1.3)
    new_run = session.get(Run, new.run_id)
    assert new_run is not None
    chosen = choose_baseline(session, new_run, new, policy)
    assert reference is not None and chosen.baseline is not None
    assert chosen.baseline.speedup == pytest.approx(1.3)
    assert reference.speedup == pytest.approx(chosen.baseline.speedup)
    session.rollback()
