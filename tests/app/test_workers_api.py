"""Workers as they announce themselves, each queue's consumers, and interpreters checked at
the API against what the workers of the run's queue announce.

Heartbeats are written through the service the worker's heartbeat thread calls
(app.services.workers.heartbeat) with `now` passed in; a real Celery worker announcing
itself is in tests/faults/test_worker_registry.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.main import create_app
from app.models import Run
from app.services.workers import Announcement, heartbeat, stopped
from devkit.factories import bearer, bench_result, ingest_body, run_request

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "device_class": "nvidia-h100",
        "memory_total_bytes": 85_520_809_984}


def _beat(session: Session, name: str, queues: list[str], *, ago_s: float = 0.0,
          pid: int = 100, interpreters: list[str] | None = None,
          gpus: list[dict[str, object]] | None = None) -> None:
    heartbeat(session, Announcement(
        name=name, host=name.split("@")[-1], pid=pid, queues=queues,
        interpreters=interpreters or [], gpus=gpus or [], version="0.1.0"),
        now=datetime.now(timezone.utc) - timedelta(seconds=ago_s))
    session.commit()


def _workers(client: TestClient, token: str) -> dict[str, object]:
    response = client.get("/api/v1/workers", headers=bearer(token))
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_worker_is_listed_with_its_queues_host_gpus_interpreters_and_last_heartbeat(
    client: TestClient, session: Session, read_token: str
) -> None:
    _beat(session, "speedwatch-gpu@gpu-host-1", ["gpu"], interpreters=["trt-2.7"],
          gpus=[H100], pid=4242)

    body = _workers(client, read_token)

    [worker] = body["workers"]  # type: ignore[misc]
    assert worker["name"] == "speedwatch-gpu@gpu-host-1"
    assert (worker["host"], worker["pid"], worker["kind"]) == ("gpu-host-1", 4242, "celery")
    assert (worker["state"], worker["queues"]) == ("alive", ["gpu"])
    assert worker["interpreters"] == ["trt-2.7"]
    assert [{k: v for k, v in gpu.items() if k in H100} for gpu in worker["gpus"]] == [H100]
    assert worker["last_heartbeat_at"] and worker["started_at"]


def test_a_silent_worker_is_lost_and_a_cleanly_stopped_one_says_so(
    client: TestClient, session: Session, settings: Settings, read_token: str
) -> None:
    _beat(session, "alive@h", ["cpu"])
    _beat(session, "killed@h", ["cpu"], ago_s=settings.worker_lost_after() + 5)
    _beat(session, "stopped@h", ["cpu"], pid=7)
    stopped(session, "stopped@h", pid=7)
    session.commit()

    states = {w["name"]: w["state"] for w in _workers(client, read_token)["workers"]}  # type: ignore[attr-defined]

    assert states == {"alive@h": "alive", "killed@h": "lost", "stopped@h": "stopped"}


def test_a_restarted_worker_takes_over_its_row_and_the_old_process_cannot_mark_it_stopped(
    session: Session, settings: Settings, client: TestClient, read_token: str
) -> None:
    _beat(session, "w@h", ["cpu"], pid=1, ago_s=600)
    _beat(session, "w@h", ["cpu"], pid=2)
    stopped(session, "w@h", pid=1)  # the old process's late shutdown hook
    session.commit()

    [worker] = _workers(client, read_token)["workers"]  # type: ignore[misc]
    assert (worker["pid"], worker["state"]) == (2, "alive")


def test_each_queue_shows_its_live_workers_and_the_cells_waiting_on_it(
    client: TestClient, session: Session, ci_token: str, read_token: str
) -> None:
    assert client.post("/api/v1/runs", json=run_request(), headers=bearer(ci_token)
                       ).status_code == 201  # two cpu cells, nobody consumes them
    _beat(session, "g@h", ["gpu"])

    queues = {q["name"]: q for q in _workers(client, read_token)["queues"]}  # type: ignore[attr-defined]

    assert queues["cpu"] == {"name": "cpu", "alive_workers": 0, "queued_cells": 2,
                             "running_cells": 0}
    assert queues["gpu"]["alive_workers"] == 1


def test_workers_forgotten_after_their_retention_leave_the_list(
    session: Session, settings: Settings, read_token: str
) -> None:
    _beat(session, "old@h", ["cpu"], ago_s=3600)
    with TestClient(create_app(settings.model_copy(
            update={"worker_forget_seconds": 600}))) as client:
        assert _workers(client, read_token)["workers"] == []


def test_the_embedded_executor_lists_itself_with_this_servers_interpreters(
    session: Session, settings: Settings, read_token: str
) -> None:
    local = settings.model_copy(update={"executor": "local",
                                        "interpreters": {"trt-2.7": "/opt/trt27/bin/python"}})
    with TestClient(create_app(local)) as client:
        [worker] = _workers(client, read_token)["workers"]  # type: ignore[misc]
    assert (worker["kind"], worker["state"]) == ("in-process", "alive")
    assert worker["interpreters"] == ["trt-2.7"]
    assert "cpu" in worker["queues"]


def test_only_queues_a_live_worker_consumes_or_a_cell_waits_on_are_listed(
    session: Session, settings: Settings, read_token: str
) -> None:
    """The embedded executor on a host without a GPU serves the cpu queue only: no `gpu` queue
    is shown as live there, and a configured queue nobody consumes is not listed at all."""
    from benchmarks.fingerprint import visible_gpus

    local = settings.model_copy(update={"executor": "local",
                                        "gpu_queues": {"cuda": "gpu", "nvidia-h100": "h100"}})
    with TestClient(create_app(local)) as client:
        listed = _workers(client, read_token)
    [worker] = listed["workers"]  # type: ignore[misc]
    queues = [q["name"] for q in listed["queues"]]  # type: ignore[attr-defined]
    if visible_gpus():
        pytest.skip("this host has a GPU: its embedded executor serves the GPU queues")
    assert worker["queues"] == ["cpu"]
    assert queues == ["cpu"]


# ---- interpreters -------------------------------------------------------------------------

def _trigger_with(client: TestClient, token: str, interpreter: str) -> object:
    return client.post("/api/v1/runs", headers=bearer(token),
                       json=run_request(environment={"interpreter": interpreter}))


def test_an_interpreter_no_worker_of_the_queue_announces_is_422_naming_the_field(
    client: TestClient, session: Session, ci_token: str
) -> None:
    _beat(session, "cpu@h", ["cpu"], interpreters=["trt-2.6"])
    _beat(session, "gpu@h", ["gpu"], interpreters=["trt-2.7"])  # another queue's

    response = _trigger_with(client, ci_token, "trt-2.7")

    assert response.status_code == 422, response.text  # type: ignore[attr-defined]
    [error] = response.json()["errors"]  # type: ignore[attr-defined]
    assert error["field"] == "environment.interpreter"
    assert "'trt-2.7' is not an interpreter of any worker of queue 'cpu'" in error["message"]
    assert "announced there: trt-2.6" in error["message"]
    assert session.scalar(select(func.count()).select_from(Run)) == 0


def test_an_interpreter_is_refused_when_no_worker_announced_any(
    client: TestClient, ci_token: str
) -> None:
    response = _trigger_with(client, ci_token, "trt-2.7")
    assert response.status_code == 422  # type: ignore[attr-defined]
    assert "no worker of that queue announces any" in response.json()["detail"]  # type: ignore[attr-defined]


def test_an_interpreter_a_worker_of_the_queue_announces_is_accepted(
    client: TestClient, session: Session, ci_token: str
) -> None:
    _beat(session, "cpu@h", ["cpu"], interpreters=["trt-2.6", "trt-2.7"])
    response = _trigger_with(client, ci_token, "trt-2.7")
    assert response.status_code == 201, response.text  # type: ignore[attr-defined]
    assert response.json()["environment"]["interpreter"] == "trt-2.7"  # type: ignore[attr-defined]


# ---- interpreters of uploaded results -----------------------------------------------------

def _upload_with(client: TestClient, token: str, interpreter: str) -> object:
    return client.post("/api/v1/results", headers=bearer(token), json=ingest_body(
        bench_result(), revision=f"upload-{interpreter}",
        environment={"interpreter": interpreter}))


def test_an_upload_naming_an_interpreter_no_worker_announces_is_422_and_stores_nothing(
    clean_db: None, client: TestClient, session: Session, ci_token: str
) -> None:
    _beat(session, "cpu@h", ["cpu"], interpreters=["trt-2.6"])

    response = _upload_with(client, ci_token, "made-up-1.0")

    assert response.status_code == 422, response.text  # type: ignore[attr-defined]
    [error] = response.json()["errors"]  # type: ignore[attr-defined]
    assert error["field"] == "environment.interpreter"
    assert error["message"] == ("'made-up-1.0' is not an interpreter of any worker; "
                                "announced: trt-2.6")
    assert session.scalar(select(func.count()).select_from(Run)) == 0


def test_an_upload_naming_an_interpreter_a_worker_announces_is_stored(
    client: TestClient, session: Session, ci_token: str
) -> None:
    _beat(session, "gpu@upload-host", ["gpu"], interpreters=["trt-uploaded-2.7"])
    response = _upload_with(client, ci_token, "trt-uploaded-2.7")
    assert response.status_code == 201, response.text  # type: ignore[attr-defined]
