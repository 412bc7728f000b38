"""Tokens: stored hashed, scopes enforced, revocation immediate; every endpoint guarded."""

from __future__ import annotations

import hashlib

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.config import Settings
from app.main import create_app
from app.models import ApiToken
from app.services.tokens import authenticate, create_token, has_scope, revoke_token
from cli.main import cli
from devkit.factories import bearer, bench_result, ingest_body, run_request
from tests.app._asserts import assert_needs_token, assert_unknown_id

GUARDED = [
    ("POST", "/api/v1/runs", run_request()),
    ("GET", "/api/v1/runs", None),
    ("GET", "/api/v1/runs/1", None),
    ("GET", "/api/v1/series", None),
    ("GET", "/api/v1/series/resnet18/eager/constant/fp32/bs1/static/cpu/t1/nographs/points",
     None),
    ("GET", "/api/v1/compare?base=1&head=2", None),
    ("POST", "/api/v1/results", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), GUARDED, ids=[f"{m} {p}" for m, p, _ in
                                                                    GUARDED])
def test_every_api_endpoint_refuses_anonymous_requests(
    client: TestClient, method: str, path: str, body: object
) -> None:
    assert_needs_token(client, method, path, body)


UNKNOWN = [
    ("GET", "/api/v1/runs/999999", "run 999999"),
    ("GET", "/api/v1/series/resnet18/eager/constant/fp32/bs1/static/tpu/points", "tpu"),
    ("GET", "/api/v1/compare?base=999998&head=999999", "run 999998"),
]


@pytest.mark.parametrize(("method", "path", "needle"), UNKNOWN, ids=[p for _, p, _ in UNKNOWN])
def test_unknown_ids_are_404_naming_the_id(
    client: TestClient, read_token: str, method: str, path: str, needle: str
) -> None:
    assert_unknown_id(client, method, path, bearer(read_token), needle)


