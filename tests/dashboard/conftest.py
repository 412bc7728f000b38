"""Fixtures of the dashboard tests: clients with public reads on a clean store, a seeded
history, and (for the browser tests) a real uvicorn process with one shared Chromium."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import get_engine
from app.main import create_app
from devkit.dashboard_seed import Seeded, seed


def truncate_all(engine: Engine) -> None:
    """Empty every table (ids restart), as tests/conftest.py's clean_db does."""
    with engine.begin() as connection:
        tables = connection.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename <> 'alembic_version'")).scalars().all()
        quoted = ", ".join(f'"{t}"' for t in tables)
        connection.execute(text(f"TRUNCATE {quoted} RESTART IDENTITY CASCADE"))


@pytest.fixture
def public_settings(settings: Settings, clean_db: None) -> Settings:
    return settings.model_copy(update={"public_reads": True})


@pytest.fixture
def pages(public_settings: Settings) -> Iterator[TestClient]:
    """A client of the whole app (API and pages) on an empty store with public reads."""
    with TestClient(create_app(public_settings)) as client:
        yield client


@pytest.fixture
def seeded(public_settings: Settings) -> Seeded:
    with Session(get_engine(public_settings), expire_on_commit=False) as session:
        return seed(session, public_settings)
