"""Alembic owns the schema: it migrates up, down and up again on real PostgreSQL, runs on a
SQLite file, and leaves a schema identical to the models (no drift)."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.db import downgrade, normalize_database_url, upgrade
from app.models import ApiToken, Base
from app.services.tokens import authenticate, create_token
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy
from cli.main import cli

TABLES = {"projects", "environments", "runs", "cells", "series", "results", "api_tokens",
          "regressions", "webhook_deliveries", "workers", "sweeps"}
NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.fixture
def scratch_pg(pg_url: str) -> Iterator[str]:
    """A second, empty PostgreSQL database (the session one is already at head)."""
    name = f"speedwatch_mig_{secrets.token_hex(4)}"
    server = pg_url.rsplit("/", 1)[0].replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(f"{server}/test", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/test", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def tables(url: str) -> set[str]:
    engine = create_engine(normalize_database_url(url))
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def drift(url: str) -> list[object]:
    engine = create_engine(normalize_database_url(url))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def test_postgresql_upgrade_downgrade_upgrade(scratch_pg: str) -> None:
    upgrade(scratch_pg)
    assert tables(scratch_pg) == TABLES
    downgrade(scratch_pg, "base")
    assert tables(scratch_pg) == set()
    upgrade(scratch_pg)
    assert tables(scratch_pg) == TABLES
    assert drift(scratch_pg) == []


def test_sqlite_file_upgrades_to_the_same_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    upgrade(url)
    assert tables(url) == TABLES
    assert drift(url) == []
    downgrade(url, "base")
    assert tables(url) == set()


def test_check_constraints_refuse_impossible_statistics(pg_url: str) -> None:
    engine = create_engine(normalize_database_url(pg_url))
    insert = (
        "INSERT INTO results (cell_id, run_id, series_id, status, schema_version, "
        "document_hash, baseline_samples_ms, candidate_samples_ms, peak_memory_bytes, "
        "evidence, fingerprint, installed_versions, created_at, speedup, ci_low, ci_high, "
        "baseline_median_ms) VALUES (1, 1, 1, 'ok', 1, 'x', '[]', '[]', '{}', '{}', '{}', "
        "'{}', now(), SPEEDUP, LOW, HIGH, MEDIAN)"
    )
    try:
        for values, constraint in [
            ({"speedup": 1.0, "low": 1.1, "high": 1.2, "median": 1.0}, "ck_results_speedup_ci"),
            ({"speedup": 1.0, "low": 0.9, "high": 1.2, "median": -1.0},
             "ck_results_baseline_median_pos"),
        ]:
            with engine.connect() as connection, pytest.raises(IntegrityError) as caught:
                sql = insert
                for name, value in values.items():
                    sql = sql.replace(name.upper(), str(value))
                connection.exec_driver_sql(sql)
            assert constraint in str(caught.value)
    finally:
        engine.dispose()


def test_migrate_command_finds_the_migrations_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPEEDWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    from app.config import get_settings

    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["migrate"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert tables(f"sqlite:///{tmp_path / 'cli.db'}") == TABLES


def test_migrate_command_reports_an_unreachable_database_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPEEDWATCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/none")
    from app.config import get_settings

    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["migrate"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    assert result.output.startswith("error: database unavailable:")
    assert "Traceback" not in result.output


# ---- 0004: series identity -----------------------------------------------------------------

OLD_CPU = "resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu"
OLD_GPU = "resnet50/tensorrt/constant/fp16/bs1/static/nvidia-h100"
CPU_SPEC = BenchSpec(model="resnet18", backend="onnxruntime", width=8, image_size=32)
CPU_T1_SPEC = dataclasses.replace(CPU_SPEC, options={"threads": 1})
GPU_SPEC = BenchSpec(model="resnet50", backend="tensorrt", precision="fp16", device="cuda")
GPU_NO_GRAPHS_SPEC = dataclasses.replace(GPU_SPEC, timing=TimingPolicy(cuda_graphs=False))
CPU_T1 = "resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu/t1/nographs"
CPU_TAUTO = "resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu/tauto/nographs"
GPU_GRAPHS = "resnet50/tensorrt/constant/fp16/bs1/static/nvidia-h100/tauto/graphs"
GPU_NO_GRAPHS = "resnet50/tensorrt/constant/fp16/bs1/static/nvidia-h100/tauto/nographs"
QUEUED_GPU = "resnet50/tensorrt/constant/fp16/bs1/static/cuda/tauto/graphs"
UNMEASURED = "resnet34/eager/constant/fp32/bs1/static/cpu"


class OldStore:
    """Rows written with plain SQL into a database at revision 0003 (the models describe
    the newer schema, so they cannot write the old one)."""

    def __init__(self, connection: Connection) -> None:
        self.db = connection

    def insert(self, table: str, **values: object) -> int:
        values = {k: json.dumps(v) if isinstance(v, (dict, list)) else v
                  for k, v in values.items()}
        sql = (f"INSERT INTO {table} ({', '.join(values)}) "
               f"VALUES ({', '.join(':' + k for k in values)}) RETURNING id")
        return int(self.db.execute(text(sql), values).scalar_one())

    def project(self, name: str, detection: dict[str, object] | None = None) -> int:
        return self.insert("projects", name=name, detection=detection, created_at=NOW)

    def run(self, project_id: int, environment_id: int, status: str = "done") -> int:
        return self.insert(
            "runs", project_id=project_id, environment_id=environment_id, kind="triggered",
            revision="r1", trigger="ci", status=status, reasons=[],
            idempotency_key=secrets.token_hex(8), request_hash="h", matrix={},
            created_at=NOW, updated_at=NOW)

    def series(self, key: str) -> int:
        model, backend, weights, precision, batch, shape, device = key.split("/")
        return self.insert(
            "series", key=key, model=model, backend=backend, weights=weights,
            precision=precision, batch_size=int(batch[2:]), shape_mode=shape,
            device_class=device, created_at=NOW)

    def cell(self, run_id: int, spec: BenchSpec, key: str, status: str = "done") -> int:
        return self.insert(
            "cells", run_id=run_id, spec=spec.to_dict(), spec_hash=secrets.token_hex(8),
            series_key=key, queue="cpu", status=status, attempts=1, created_at=NOW,
            updated_at=NOW)

    def result(self, run_id: int, series_id: int, spec: BenchSpec, *,
               evidence: dict[str, object], device_class: str | None,
               status: str = "ok") -> int:
        """A result of a new cell of `run_id`, filed under the old series `series_id`."""
        key = self.db.execute(text("SELECT key FROM series WHERE id = :id"),
                              {"id": series_id}).scalar_one()
        cell_id = self.cell(run_id, spec, key)
        ok = status == "ok"
        return self.insert(
            "results", cell_id=cell_id, run_id=run_id, series_id=series_id, status=status,
            schema_version=1, document_hash=secrets.token_hex(8), baseline_samples_ms=[],
            candidate_samples_ms=[], peak_memory_bytes={}, evidence=evidence,
            fingerprint={"device_class": device_class} if device_class else {},
            installed_versions={}, created_at=NOW, speedup=1.5 if ok else None,
            ci_low=1.4 if ok else None, ci_high=1.6 if ok else None)


@pytest.fixture(params=["postgresql", "sqlite"])
def scratch_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind the service runs on."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'embedded.db'}"
    return str(request.getfixturevalue("scratch_pg"))


def test_upgrade_to_0004_splits_series_by_project_threads_and_timing_mode_keeping_every_result(
    scratch_db: str,
) -> None:
    upgrade(scratch_db, "0003")
    engine = create_engine(normalize_database_url(scratch_db))
    with engine.begin() as connection:
        old = OldStore(connection)
        env = old.insert("environments", content_hash="e", pins=[], installed={},
                         created_at=NOW)
        a = old.project("a", {"threshold": 0.03, "series_thresholds": {
            OLD_GPU: 0.08, OLD_CPU: 0.05, UNMEASURED: 0.2}})
        b = old.project("b", {"series_thresholds": {OLD_CPU: 0.04}})
        cpu, gpu = old.series(OLD_CPU), old.series(OLD_GPU)
        run_a, run_b, run_a_gpu = old.run(a, env), old.run(b, env), old.run(a, env)
        expected = {  # result id -> (project, new key)
            # two projects' runs shared one old CPU series; threads 1 and default mixed in it
            old.result(run_a, cpu, CPU_T1_SPEC, evidence={}, device_class="cpu"): ("a", CPU_T1),
            old.result(run_a, cpu, CPU_SPEC, evidence={}, device_class="cpu"): ("a", CPU_TAUTO),
            old.result(run_b, cpu, CPU_SPEC, evidence={}, device_class="cpu"): ("b", CPU_TAUTO),
            # GPU results with and without CUDA graphs in one old series, by their evidence:
            old.result(run_a_gpu, gpu, GPU_SPEC, evidence={"timing": {"mode": "graphs"}},
                       device_class="nvidia-h100"): ("a", GPU_GRAPHS),
            old.result(run_a_gpu, gpu, GPU_SPEC, device_class="nvidia-h100", evidence={
                "timing": {"cuda_graphs": {"baseline": True, "candidate": True}}}
            ): ("a", GPU_GRAPHS),
            # ... capture failed and fell back (the spec asked for graphs)
            old.result(run_a_gpu, gpu, GPU_SPEC, evidence={"timing": {"mode": "nographs"}},
                       device_class="nvidia-h100"): ("a", GPU_NO_GRAPHS),
            # ... one side graphed only is not a graphs measurement
            old.result(run_a_gpu, gpu, GPU_SPEC, device_class="nvidia-h100", evidence={
                "timing": {"cuda_graphs": {"baseline": True, "candidate": False}}}
            ): ("a", GPU_NO_GRAPHS),
            # ... by the spec alone, and the old key's device class without a fingerprint
            old.result(run_a_gpu, gpu, GPU_NO_GRAPHS_SPEC, evidence={}, device_class=None,
                       status="failed"): ("a", GPU_NO_GRAPHS),
        }
        opened_by = max(r for r, (_, key) in expected.items() if key == GPU_NO_GRAPHS)
        regression = old.insert(
            "regressions", project_id=a, series_id=gpu, opened_by_run_id=run_a_gpu,
            opened_by_result_id=opened_by, baseline_kind="previous",
            baseline_description="previous", threshold=0.08, status="open", evidence="",
            reasons=[], created_at=NOW, updated_at=NOW)
        # queued cells carry the key predicted from the matrix's device
        queued = old.cell(old.run(a, env, status="queued"), GPU_SPEC,
                          "resnet50/tensorrt/constant/fp16/bs1/static/cuda", status="queued")

    upgrade(scratch_db)

    def rows(sql: str) -> list[tuple[object, ...]]:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql))]

    def thresholds() -> dict[object, object]:
        return {name: json.loads(detection)["series_thresholds"] if isinstance(detection, str)
                else detection["series_thresholds"]  # type: ignore[index]
                for name, detection in rows("SELECT name, detection FROM projects")}

    assert sorted(rows("SELECT p.name, s.key, s.threads, s.timing_mode, s.options "
                       "FROM series s JOIN projects p ON p.id = s.project_id")) == [
        ("a", CPU_T1, 1, "nographs", ""),
        ("a", CPU_TAUTO, None, "nographs", ""),
        ("a", GPU_GRAPHS, None, "graphs", ""),
        ("a", GPU_NO_GRAPHS, None, "nographs", ""),
        ("b", CPU_TAUTO, None, "nographs", ""),
    ]
    filed = rows("SELECT r.id, p.name, s.key, c.series_key FROM results r "
                 "JOIN series s ON s.id = r.series_id JOIN projects p ON p.id = s.project_id "
                 "JOIN cells c ON c.id = r.cell_id")
    assert {r: (project, key) for r, project, key, _ in filed} == expected
    assert all(key == cell_key for _, _, key, cell_key in filed)
    assert rows("SELECT p.name, s.key, g.status FROM regressions g "
                "JOIN series s ON s.id = g.series_id JOIN projects p ON p.id = g.project_id "
                f"WHERE g.id = {regression}") == [("a", GPU_NO_GRAPHS, "open")]
    assert rows(f"SELECT series_key FROM cells WHERE id = {queued}") == [(QUEUED_GPU,)]
    assert thresholds() == {
        # an old key's threshold holds for every series of the project split from it
        "a": {GPU_GRAPHS: 0.08, GPU_NO_GRAPHS: 0.08, CPU_T1: 0.05, CPU_TAUTO: 0.05,
              UNMEASURED: 0.2},
        "b": {CPU_TAUTO: 0.04},
    }
    assert drift(scratch_db) == []

    # Back down (best effort): one series per 7-segment key again, every result kept.
    downgrade(scratch_db, "0003")
    assert sorted(rows("SELECT key FROM series")) == [(OLD_CPU,), (OLD_GPU,)]
    kept = rows("SELECT r.id, s.key FROM results r JOIN series s ON s.id = r.series_id")
    assert {r: key for r, key in kept} == {r: key.rsplit("/", 2)[0]
                                           for r, (_, key) in expected.items()}
    assert rows(f"SELECT series_key FROM cells WHERE id = {queued}") == [
        ("resnet50/tensorrt/constant/fp16/bs1/static/cuda",)]
    assert thresholds() == {"a": {OLD_GPU: 0.08, OLD_CPU: 0.05, UNMEASURED: 0.2},
                            "b": {OLD_CPU: 0.04}}
    engine.dispose()


# ---- 0007: tokens limited to projects ------------------------------------------------------

def test_0007_leaves_existing_tokens_unlimited_and_going_back_revokes_limited_ones(
    scratch_db: str,
) -> None:
    """An older server knows no limits: a limited token must not wake up there as a token
    of every project."""
    upgrade(scratch_db, "0006")
    engine = create_engine(normalize_database_url(scratch_db))
    with engine.begin() as connection:
        existing = OldStore(connection).insert(
            "api_tokens", name="existing", token_hash="a" * 64, scopes=["ci"], created_at=NOW)

    upgrade(scratch_db)
    with Session(engine) as session:
        token = session.get(ApiToken, existing)
        assert token is not None and token.projects is None  # every project, as before
        limited = create_token(session, "ci", "limited", ["vision"])[1]
        unlimited = create_token(session, "read", "unlimited")[1]
        session.commit()
    assert drift(scratch_db) == []

    downgrade(scratch_db, "0006")
    with engine.connect() as connection:
        revoked = {name: at is not None for name, at in connection.execute(
            text("SELECT name, revoked_at FROM api_tokens"))}
    assert revoked == {"existing": False, "limited": True, "unlimited": False}
    upgrade(scratch_db)  # and up again: the revocation holds
    assert drift(scratch_db) == []
    with Session(engine) as session:
        assert authenticate(session, limited) is None
        assert authenticate(session, unlimited) is not None
    engine.dispose()
