"""Dispatch hands committed cells to the configured executor, and says why when it cannot."""

from __future__ import annotations

import secrets
import socket
import time

import pytest
import redis

from app.config import Settings
from workers.dispatch import DispatchError, enqueue_cells


def _celery_settings(queue: str, broker: str = "redis://127.0.0.1:6379/0") -> Settings:
    return Settings(executor="celery", cpu_queue=queue, broker_url=broker,
                    database_url="sqlite:///unused.db")


def test_cells_land_in_their_queue_as_bare_ids() -> None:
    queue = f"cpu-dispatch-{secrets.token_hex(4)}"
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        enqueue_cells([(11, queue), (12, queue)], _celery_settings(queue))
        assert client.llen(queue) == 2
        import json

        message = json.loads(client.lindex(queue, -1) or b"{}")
        assert message["headers"]["task"] == "speedwatch.run_cell"
        assert message["headers"]["argsrepr"] == "[11]"
    finally:
        client.delete(queue)
        client.close()


def test_a_queue_that_is_not_configured_is_refused_with_its_name() -> None:
    with pytest.raises(DispatchError, match="gpu-h999"):
        enqueue_cells([(1, "gpu-h999")], _celery_settings("cpu"))


def test_a_broker_that_is_down_is_an_error_within_seconds_not_a_hang() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(DispatchError, match="broker unavailable"):
        enqueue_cells([(1, "cpu")], _celery_settings("cpu", f"redis://127.0.0.1:{port}/0"))
    assert time.monotonic() - started < 20

