"""Infrastructure: a database outage is a 503 with a reason (never a bare 500 or a hang);
/healthz reports each dependency; /metrics exposes requests and runs/cells by status."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.config import Settings
from app.main import create_app
from devkit.factories import bearer, run_request

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


def test_a_database_outage_is_not_ready_yet_the_process_is_alive(
    outage_client: TestClient,
) -> None:
    for path in ("/healthz", "/readyz"):
        response = outage_client.get(path)
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "unavailable"
        assert body["database"].startswith("unavailable: ")
    # liveness reads no dependency: restarting the process would not bring the store back
    assert outage_client.get("/livez").json() == {"status": "ok"}


def test_a_broker_outage_degrades_health_but_leaves_the_api_ready(settings: Settings) -> None:
    up = settings.model_copy(update={"executor": "celery",
                                     "broker_url": "redis://127.0.0.1:6379/0"})
    with TestClient(create_app(up)) as client:
        assert client.get("/healthz").json() == {
            "status": "ok", "database": "ok", "broker": "ok"}
    down = settings.model_copy(update={"executor": "celery",
                                       "broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(down)) as client:
        health, ready = client.get("/healthz"), client.get("/readyz")
        live = client.get("/livez")
    # reads, uploads and triggers work without the broker: a load balancer keeps the API
    for response in (health, ready):
        assert response.status_code == 200
        assert response.json()["status"] == "degraded"
        assert response.json()["broker"].startswith("unavailable: ")
        assert response.json()["database"] == "ok"
    assert live.status_code == 200


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


SCRAPE = "scrape-0123456789abcdef"


def test_with_private_reads_the_settings_metrics_token_scrapes_through_a_database_outage(
    settings: Settings,
) -> None:
    """A store-held `read` token cannot be checked while the store is down; the metrics
    token is checked against the settings, so the scrape still reports the outage."""
    down = settings.model_copy(update={"database_url": CLOSED_PORT_DB, "public_reads": False,
                                       "metrics_token": SecretStr(SCRAPE)})
    client = TestClient(create_app(down), raise_server_exceptions=False)
    response = client.get("/metrics", headers=bearer(SCRAPE))
    assert response.status_code == 200
    assert "speedwatch_database_up 0.0" in response.text
    assert client.get("/metrics", headers=bearer("sw_some_read_token")).status_code == 503
    assert client.get("/metrics").status_code == 401


def test_the_metrics_token_opens_metrics_only_and_a_wrong_one_is_refused(
    settings: Settings, read_token: str
) -> None:
    private = settings.model_copy(update={"public_reads": False,
                                          "metrics_token": SecretStr(SCRAPE)})
    with TestClient(create_app(private)) as client:
        assert client.get("/metrics", headers=bearer(SCRAPE)).status_code == 200
        assert client.get("/metrics", headers=bearer(read_token)).status_code == 200
        assert client.get("/metrics", headers=bearer(SCRAPE + "x")).status_code == 401
        assert client.get("/api/v1/runs", headers=bearer(SCRAPE)).status_code == 401


def test_a_metrics_token_shorter_than_16_characters_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match="metrics_token"):
        Settings(metrics_token="short")  # type: ignore[arg-type]


def test_a_session_whose_connection_died_after_the_route_closes_without_raising(
    settings: Settings,
) -> None:
    """PostgreSQL restarted between a route's work and the request's end: the session's
    ROLLBACK fails. Raising then broke an answer already on its way."""
    import psycopg
    from sqlalchemy import text
    from starlette.requests import Request

    from app.api.deps import get_session
    from app.db import normalize_database_url

    app = create_app(settings)
    sessions = get_session(Request({"type": "http", "app": app}))
    session = next(sessions)
    pid = session.execute(text("SELECT pg_backend_pid()")).scalar()
    admin = normalize_database_url(settings.database_url).replace("postgresql+psycopg",
                                                                  "postgresql")
    with psycopg.connect(admin, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StopIteration):
        next(sessions)  # the teardown ran and raised nothing
