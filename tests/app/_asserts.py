"""Shared endpoint assertions: every endpoint gets an unauthenticated and an unknown-id test."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def assert_needs_token(
    client: TestClient, method: str, path: str, json: Any = None
) -> None:
    """Without a token: 401, a reason that says a token is needed, and a Bearer challenge."""
    response = client.request(method, path, json=json)
    assert response.status_code == 401, response.text
    assert "token" in response.json()["detail"]
    assert response.headers["WWW-Authenticate"] == "Bearer"


def assert_unknown_id(
    client: TestClient, method: str, path: str, headers: dict[str, str], needle: str
) -> None:
    """An id that does not exist: 404 whose detail names it (never a 500 or an empty 200)."""
    response = client.request(method, path, headers=headers)
    assert response.status_code == 404, response.text
    detail = response.json()["detail"]
    assert "not found" in detail and needle in detail
