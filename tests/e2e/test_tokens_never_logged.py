"""A token's value never reaches a log: not the API's own loggers, not uvicorn's access log of
`speedwatch serve`, whether the token is good, wrong, revoked or malformed."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import session_scope
from app.main import create_app
from app.services.tokens import create_token, hash_token, revoke_token
from devkit.factories import bearer, bench_result, ingest_body, run_request
from devkit.ports import free_port


def _tokens(settings: Settings) -> dict[str, str]:
    with session_scope(settings) as session:
        ci = create_token(session, "ci", "log-ci")[1]
        admin = create_token(session, "admin", "log-admin")[1]
        revoked, revoked_plain = create_token(session, "ci", "log-revoked")
        session.flush()
        revoke_token(session, revoked.id)
    return {"ci": ci, "admin": admin, "revoked": revoked_plain,
            "wrong": "sw_" + "W" * 43, "malformed": "sw_" + "M" * 300}


def _exercise(client: httpx.Client | TestClient, tokens: dict[str, str]) -> list[int]:
    """Every way a token is used or refused: writes, reads, token admin, bad tokens."""
    revision = secrets.token_hex(6)  # new runs and results, whatever earlier tests stored
    statuses = [
        client.post("/api/v1/runs", json=run_request(revision=revision),
                    headers=bearer(tokens["ci"])).status_code,
        client.post("/api/v1/results", json=ingest_body(bench_result(), revision=revision),
                    headers=bearer(tokens["ci"])).status_code,
        client.get("/api/v1/runs?limit=5", headers=bearer(tokens["ci"])).status_code,
        client.get("/api/v1/tokens", headers=bearer(tokens["admin"])).status_code,
        client.post("/api/v1/tokens", json={"scope": "read", "name": "made-in-test"},
                    headers=bearer(tokens["admin"])).status_code,
    ]
    for bad in ("revoked", "wrong", "malformed"):
        statuses.append(client.post("/api/v1/runs", json=run_request(),
                                    headers=bearer(tokens[bad])).status_code)
        statuses.append(client.get("/api/v1/runs", headers=bearer(tokens[bad])).status_code)
    return statuses


EXPECTED = [201, 201, 200, 200, 201, 401, 401, 401, 401, 401, 401]


def _secrets(tokens: dict[str, str]) -> list[str]:
    """The values, their hashes, and a distinctive slice of each (a truncated log line)."""
    found = []
    for value in tokens.values():
        found += [value, value[3:23], hash_token(value)]
    return found


def test_api_loggers_never_see_a_token(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = _tokens(settings)
    caplog.set_level(logging.DEBUG)
    with TestClient(create_app(settings)) as client:
        assert _exercise(client, tokens) == EXPECTED
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in caplog.records)
    for secret in _secrets(tokens):
        assert secret not in logged


@pytest.mark.slow
def test_serve_access_log_never_shows_a_token(settings: Settings) -> None:
    """`speedwatch serve` as deployed (uvicorn, access log at info) on a real socket."""
    tokens = _tokens(settings)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--no-migrate"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ),
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[0]
            assert time.monotonic() < deadline, "speedwatch serve did not start"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        with httpx.Client(base_url=base, timeout=30) as client:
            assert _exercise(client, tokens) == EXPECTED
            # tokens put in URLs, where the API never reads them
            in_urls = [client.get(f"/api/v1/runs?token={tokens['ci']}&limit=5"),
                       client.get(f"/?access_token={tokens['admin']}"),
                       client.get(f"/runs?note={tokens['wrong']}"),
                       client.get(f"/series/{tokens['revoked']}")]
            assert [r.status_code for r in in_urls] == [401, 401, 401, 401]
    finally:
        server.send_signal(signal.SIGINT)
        try:
            output = server.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            server.kill()
            output = server.communicate()[0]
    # The control: the access log is on and saw these requests.
    assert '"POST /api/v1/runs HTTP/1.1" 201' in output, output[-2000:]
    assert '"GET /api/v1/runs HTTP/1.1" 401' in output, output[-2000:]
    assert '"GET /api/v1/runs?token=***&limit=5 HTTP/1.1" 401' in output, output[-2000:]
    assert '"GET /?access_token=*** HTTP/1.1" 401' in output, output[-2000:]
    assert '"GET /runs?note=sw_... HTTP/1.1" 401' in output, output[-2000:]
    assert '"GET /series/sw_... HTTP/1.1" 401' in output, output[-2000:]
    for secret in _secrets(tokens):
        assert secret not in output
