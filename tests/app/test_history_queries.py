"""Queries rewritten so their cost stays flat as history grows (scripts/capacity.py) give
the same answers as before: sparklines on PostgreSQL (LATERAL) and SQLite (window) agree
with a plain reading of every row; a cell's decision reference is found through its
project's series; migration 0009 adds and removes its indexes."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, inspect, select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import downgrade, make_engine, normalize_database_url, upgrade
from app.models import Project, Result, Series, series_point
from app.schemas import ResultIngest, RunCreate
from app.services.detection import decision_reference
from app.services.results import ingest_result
from app.services.series import axis_values, recent_speedups
from app.services.tokens import EVERY_PROJECT, ProjectAccess
from app.services.triggering import create_run
from benchmarks.spec import BenchSpec
from devkit.factories import bench_result, ingest_body, run_request, tiny_spec

PER_SERIES = 4


def _ingest(session: Session, settings: Settings, spec: BenchSpec, *, project: str,
            revision: str, speedup: float, status: str = "ok") -> Result:
    document = bench_result(spec, speedup=speedup, status=status)  # type: ignore[arg-type]
    stored, created = ingest_result(
        session, ResultIngest.model_validate(ingest_body(document, project=project,
                                                         revision=revision, branch="main")),
        settings)
    assert created
    return stored


def _history(session: Session, settings: Settings, project: str) -> list[int]:
    """Three series of a project: 7 ok points and a failed one; 2 ok points; none ok.
    One ok point is made a confirmation's re-measure, which no sparkline may show."""
    specs = [tiny_spec(batch_size=b) for b in (1, 2, 3)]
    stored: list[Result] = []
    for n in range(8):
        stored.append(_ingest(session, settings, specs[0], project=project, revision=f"r{n}",
                              speedup=1.0 + n / 10, status="failed" if n == 5 else "ok"))
    for n in range(2):
        _ingest(session, settings, specs[1], project=project, revision=f"r{n}",
                speedup=2.0 + n / 10)
    _ingest(session, settings, specs[2], project=project, revision="r0", speedup=1.0,
            status="failed")
    session.execute(update(Result).where(Result.id == stored[6].id)
                    .values(confirms_result_id=stored[0].id))
    session.flush()
    return list(session.scalars(
        select(Series.id).join(Project, Project.id == Series.project_id)
        .where(Project.name == project, Series.key.in_([s.series_key("cpu") for s in specs]))
        .order_by(Series.id)))


def _every_row(session: Session, series_ids: list[int]) -> dict[int, list[float]]:
    """The definition: each series' ok points, newest `PER_SERIES`, oldest first."""
    out: dict[int, list[float]] = {}
    for series_id in series_ids:
        rows = session.execute(
            select(Result.speedup).where(Result.series_id == series_id, Result.status == "ok",
                                         series_point())
            .order_by(Result.created_at, Result.id)).scalars().all()
        out[series_id] = [float(x) for x in rows if x is not None][-PER_SERIES:]
    return out


def test_sparklines_on_postgresql_read_the_newest_points_of_each_series(
        session: Session, settings: Settings) -> None:
    project = f"spark-{secrets.token_hex(3)}"
    series_ids = _history(session, settings, project)
    expected = _every_row(session, series_ids)
    # r5 failed and r6 is a re-measure: the newest 4 points are r2, r3, r4, r7
    assert expected[series_ids[0]] == pytest.approx([1.2, 1.3, 1.4, 1.7])
    assert expected[series_ids[1]] == pytest.approx([2.0, 2.1])
    assert expected[series_ids[2]] == []
    assert recent_speedups(session, series_ids, per_series=PER_SERIES) == expected
    session.rollback()


def test_sparklines_on_sqlite_agree(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    upgrade(url)
    settings = Settings(database_url=url, environment="development", executor="none")
    engine = make_engine(settings)  # the embedded store's own engine (its SAVEPOINT recipe)
    try:
        with Session(bind=engine) as session:
            series_ids = _history(session, settings, "spark")
            expected = _every_row(session, series_ids)
            assert expected[series_ids[0]] == pytest.approx([1.2, 1.3, 1.4, 1.7])
            assert recent_speedups(session, series_ids, per_series=PER_SERIES) == expected
    finally:
        engine.dispose()


def test_axis_values_follow_a_new_series_and_keep_to_the_access(
        session: Session, settings: Settings) -> None:
    """The filter choices are kept per process until a series is added: a new series' axis
    values appear at once, and a token limited to a project sees that project's only."""
    project = f"axes-{secrets.token_hex(3)}"
    before = axis_values(session, EVERY_PROJECT)
    assert axis_values(session, EVERY_PROJECT) == before  # the kept answer, unchanged
    _ingest(session, settings, tiny_spec(batch_size=977), project=project, revision="r0",
            speedup=1.1)
    after = axis_values(session, EVERY_PROJECT)
    assert 977 in after["batch_size"] and 977 not in before["batch_size"]
    assert project in after["project"]
    mine = axis_values(session, ProjectAccess(frozenset({project}), "t"))
    assert mine["project"] == [project]
    assert mine["batch_size"] == [977]
    session.rollback()
    assert 977 not in axis_values(session, EVERY_PROJECT)["batch_size"]


def test_a_cells_reference_is_its_own_projects_latest_result_of_its_series(
        session: Session, settings: Settings) -> None:
    project = f"ref-{secrets.token_hex(3)}"
    run, _ = create_run(session, RunCreate.model_validate(
        run_request(project=project, revision="head")), settings=settings)
    session.flush()
    cell = run.cells[0]
    spec = BenchSpec.from_dict(cell.spec)
    assert spec.series_key("cpu") == cell.series_key
    _ingest(session, settings, spec, project=project, revision="old", speedup=1.2)
    latest = _ingest(session, settings, spec, project=project, revision="new", speedup=1.4)
    _ingest(session, settings, spec, project=f"{project}-other", revision="x", speedup=3.0)
    reference = decision_reference(session, cell.id, cell.series_key)
    assert reference is not None
    assert reference.speedup == pytest.approx(1.4)
    assert reference.result_id == latest.id
    session.rollback()


@pytest.fixture
def scratch_pg(pg_url: str) -> Iterator[str]:
    name = f"speedwatch_mig_{secrets.token_hex(4)}"
    server = pg_url.rsplit("/", 1)[0].replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(f"{server}/test", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/test", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


HISTORY_INDEXES = {("runs", "ix_runs_project_id_revision"), ("cells", "ix_cells_unjudged"),
                   ("cells", "ix_cells_queue_started_at")}


def _indexes(url: str) -> set[tuple[str, str]]:
    engine = create_engine(normalize_database_url(url))
    try:
        found = inspect(engine)
        return {(table, ix["name"]) for table in ("runs", "cells")
                for ix in found.get_indexes(table) if ix["name"]}
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_0009_adds_the_history_indexes_and_going_back_removes_them(
        kind: str, scratch_pg: str, tmp_path: Path) -> None:
    url = scratch_pg if kind == "postgresql" else f"sqlite:///{tmp_path / 'embedded.db'}"
    upgrade(url, "0008")
    assert not HISTORY_INDEXES & _indexes(url)
    upgrade(url, "0009")
    assert _indexes(url) >= HISTORY_INDEXES
    downgrade(url, "0008")
    assert not HISTORY_INDEXES & _indexes(url)
    upgrade(url)
    assert _indexes(url) >= HISTORY_INDEXES
