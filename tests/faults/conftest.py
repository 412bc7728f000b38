"""Fixtures for the fault tests: private brokers, service processes, a CI token."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Settings
from app.db import session_scope
from app.services.tokens import create_token
from tests.faults.infra import PrivateRedis, Processes


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def queue() -> str:
    """A queue name no other test session consumes."""
    return f"cpu-faults-{secrets.token_hex(4)}"


@pytest.fixture
def base_env(settings: Settings, queue: str, tmp_path: Path) -> dict[str, str]:
    """What every service process of a fault test shares (the test adds its broker)."""
    return {
        **os.environ,
        "SPEEDWATCH_DATABASE_URL": settings.database_url,
        "SPEEDWATCH_EXECUTOR": "celery",
        "SPEEDWATCH_CPU_QUEUE": queue,
        "SPEEDWATCH_WEBHOOK_QUEUE": f"{queue}-hooks",
        "SPEEDWATCH_MAINTENANCE_QUEUE": f"{queue}-maintenance",
        "SPEEDWATCH_PUBLIC_READS": "true",
        "SPEEDWATCH_ENVIRONMENT": "development",
        "SPEEDWATCH_VENV_CACHE_DIR": str(tmp_path / "venvs"),
        "SPEEDWATCH_ALLOW_FAULTS": "1",  # honoured by benchmark children only
    }


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(dict(os.environ), logs)
    try:
        yield processes
    finally:
        processes.stop()


@pytest.fixture
def token(settings: Settings) -> str:
    with session_scope(settings) as session:
        _, plaintext = create_token(session, "ci", f"faults-{secrets.token_hex(3)}")
    return plaintext
