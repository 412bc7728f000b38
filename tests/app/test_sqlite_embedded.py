"""The embedded default (SQLite file) runs the same migrations and serves the same API."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.config import Settings
from app.db import session_scope, upgrade
from app.main import create_app
from app.services.tokens import create_token
from devkit.factories import bearer, bench_result, ingest_body, run_request


def test_sqlite_file_serves_trigger_ingest_and_reads(tmp_path: Path, settings: Settings) -> None:
    embedded = settings.model_copy(
        update={"database_url": f"sqlite:///{tmp_path / 'var' / 'speedwatch.db'}"})
    upgrade(embedded.database_url)
    with session_scope(embedded) as session:
        _, token = create_token(session, "admin")
    with TestClient(create_app(embedded)) as client:
        run = client.post("/api/v1/runs", json=run_request(), headers=bearer(token))
        assert run.status_code == 201 and len(run.json()["cells"]) == 2
        again = client.post("/api/v1/runs", json=run_request(), headers=bearer(token))
        assert again.status_code == 200 and again.json()["id"] == run.json()["id"]

        body = ingest_body(bench_result(speedup=1.7))
        stored = client.post("/api/v1/results", json=body, headers=bearer(token))
        assert stored.status_code == 201
        assert client.post("/api/v1/results", json=body, headers=bearer(token)).status_code == 200
        key = stored.json()["series_key"]
        points = client.get(f"/api/v1/series/{key}/points", headers=bearer(token)).json()
        assert [p["speedup"] for p in points["points"]] == [1.7]
        assert points["points"][0]["created_at"].endswith("Z")
