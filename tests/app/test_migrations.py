"""Alembic owns the schema: it migrates up, down and up again on real PostgreSQL, runs on a
SQLite file, and leaves a schema identical to the models (no drift)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import IntegrityError
from typer.testing import CliRunner

from app.cli import cli
from app.db import downgrade, normalize_database_url, upgrade
from app.models import Base

TABLES = {"projects", "environments", "runs", "cells", "series", "results", "api_tokens",
          "regressions", "webhook_deliveries"}


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
