"""A project's detection policy over HTTP: read it with `read`, replace it with `admin`;
a bad policy is a 422 naming its field and leaves the stored one as it was; a per-series
threshold changes the verdict for that series only and is stored on the regression."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from devkit.factories import bearer, tiny_spec
from tests.app._asserts import assert_needs_token, assert_unknown_id
from tests.app.detection_docs import body, measured

URL = "/api/v1/projects/vision/detection"


def post(client: TestClient, token: str, document: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/results", json=document, headers=bearer(token))
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = response.json()
    return stored


def verdict(client: TestClient, token: str, stored: dict[str, Any]) -> str:
    run = client.get(f"/api/v1/runs/{stored['run_id']}", headers=bearer(token)).json()
    return str(run["verdict"])


def put(client: TestClient, token: str, policy: dict[str, Any], url: str = URL) -> Any:
    return client.put(url, json=policy, headers=bearer(token))


def test_a_project_without_a_policy_reads_as_the_defaults(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    post(client, ci_token, body(measured(2.0), "v1"))
    response = client.get(URL, headers=bearer(read_token))
    assert response.status_code == 200, response.text
    assert response.json() == {
        "project": "vision", "stored": False,
        "policy": {"baseline": "previous", "threshold": 0.03, "window": 10,
                   "pinned_run_id": None, "series_thresholds": {}, "confirm": True,
                   "confirm_processes": 3},
    }


def test_an_admin_replaces_the_policy_and_reads_it_back(
    client: TestClient, ci_token: str, read_token: str, admin_token: str
) -> None:
    pinned = post(client, ci_token, body(measured(2.0), "release"))
    policy = {"baseline": "pinned", "pinned_run_id": pinned["run_id"], "threshold": 0.05,
              "series_thresholds": {"some/series": 0.1}}
    response = put(client, admin_token, policy)
    assert response.status_code == 200, response.text
    read = client.get(URL, headers=bearer(read_token)).json()
    assert read["stored"] is True
    assert read["policy"] == {**policy, "window": 10, "confirm": True, "confirm_processes": 3}
    # PUT replaces the whole policy: what is left out goes back to its default
    assert put(client, admin_token, {"window": 5}).status_code == 200
    assert client.get(URL, headers=bearer(read_token)).json()["policy"] == {
        "baseline": "previous", "threshold": 0.03, "window": 5, "pinned_run_id": None,
        "series_thresholds": {}, "confirm": True, "confirm_processes": 3}


def test_a_policy_can_be_set_before_the_projects_first_run(
    client: TestClient, read_token: str, admin_token: str
) -> None:
    url = "/api/v1/projects/team/vision/detection"  # project names may hold slashes
    assert put(client, admin_token, {"threshold": 0.1}, url).status_code == 200
    read = client.get(url, headers=bearer(read_token)).json()
    assert read["project"] == "team/vision" and read["policy"]["threshold"] == 0.1


def test_reading_needs_a_token_and_a_known_project(
    client: TestClient, read_token: str
) -> None:
    assert_needs_token(client, "GET", URL)
    assert_unknown_id(client, "GET", "/api/v1/projects/nowhere/detection",
                      bearer(read_token), "nowhere")


def test_a_ci_token_cannot_change_what_counts_as_a_regression(
    client: TestClient, ci_token: str
) -> None:
    assert_needs_token(client, "PUT", URL, json={"threshold": 0.5})
    response = put(client, ci_token, {"threshold": 0.5})
    assert response.status_code == 403 and "'admin' scope" in response.json()["detail"]


def test_a_bad_policy_is_refused_naming_the_field_and_the_stored_one_stays(
    client: TestClient, ci_token: str, read_token: str, admin_token: str
) -> None:
    post(client, ci_token, body(measured(2.0), "v1"))
    other = post(client, ci_token, body(measured(2.0), "o1", project="other"))
    assert put(client, admin_token, {"threshold": 0.05}).status_code == 200
    cases = [
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": "lots"}, "threshold"),
        ({"window": 0}, "window"),
        ({"baseline": "yesterday"}, "baseline"),
        ({"series_thresholds": {"a/b": -0.1}}, "series_thresholds.a/b"),
        ({"series_thresholds": {"": 0.1}}, "series_thresholds"),
        ({"treshold": 0.1}, "treshold"),
        ({"baseline": "pinned"}, "pinned_run_id"),
        ({"baseline": "pinned", "pinned_run_id": other["run_id"]}, "pinned_run_id"),
        ({"baseline": "pinned", "pinned_run_id": 999999}, "pinned_run_id"),
    ]
    for policy, field in cases:
        response = put(client, admin_token, policy)
        assert response.status_code == 422, (policy, response.text)
        fields = [e["field"] for e in response.json()["errors"]]
        assert any(f.startswith(field) for f in fields), (policy, fields)
    stored = client.get(URL, headers=bearer(read_token)).json()
    assert stored["stored"] and stored["policy"]["threshold"] == 0.05


def test_a_series_threshold_changes_that_series_verdict_only_and_is_kept_on_its_regression(
    client: TestClient, ci_token: str, admin_token: str
) -> None:
    lenient, strict = tiny_spec(batch_size=1), tiny_spec(batch_size=2)
    lenient_key, strict_key = lenient.series_key("cpu"), strict.series_key("cpu")
    # a 20% drop: beyond the project's 3%, within the lenient series' own 25%
    response = put(client, admin_token, {"series_thresholds": {lenient_key: 0.25}})
    assert response.status_code == 200, response.text
    for spec in (lenient, strict):
        post(client, ci_token, body(measured(2.0, spec=spec), "v1"))
    assert verdict(client, ci_token,
                   post(client, ci_token, body(measured(1.6, spec=lenient), "v2"))) == "pass"
    assert verdict(client, ci_token, post(client, ci_token, body(
        measured(1.6, spec=strict), "v2"))) == "regression"

    # a 20% drop against a series threshold of 10% regresses, and the regression says 10%
    put(client, admin_token, {"series_thresholds": {lenient_key: 0.10}})
    assert verdict(client, ci_token, post(client, ci_token, body(
        measured(1.28, spec=lenient), "v3"))) == "regression"
    regressions = client.get("/api/v1/regressions", headers=bearer(ci_token)).json()["items"]
    thresholds = {r["series_key"]: r["threshold"] for r in regressions}
    assert thresholds == {lenient_key: 0.10, strict_key: 0.03}


def test_a_series_threshold_follows_an_own_model_whose_architecture_changed() -> None:
    """An own model's key carries its digest, so a changed model is a new series; the
    threshold a team set for the model must not silently fall back to the project's."""
    from app.detection.policy import DetectionPolicy

    tail = "onnxruntime/constant/fp32/bs1/static/cpu/t1/nographs"
    policy = DetectionPolicy(threshold=0.03, series_thresholds={
        f"mypkg.nets:build@2dbc3e64bf12/{tail}": 0.08,
        f"other.nets:build/{tail}": 0.06,
        f"resnet18/{tail}": 0.1})
    assert policy.threshold_for(f"mypkg.nets:build@2dbc3e64bf12/{tail}") == 0.08
    assert policy.threshold_for(f"mypkg.nets:build@0123456789ab/{tail}") == 0.08  # changed
    assert policy.threshold_for(f"other.nets:build@0123456789ab/{tail}") == 0.06  # set plain
    assert policy.threshold_for(f"resnet18/{tail}") == 0.1
    # another model, or the same model on another axis, keeps the project's threshold
    assert policy.threshold_for(f"mypkg.nets:other@0123456789ab/{tail}") == 0.03
    assert policy.threshold_for(
        f"mypkg.nets:build@0123456789ab/{tail.replace('bs1', 'bs8')}") == 0.03
