"""The embedded default: SQLite, no broker, cells run in a thread of the API process."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings, get_settings
from app.db import dispose_engines, session_scope, upgrade
from app.main import create_app
from app.services.tokens import create_token
from tests.workers.helpers import tiny_request
from workers.local import get_local_executor


@pytest.fixture
def sqlite_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    for key, value in {"SPEEDWATCH_DATABASE_URL": url, "SPEEDWATCH_EXECUTOR": "local",
                       "SPEEDWATCH_PUBLIC_READS": "true",
                       "SPEEDWATCH_VENV_CACHE_DIR": str(tmp_path / "venvs")}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    upgrade(url)
    yield get_settings()
    get_settings.cache_clear()
    dispose_engines()


@pytest.mark.slow
def test_a_triggered_run_is_measured_in_process_and_served(sqlite_settings: Settings) -> None:
    with session_scope(sqlite_settings) as session:
        _, token = create_token(session, "ci", "local")
    executor = get_local_executor()
    with TestClient(create_app(sqlite_settings)) as client:
        response = client.post(
            "/api/v1/runs", json=tiny_request(weights=["constant", "tensor"]),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]

        assert executor.wait_idle(timeout_s=240), "local executor did not finish the cells"
        deadline = time.monotonic() + 10
        while (body := client.get(f"/api/v1/runs/{run_id}").json())["status"] not in (
            "done", "failed"
        ):
            assert time.monotonic() < deadline, body
            time.sleep(0.2)

    assert (body["status"], body["verdict"]) == ("done", "pass"), body["reasons"]
    assert body["progress"]["done"] == 2
    assert all(c["result"]["speedup"] > 0 for c in body["cells"])
    assert executor.pending == 0


def test_on_a_gpu_host_the_served_app_has_its_executor_start_the_fork_server_first(
        sqlite_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first process of the first GPU run then finds the server's imports done (they
    took 13-18 s on an H200). No GPU here: NVML's inventory is a stand-in naming one."""
    from benchmarks import fingerprint, forkserver

    monkeypatch.setattr(fingerprint, "visible_gpus",
                        lambda state=False: [{"index": 0, "name": "stand-in, no GPU here"}])
    executor = get_local_executor()
    try:
        with TestClient(create_app(sqlite_settings)):
            assert executor.wait_idle(30)
            servers = dict(forkserver._SERVERS)
            assert len(servers) == 1
            ((key, server),) = servers.items()
            assert executor._thread is not None
            assert key[-1] == executor._thread.ident  # the thread that forks the children
            assert key[0] == sys.executable
            server.wait_ready()  # a working server, not just a process
    finally:
        forkserver.close_all()


def test_without_a_gpu_no_fork_server_is_started(sqlite_settings: Settings) -> None:
    from benchmarks import forkserver

    with TestClient(create_app(sqlite_settings)):
        assert get_local_executor().wait_idle(30)
    assert not forkserver._SERVERS
