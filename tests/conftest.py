"""Fixtures shared by every test package: a real PostgreSQL database, settings, sessions, an
API client and tokens.

- `pg_url`: a fresh database per test session on 127.0.0.1:5432, migrated to head with
  Alembic, dropped at the end. PostgreSQL being down is a failure, not a skip: CI must not
  go green without having tested the store. Override the admin connection with
  SPEEDWATCH_TEST_PG_ADMIN_URL (default: user postgres, else root; database `test`).
- `settings`: Settings on that database, also exported as SPEEDWATCH_* environment
  variables (so `get_settings()`, workers and CLI commands in the test see the same), with
  `executor="none"` (record only: API tests never run benchmarks) and `public_reads=False`.
  Derive variants with `settings.model_copy(update={...})`.
- `session`, `client` (TestClient on `create_app(settings)`), `ci_token`, `read_token`,
  `admin_token` (plaintext bearer tokens), `clean_db` (empties every table; opt in).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db import dispose_engines, get_engine, session_scope, upgrade
from app.main import create_app
from app.services.tokens import create_token

# The CPU load guard (benchmarks.host) re-measures what was timed beside a busy co-tenant,
# and every test here runs beside another xdist worker: left at its default it would
# re-measure nearly every cell of every test. Its own tests set a threshold of their own;
# processes the tests start (serve, worker, demo) inherit this.
os.environ.setdefault("SPEEDWATCH_MAX_HOST_LOAD", "4096")
# Builds kept for later processes (benchmarks.build_cache) go to a directory of this test
# session's, never the user's own cache; the tests of the cache name directories of their own.
os.environ.setdefault("SPEEDWATCH_BUILD_CACHE_DIR",
                      tempfile.mkdtemp(prefix="speedwatch-test-builds-"))

PG_HOST = "127.0.0.1"
PG_PORT = 5432
ADMIN_DATABASE = "test"


def _admin_urls() -> list[str]:
    override = os.environ.get("SPEEDWATCH_TEST_PG_ADMIN_URL")
    if override:
        return [override]
    return [f"postgresql://{user}@{PG_HOST}:{PG_PORT}/{ADMIN_DATABASE}"
            for user in ("postgres", "root")]


def _admin_connection() -> tuple[psycopg.Connection, str]:
    errors = []
    for url in _admin_urls():
        try:
            return psycopg.connect(url, autocommit=True, connect_timeout=5), url
        except psycopg.Error as exc:
            errors.append(f"{url}: {str(exc).strip().splitlines()[0]}")
    pytest.fail(
        "PostgreSQL is required for these tests and is not reachable (start it, e.g. "
        "`service postgresql start`): " + "; ".join(errors),
        pytrace=False,
    )


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    admin, admin_url = _admin_connection()
    name = f"speedwatch_test_{os.getpid()}_{secrets.token_hex(4)}"
    admin.execute(f'CREATE DATABASE "{name}"')
    user_part = admin_url.split("://", 1)[1].rsplit("@", 1)[0]
    url = f"postgresql+psycopg://{user_part}@{PG_HOST}:{PG_PORT}/{name}"
    try:
        upgrade(url)
        yield url
    finally:
        dispose_engines()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def settings(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    env = {
        "SPEEDWATCH_DATABASE_URL": pg_url,
        "SPEEDWATCH_EXECUTOR": "none",
        "SPEEDWATCH_INGEST_JUDGE_DELAY_SECONDS": "0",  # verdicts right after each POST
        "SPEEDWATCH_PUBLIC_READS": "false",
        "SPEEDWATCH_ENVIRONMENT": "development",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    with Session(bind=get_engine(settings), expire_on_commit=False) as db_session:
        yield db_session


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _token(settings: Settings, scope: str) -> str:
    with session_scope(settings) as db_session:
        _, plaintext = create_token(db_session, scope, f"test-{scope}")
    return plaintext


@pytest.fixture
def ci_token(settings: Settings) -> str:
    return _token(settings, "ci")


@pytest.fixture
def read_token(settings: Settings) -> str:
    return _token(settings, "read")


@pytest.fixture
def admin_token(settings: Settings) -> str:
    return _token(settings, "admin")


@pytest.fixture
def clean_db(pg_url: str, settings: Settings) -> None:
    """Empty every table (ids restart), for tests that count rows or list everything."""
    with get_engine(settings).begin() as connection:
        tables = connection.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename <> 'alembic_version'"
        )).scalars().all()
        if tables:
            quoted = ", ".join(f'"{t}"' for t in tables)
            connection.execute(text(f"TRUNCATE {quoted} RESTART IDENTITY CASCADE"))
