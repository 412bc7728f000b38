"""Settings: development defaults work out of the box; production refuses unsafe ones."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.db import normalize_database_url


@pytest.fixture(autouse=True)
def _no_speedwatch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about defaults, so the variables the shared fixtures export go."""
    import os

    for key in [k for k in os.environ if k.startswith("SPEEDWATCH_")]:
        monkeypatch.delenv(key)


SAFE_PRODUCTION: dict[str, Any] = {
    "environment": "production",
    "database_url": "postgresql://speedwatch:s3cr3t-from-vault@db:5432/speedwatch",
    "broker_url": "redis://:an0ther-s3cr3t@redis:6379/0",
    "executor": "celery",
    "public_reads": False,
}


def test_production_with_real_settings_starts() -> None:
    assert Settings(**SAFE_PRODUCTION).environment == "production"


@pytest.mark.parametrize(("override", "reason"), [
    ({"database_url": "sqlite:///./var/speedwatch.db"}, "SQLite is the embedded default"),
    ({"database_url": "postgresql://postgres:postgres@db/speedwatch"},
     "placeholder password 'postgres'"),
    ({"broker_url": "redis://:changeme@redis:6379/0"}, "broker_url: uses the placeholder"),
    ({"executor": "local"}, "executor: 'local'"),
    ({"database_url": "postgresql://speedwatch:@db/speedwatch"}, "has an empty password"),
    ({"database_url": "postgresql+psycopg://speedwatch@db:5432/speedwatch"},
     "database_url: has no password"),
    ({"database_url": "postgresql:///speedwatch?host=/var/run/postgresql"},
     "database_url: has no password"),
    ({"broker_url": "redis://redis:6379/0"}, "broker_url: has no password"),
    ({"broker_url": "redis://default@redis:6379/0"}, "broker_url: has no password"),
])
def test_production_refuses_placeholder_and_embedded_settings(
    override: dict[str, str], reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(**{**SAFE_PRODUCTION, **override})
    assert reason in str(caught.value)


@pytest.mark.parametrize("override", [
    {"database_url": "postgresql://speedwatch@db/speedwatch?password=s3cr3t-in-query"},
    {"broker_url": "rediss://user:s3cr3t-over-tls@redis:6380/0"},
    {"executor": "none", "broker_url": "redis://redis:6379/0"},  # no broker is used
])
def test_production_takes_a_password_however_the_url_gives_it(override: dict[str, str]) -> None:
    assert Settings(**{**SAFE_PRODUCTION, **override}).environment == "production"


def test_development_accepts_the_embedded_defaults() -> None:
    settings = Settings(database_url="sqlite:///./var/speedwatch.db")
    assert settings.executor == "local"


def test_devices_route_to_explicit_queues() -> None:
    settings = Settings(gpu_queues={"cuda": "gpu", "nvidia-h100": "gpu-h100"})
    assert settings.queue_for_device("cpu") == "cpu"
    assert settings.queue_for_device("nvidia-h100") == "gpu-h100"
    assert settings.queue_names() == ["cpu", "gpu", "gpu-h100", "maintenance", "webhooks"]
    with pytest.raises(KeyError):
        settings.queue_for_device("tpu")


def test_plain_postgresql_urls_use_psycopg3() -> None:
    assert normalize_database_url("postgresql://u:p%40ss@h:5432/db") == (
        "postgresql+psycopg://u:p%40ss@h:5432/db")
    assert normalize_database_url("sqlite:///x.db") == "sqlite:///x.db"


def test_production_needs_an_explicit_decision_on_anonymous_reads() -> None:
    unset = {k: v for k, v in SAFE_PRODUCTION.items() if k != "public_reads"}
    with pytest.raises(ValidationError) as caught:
        Settings(**unset)
    assert "public_reads: set SPEEDWATCH_PUBLIC_READS" in str(caught.value)
    assert Settings(**unset, public_reads=True).public_reads is True


def test_production_reads_the_decision_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in SAFE_PRODUCTION.items():
        monkeypatch.setenv(f"SPEEDWATCH_{key.upper()}", str(value))
    assert Settings().public_reads is False


INSECURE_PRODUCTION = {
    "SPEEDWATCH_ENVIRONMENT": "production",
    "SPEEDWATCH_DATABASE_URL": "postgresql://speedwatch:changethis@127.0.0.1:1/speedwatch",
    "SPEEDWATCH_BROKER_URL": "redis://:a-real-s3cr3t@127.0.0.1:1/0",
    "SPEEDWATCH_EXECUTOR": "celery",
    "SPEEDWATCH_PUBLIC_READS": "false",
}


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["beat"], ["migrate"]])
def test_services_refuse_to_start_on_a_placeholder_secret_in_one_line(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    from typer.testing import CliRunner

    from app.config import get_settings
    from cli.main import cli

    for key, value in INSECURE_PRODUCTION.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, command)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1, result.output
    assert "placeholder password 'changethis'" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["serve"], ["migrate"]])
def test_services_refuse_a_broker_without_a_password_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    from typer.testing import CliRunner

    from app.config import get_settings
    from cli.main import cli

    for key, value in {**INSECURE_PRODUCTION,
                       "SPEEDWATCH_DATABASE_URL": "postgresql://sw:a-real-s3cr3t@127.0.0.1:1/sw",
                       "SPEEDWATCH_BROKER_URL": "redis://127.0.0.1:1/0"}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, command)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert "broker_url: has no password" in line and "Traceback" not in line
