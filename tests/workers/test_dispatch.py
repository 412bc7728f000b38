"""Dispatch hands committed cells to the configured executor, and says why when it cannot."""

from __future__ import annotations

import secrets
import time

import pytest
import redis

from app.config import Settings
from devkit.ports import free_port
from workers.dispatch import DispatchError, enqueue_cells


def _celery_settings(queue: str, broker: str = "redis://127.0.0.1:6379/0") -> Settings:
    return Settings(executor="celery", cpu_queue=queue, broker_url=broker,
                    database_url="sqlite:///unused.db")


def test_cells_land_in_their_queue_as_bare_ids() -> None:
    queue = f"cpu-dispatch-{secrets.token_hex(4)}"
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        settings = _celery_settings(queue).model_copy(update={"interleave_cells": 1})
        enqueue_cells([(11, queue), (12, queue)], settings)
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
    port = free_port()  # a port nothing listens on
    started = time.monotonic()
    with pytest.raises(DispatchError, match="broker unavailable"):
        enqueue_cells([(1, "cpu")], _celery_settings("cpu", f"redis://127.0.0.1:{port}/0"))
    assert time.monotonic() - started < 20



def test_a_runs_cells_on_one_queue_travel_as_one_group_with_limits_for_all_of_them() -> None:
    """One worker measures a group's cells in turns (workers.execution.execute_cells); its time
    limits are the per-cell limits times the cells it holds. Another queue's cells go in a
    message of their own, and `interleave_cells` caps a group's size."""
    import json

    from workers.celery_app import time_limits

    queue, other = (f"cpu-dispatch-{secrets.token_hex(4)}" for _ in range(2))
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    settings = Settings(executor="celery", cpu_queue=queue, gpu_queues={"cuda": other},
                        broker_url="redis://127.0.0.1:6379/0",
                        database_url="sqlite:///unused.db", interleave_cells=3)
    try:
        enqueue_cells([(1, queue), (2, other), (3, queue), (4, queue), (5, queue)], settings)
        mine = [json.loads(m) for m in reversed(client.lrange(queue, 0, -1))]
        assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in mine] == [
            ("speedwatch.run_cells", "[[1, 3, 4]]"), ("speedwatch.run_cell", "[5]")]
        soft, hard = time_limits(settings)
        assert mine[0]["headers"]["timelimit"] == [hard * 3, soft * 3]
        theirs = [json.loads(m)["headers"]["argsrepr"] for m in client.lrange(other, 0, -1)]
        assert theirs == ["[2]"]
    finally:
        client.delete(queue, other)
        client.close()


@pytest.mark.parametrize("visibility", [10, 3600])
def test_a_worker_killed_mid_sweep_blocks_the_others_sweeps_one_interval_not_five_minutes(
        visibility: int) -> None:
    """kombu's sweep for dead workers' messages takes a Redis lock (300 s by default)."""
    from workers.celery_app import make_celery

    settings = _celery_settings("cpu").model_copy(
        update={"broker_visibility_timeout_seconds": visibility})
    with make_celery(settings).connection_for_write() as connection:
        channel = connection.default_channel  # the real Redis channel a worker would use
        interval = channel.unacked_restore_interval
        assert channel.visibility_timeout == visibility
        assert interval == max(1, min(60, visibility // 4))
        assert channel.unacked_mutex_expire == max(10, interval) < 300


def test_beats_reconciler_sweeps_have_their_own_queue_and_expire_unconsumed() -> None:
    """Behind benchmark cells on the cpu queue, sweeps piled up during an outage (107 of
    them) and the last run finished long after the broker returned."""
    from workers.celery_app import RECONCILE_TASK, make_celery

    tag = secrets.token_hex(4)
    settings = _celery_settings(f"cpu-{tag}").model_copy(update={
        "maintenance_queue": f"maintenance-{tag}", "reconcile_interval_seconds": 7.0})
    app = make_celery(settings)
    entry = app.conf.beat_schedule["reconcile-stuck-cells"]
    client = redis.Redis.from_url(settings.broker_url)
    try:
        # what beat does with the entry: send the task with the entry's options
        app.send_task(entry["task"], **entry["options"])
        assert client.llen(settings.cpu_queue) == 0
        import json

        message = json.loads(client.lindex(settings.maintenance_queue, -1) or b"{}")
        assert message["headers"]["task"] == RECONCILE_TASK
        assert message["headers"]["expires"] is not None  # stale after one interval
        assert entry["schedule"] == entry["options"]["expires"] == 7.0
    finally:
        client.delete(settings.cpu_queue, settings.maintenance_queue)
        client.close()
