"""The deployment files: docker-compose.yml validates and describes the documented services."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("docker-compose is not installed (scripts/test installs it with apt-get)")


def _config(*args: str, password: str | None = "a-real-secret",
            redis_password: str | None = "another-real-secret",
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("POSTGRES_PASSWORD", "REDIS_PASSWORD")}
    if password is not None:
        env["POSTGRES_PASSWORD"] = password
    if redis_password is not None:
        env["REDIS_PASSWORD"] = redis_password
    return subprocess.run([*_compose(), "-f", str(ROOT / "docker-compose.yml"), "config", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
                          check=False)


def test_compose_file_validates() -> None:
    proc = _config("-q")
    assert proc.returncode == 0, proc.stderr


def test_compose_runs_every_part_with_a_gpu_reserved_for_the_gpu_worker() -> None:
    proc = _config("--services")
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == {"postgres", "redis", "api", "beat", "worker-cpu",
                                        "worker-hooks", "worker-gpu"}
    import yaml

    config = yaml.safe_load(_config().stdout)
    services = config["services"]
    assert "speedwatch migrate" in " ".join(services["api"]["command"])
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"] and devices[0]["driver"] == "nvidia"
    # a multi-GPU host: every GPU reserved, one pinned worker each, host pids for NVML
    assert devices[0]["count"] == "all"
    assert services["worker-gpu"]["command"][-2:] == ["--gpus", "all"]
    assert services["worker-gpu"]["pid"] == "host"
    for name in ("api", "beat", "worker-cpu", "worker-hooks", "worker-gpu"):
        env = services[name]["environment"]
        assert env["SPEEDWATCH_EXECUTOR"] == "celery"
        assert env["SPEEDWATCH_ENVIRONMENT"] == "production"


def test_compose_refuses_to_start_without_a_database_password() -> None:
    proc = _config("-q", password=None)
    assert proc.returncode != 0
    assert "POSTGRES_PASSWORD" in proc.stderr


def test_compose_refuses_to_start_without_a_broker_password() -> None:
    proc = _config("-q", redis_password=None)
    assert proc.returncode != 0
    assert "REDIS_PASSWORD" in proc.stderr


def test_compose_environment_passes_the_production_settings_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The settings the compose file gives the services start in production as they are."""
    import yaml

    from app.config import Settings

    services = yaml.safe_load(_config().stdout)["services"]
    for name in ("api", "beat", "worker-cpu", "worker-gpu"):
        for key in [k for k in os.environ if k.startswith("SPEEDWATCH_")]:
            monkeypatch.delenv(key)
        for key, value in services[name]["environment"].items():
            monkeypatch.setenv(key, str(value))
        settings = Settings()
        assert settings.environment == "production" and settings.public_reads is False
