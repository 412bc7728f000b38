"""The regression life cycle: opened by a regressed cell, one active per series, acknowledged
and resolved by a person, auto-resolved when the series recovers against its old baseline."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.models import Regression
from devkit.factories import bearer, tiny_spec
from tests.app._asserts import assert_needs_token, assert_unknown_id
from tests.app.detection_docs import body, measured

KEY = "resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu/tauto/nographs"


def post(client: TestClient, token: str, document: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/results", json=document, headers=bearer(token))
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = response.json()
    return stored


def regressions(client: TestClient, token: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/api/v1/regressions", params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def regress(client: TestClient, token: str) -> dict[str, Any]:
    """v1 at 2.0x, v2 at 1.6x with fusion lost: the series' regression."""
    post(client, token, body(measured(2.0, evidence={"kernels_per_inference": 58}), "v1"))
    post(client, token, body(measured(1.6, evidence={"kernels_per_inference": 161}), "v2"))
    (opened,) = regressions(client, token)
    return opened


def test_a_regressed_cell_opens_a_regression_with_magnitude_and_evidence(
    client: TestClient, ci_token: str
) -> None:
    opened = regress(client, ci_token)
    assert opened["status"] == "open" and opened["series_key"] == KEY
    assert opened["project"] == "vision" and opened["baseline_kind"] == "previous"
    assert opened["magnitude"] == pytest.approx(-0.2, abs=0.01)
    assert opened["evidence"] == "kernels per inference 58 -> 161"
    assert any("slower, past the 3% threshold" in r for r in opened["reasons"])


def test_a_series_still_regressed_keeps_its_one_regression(
    client: TestClient, ci_token: str
) -> None:
    regress(client, ci_token)
    post(client, ci_token, body(measured(1.3), "v3"))  # worse again against v2
    assert len(regressions(client, ci_token)) == 1


def test_another_project_measuring_the_same_series_has_its_own_regression(
    client: TestClient, ci_token: str
) -> None:
    regress(client, ci_token)
    post(client, ci_token, body(measured(2.0), "v1", project="audio"))
    post(client, ci_token, body(measured(1.6), "v2", project="audio"))
    (audio,) = regressions(client, ci_token, project="audio")
    assert audio["series_key"] == KEY and audio["status"] == "open"
    assert len(regressions(client, ci_token, status="open")) == 2
    # ?series= is the key, in every project that measures it; ?project= narrows it
    assert len(regressions(client, ci_token, series=KEY)) == 2
    (narrowed,) = regressions(client, ci_token, series=KEY, project="audio")
    assert narrowed["id"] == audio["id"]


def test_the_database_refuses_a_second_active_regression_per_series(
    client: TestClient, ci_token: str, session: Session
) -> None:
    opened = regress(client, ci_token)
    first = session.get(Regression, opened["id"])
    assert first is not None
    twin = Regression(
        project_id=first.project_id, series_id=first.series_id,
        opened_by_run_id=first.opened_by_run_id,
        opened_by_result_id=first.baseline_result_id, baseline_kind="previous",
        baseline_description="x", threshold=0.03, status="acknowledged", evidence="",
        reasons=[],
    )
    session.add(twin)
    with pytest.raises(IntegrityError, match="ix_regressions_one_active_per_series"):
        session.flush()
    session.rollback()


def test_recovery_against_the_pre_regression_baseline_resolves_it(
    client: TestClient, ci_token: str
) -> None:
    opened = regress(client, ci_token)
    post(client, ci_token, body(measured(1.7), "v3"))  # better than v2, still below v1
    assert regressions(client, ci_token)[0]["status"] == "open"
    recovered = post(client, ci_token, body(measured(2.0), "v4"))
    (resolved,) = regressions(client, ci_token)
    assert resolved["id"] == opened["id"] and resolved["status"] == "resolved"
    assert resolved["resolved_by_result_id"] == recovered["result_id"]
    assert resolved["resolved_at"] is not None


def test_acknowledge_then_resolve_by_hand_records_who(
    client: TestClient, ci_token: str, admin_token: str
) -> None:
    opened = regress(client, ci_token)
    path = f"/api/v1/regressions/{opened['id']}"
    acked = client.post(f"{path}/acknowledge", headers=bearer(ci_token))
    assert acked.status_code == 200, acked.text
    assert acked.json()["status"] == "acknowledged"
    assert acked.json()["acknowledged_by"] == "test-ci"
    resolved = client.post(f"{path}/resolve", headers=bearer(admin_token))
    assert resolved.json()["status"] == "resolved"
    assert client.get(path, headers=bearer(ci_token)).json()["status"] == "resolved"


def test_a_transition_that_does_not_exist_is_a_409_naming_the_status(
    client: TestClient, ci_token: str
) -> None:
    opened = regress(client, ci_token)
    path = f"/api/v1/regressions/{opened['id']}"
    assert client.post(f"{path}/resolve", headers=bearer(ci_token)).status_code == 200
    for action in ("acknowledge", "resolve"):
        response = client.post(f"{path}/{action}", headers=bearer(ci_token))
        assert response.status_code == 409, response.text
        assert "is resolved" in response.json()["detail"]


def test_a_read_token_cannot_acknowledge(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    opened = regress(client, ci_token)
    response = client.post(f"/api/v1/regressions/{opened['id']}/acknowledge",
                           headers=bearer(read_token))
    assert response.status_code == 403 and "'ci' scope" in response.json()["detail"]


def test_listing_filters_by_status_project_and_series_and_pages(
    client: TestClient, ci_token: str
) -> None:
    regress(client, ci_token)
    other = tiny_spec(weights="tensor")
    post(client, ci_token, body(measured(2.0, spec=other), "v1"))
    post(client, ci_token, body(measured(1.5, spec=other), "v2"))
    assert len(regressions(client, ci_token, status="open")) == 2
    assert regressions(client, ci_token, status="resolved") == []
    assert regressions(client, ci_token, project="elsewhere") == []
    (only,) = regressions(client, ci_token, series=KEY)
    assert only["series_key"] == KEY
    first = client.get("/api/v1/regressions", params={"limit": 1},
                       headers=bearer(ci_token)).json()
    assert len(first["items"]) == 1 and first["next_cursor"] is not None
    rest = regressions(client, ci_token, limit=1, cursor=first["next_cursor"])
    assert len(rest) == 1 and rest[0]["id"] != first["items"][0]["id"]
    bad = client.get("/api/v1/regressions", params={"limit": 1000}, headers=bearer(ci_token))
    assert bad.status_code == 422


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/v1/regressions"),
    ("GET", "/api/v1/regressions/1"),
    ("POST", "/api/v1/regressions/1/acknowledge"),
    ("POST", "/api/v1/regressions/1/resolve"),
])
def test_every_regression_endpoint_needs_a_token(
    client: TestClient, method: str, path: str
) -> None:
    assert_needs_token(client, method, path)


@pytest.mark.parametrize(("method", "suffix"), [
    ("GET", ""), ("POST", "/acknowledge"), ("POST", "/resolve"),
])
def test_an_unknown_regression_is_a_404(
    client: TestClient, ci_token: str, method: str, suffix: str
) -> None:
    assert_unknown_id(client, method, f"/api/v1/regressions/999999{suffix}",
                      bearer(ci_token), "regression 999999")
