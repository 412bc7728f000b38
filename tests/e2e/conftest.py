"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from app.config import Settings
from app.main import create_app
from devkit.ports import free_port

# The fault tests' service-process fixtures (real API and worker processes, a private
# queue, a CI token), for end-to-end tests that need the same.
from tests.faults.conftest import base_env, procs, queue, token  # noqa: F401


@pytest.fixture
def api_url(settings: Settings) -> Iterator[str]:
    """The real app on a real socket (executor "none": runs are recorded, not measured)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
