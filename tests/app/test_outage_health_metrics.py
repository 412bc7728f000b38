"""Infrastructure: a database outage is a 503 with a reason (never a bare 500 or a hang);
/healthz reports each dependency; /metrics exposes requests and runs/cells by status."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from tests.app.factories import bearer, run_request

CLOSED_PORT_DB = "postgresql://postgres@127.0.0.1:1/speedwatch"


@pytest.fixture
def outage_client(settings: Settings) -> TestClient:
    down = settings.model_copy(update={"database_url": CLOSED_PORT_DB, "public_reads": True})
    return TestClient(create_app(down), raise_server_exceptions=False)


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/api/v1/runs", None),
    ("GET", "/api/v1/runs/1", None),
    ("GET", "/api/v1/series", None),
    ("POST", "/api/v1/runs", run_request()),
])
def test_database_outage_is_503_with_the_reason(
    outage_client: TestClient, method: str, path: str, body: object
) -> None:
    started = time.monotonic()
    response = outage_client.request(method, path, json=body, headers=bearer("sw_any"))
    assert response.status_code == 503
    detail = response.json()["detail"]
    assert detail.startswith("database unavailable: ")
    assert "127.0.0.1" in detail and "port 1" in detail
    assert response.headers["Retry-After"] == "5"
    assert time.monotonic() - started < 10


def test_healthz_names_the_failing_dependency(outage_client: TestClient) -> None:
    response = outage_client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["database"].startswith("unavailable: ")


def test_healthz_checks_the_real_broker_when_celery_executes(settings: Settings) -> None:
    up = settings.model_copy(update={"executor": "celery",
                                     "broker_url": "redis://127.0.0.1:6379/0"})
    with TestClient(create_app(up)) as client:
        assert client.get("/healthz").json() == {
            "status": "ok", "database": "ok", "broker": "ok"}
    down = settings.model_copy(update={"executor": "celery",
                                       "broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(down)) as client:
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"].startswith("unavailable: ")
    assert response.json()["database"] == "ok"


def test_metrics_count_requests_by_route_template_and_runs_by_status(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    run_id = client.post("/api/v1/runs", json=run_request(),
                         headers=bearer(ci_token)).json()["id"]
    client.get(f"/api/v1/runs/{run_id}", headers=bearer(read_token))
    client.get("/api/v1/runs/424242", headers=bearer(read_token))
    text = client.get("/metrics", headers=bearer(read_token)).text
    assert ('speedwatch_http_requests_total{method="GET",route="/api/v1/runs/{run_id}",'
            'status="200"} 1.0') in text
    assert ('speedwatch_http_requests_total{method="GET",route="/api/v1/runs/{run_id}",'
            'status="404"} 1.0') in text
    assert 'speedwatch_runs{status="queued"} 1.0' in text
    assert 'speedwatch_cells{status="queued"} 2.0' in text
    assert "speedwatch_database_up 1.0" in text
    assert "speedwatch_http_request_duration_seconds_bucket" in text


def test_metrics_still_answer_during_a_database_outage(outage_client: TestClient) -> None:
    response = outage_client.get("/metrics")
    assert response.status_code == 200
    assert "speedwatch_database_up 0.0" in response.text