def test_compare_names_the_missing_head_run(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    base = client.post("/api/v1/runs", json=run_request(), headers=bearer(ci_token)).json()["id"]
    assert_unknown_id(client, "GET", f"/api/v1/compare?base={base}&head=999999",
                      bearer(read_token), "head run 999999")


def test_token_is_stored_only_as_its_sha256(session: Session) -> None:
    token, plaintext = create_token(session, "ci", "pipeline")
    session.commit()
    assert plaintext.startswith("sw_") and len(plaintext) > 40
    stored = session.scalars(select(ApiToken).where(ApiToken.id == token.id)).one()
    assert stored.token_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert plaintext not in repr(vars(stored))
    assert authenticate(session, plaintext) is not None
    assert authenticate(session, plaintext + "x") is None
    assert authenticate(session, "not-a-token") is None


def test_scopes_admin_implies_all_ci_may_read_read_may_not_write(session: Session) -> None:
    admin, _ = create_token(session, "admin")
    ci, _ = create_token(session, "ci")
    read, _ = create_token(session, "read")
    assert all(has_scope(admin, s) for s in ("read", "ci", "admin"))
    assert has_scope(ci, "ci") and has_scope(ci, "read") and not has_scope(ci, "admin")
    assert has_scope(read, "read") and not has_scope(read, "ci")


def test_read_token_cannot_trigger_a_run(client: TestClient, read_token: str) -> None:
    response = client.post("/api/v1/runs", json=run_request(), headers=bearer(read_token))
    assert response.status_code == 403
    assert "'ci' scope" in response.json()["detail"]


def test_admin_token_can_trigger_and_ingest(client: TestClient, admin_token: str) -> None:
    assert client.post("/api/v1/runs", json=run_request(),
                       headers=bearer(admin_token)).status_code == 201
    assert client.post("/api/v1/results", json=ingest_body(bench_result()),
                       headers=bearer(admin_token)).status_code == 201


def test_revoked_token_is_refused_from_the_next_request(
    client: TestClient, session: Session, ci_token: str
) -> None:
    assert client.get("/api/v1/runs", headers=bearer(ci_token)).status_code == 200
    token = authenticate(session, ci_token)
    assert token is not None
    revoke_token(session, token.id)
    session.commit()
    response = client.get("/api/v1/runs", headers=bearer(ci_token))
    assert response.status_code == 401
    assert response.json()["detail"] == "invalid or revoked token"


def test_a_wrong_token_is_401_even_where_reads_are_public(
    settings: Settings, read_token: str
) -> None:
    public = create_app(settings.model_copy(update={"public_reads": True}))
    with TestClient(public) as client:
        assert client.get("/api/v1/runs").status_code == 200
        assert client.get("/api/v1/runs", headers=bearer("sw_wrong")).status_code == 401
        assert client.get("/api/v1/runs", headers=bearer(read_token)).status_code == 200
        assert_needs_token(client, "POST", "/api/v1/runs", run_request())


def test_cli_creates_a_working_token_once_and_revokes_it(
    settings: Settings, client: TestClient
) -> None:
    runner = CliRunner()
    created = runner.invoke(cli, ["token", "create", "--scope", "ci", "--name", "gha"])
    assert created.exit_code == 0, created.output
    plaintext = created.stdout.strip().splitlines()[-1]
    assert plaintext.startswith("sw_")
    assert client.post("/api/v1/runs", json=run_request(),
                       headers=bearer(plaintext)).status_code == 201

    listed = runner.invoke(cli, ["token", "list"])
    assert "gha" in listed.stdout and plaintext not in listed.stdout
    token_id = next(line.split("\t")[0] for line in listed.stdout.splitlines() if "gha" in line)
    revoked = runner.invoke(cli, ["token", "revoke", token_id])
    assert revoked.exit_code == 0, revoked.output
    assert client.get("/api/v1/runs", headers=bearer(plaintext)).status_code == 401


def test_cli_refuses_an_unknown_scope_with_one_line(settings: Settings) -> None:
    result = CliRunner().invoke(cli, ["token", "create", "--scope", "root"])
    assert result.exit_code == 1
    assert "scope: 'root' is not one of read, ci, admin" in result.output
    assert "Traceback" not in result.output


def test_an_admin_limits_a_token_to_projects_over_http_and_the_listing_shows_them(
    client: TestClient, admin_token: str
) -> None:
    created = client.post("/api/v1/tokens", headers=bearer(admin_token), json={
        "scope": "ci", "name": "vision-ci", "projects": ["vision", "audio", "vision"]})
    assert created.status_code == 201, created.text
    assert created.json()["projects"] == ["audio", "vision"]  # sorted, once each
    limited = bearer(created.json()["token"])
    assert client.post("/api/v1/runs", json=run_request(project="vision"),
                       headers=limited).status_code == 201
    refused = client.post("/api/v1/runs", json=run_request(project="text"), headers=limited)
    assert refused.status_code == 403
    assert refused.json()["detail"] == ("token 'vision-ci' is limited to project(s) audio, "
                                        "vision; not 'text'")

    listed = {t["name"]: t["projects"] for t in client.get(
        "/api/v1/tokens", headers=bearer(admin_token)).json()["items"]}
    assert listed["vision-ci"] == ["audio", "vision"]
    assert listed["test-admin"] is None  # every project


def test_a_token_may_be_limited_to_a_project_its_first_run_creates(
    client: TestClient, admin_token: str
) -> None:
    created = client.post("/api/v1/tokens", headers=bearer(admin_token),
                          json={"scope": "ci", "projects": ["not-yet"]})
    assert created.status_code == 201, created.text
    token = bearer(created.json()["token"])
    assert client.get("/api/v1/projects/not-yet/detection", headers=token).status_code == 404
    assert client.post("/api/v1/runs", json=run_request(project="not-yet"),
                       headers=token).status_code == 201
    assert client.get("/api/v1/projects/not-yet/detection", headers=token).status_code == 200


@pytest.mark.parametrize(("projects", "needle"), [
    ([], "at least 1 item"),
    (["-leading-dash"], "pattern"),
    (["a" * 101], "at most 100 characters"),
])
def test_a_limit_must_name_valid_projects(
    client: TestClient, admin_token: str, projects: list[str], needle: str
) -> None:
    """An empty list is refused, not read as "every project": a script that computed no
    project did not mean all of them."""
    response = client.post("/api/v1/tokens", headers=bearer(admin_token),
                           json={"scope": "read", "projects": projects})
    assert response.status_code == 422 and needle in response.text, response.text


def test_the_service_refuses_an_empty_or_malformed_limit_too(session: Session) -> None:
    from app.errors import InvalidRequest

    for projects in ([], ["has space"], ["x" * 101]):
        with pytest.raises(InvalidRequest) as refused:
            create_token(session, "ci", projects=projects)
        assert refused.value.field == "projects"


def test_cli_creates_a_token_limited_to_projects_and_lists_them(
    settings: Settings, client: TestClient
) -> None:
    runner = CliRunner()
    created = runner.invoke(cli, ["token", "create", "--scope", "ci", "--name", "gha-vision",
                                  "--project", "vision", "--project", "audio"])
    assert created.exit_code == 0, created.output
    assert "project(s) audio, vision" in created.stderr
    plaintext = created.stdout.strip().splitlines()[-1]
    assert client.post("/api/v1/runs", json=run_request(project="audio"),
                       headers=bearer(plaintext)).status_code == 201
    assert client.post("/api/v1/runs", json=run_request(project="text"),
                       headers=bearer(plaintext)).status_code == 403
    assert runner.invoke(cli, ["token", "create", "--scope", "read"]).exit_code == 0

    lines = runner.invoke(cli, ["token", "list"]).stdout.splitlines()
    assert next(line for line in lines if "gha-vision" in line).endswith("\tprojects audio,vision")
    assert next(line for line in lines if "read-token" in line).endswith("\tall projects")


def test_cli_refuses_a_malformed_project_with_one_line(settings: Settings) -> None:
    result = CliRunner().invoke(cli, ["token", "create", "--scope", "ci", "--project", "a b"])
    assert result.exit_code == 1
    assert result.output.startswith("error: projects: 'a b' is not a project name")
    assert "Traceback" not in result.output
