"""A defect answers like every other error: JSON, status 500, and the connection closed out
loud, so a keep-alive client's next request goes on a new connection instead of a reset one.
Against a real uvicorn server (the keep-alive behaviour is the server's, not the app's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from app.config import Settings
from app.main import create_app
from devkit.ports import free_port


@pytest.fixture
def server_url(settings: Settings) -> Iterator[str]:
    app = create_app(settings)

    @app.get("/boom", include_in_schema=False)
    def boom() -> None:
        raise RuntimeError("a defect with internals: /secret/path")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_an_unhandled_error_is_a_json_500_that_closes_its_connection_and_the_client_goes_on(
    server_url: str,
) -> None:
    with httpx.Client(base_url=server_url, timeout=10) as client:
        assert client.get("/healthz").status_code == 200  # a kept-alive connection
        response = client.get("/boom")
        assert response.status_code == 500
        assert response.json() == {"detail": "internal error: the server logged it"}
        assert response.headers["connection"] == "close"
        assert "/secret/path" not in response.text
        for _ in range(3):  # the same client, no reset connection
            assert client.get("/healthz").status_code == 200
