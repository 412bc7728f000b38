"""Who may call what, for every route the app has: the routes are enumerated from the app, so
a new endpoint without a row in these tables fails here until someone decides its scope.

Writes: no token or a wrong one -> 401, a revoked one -> 401, one without the scope -> 403,
one with it gets past authentication. Reads: the same with public reads off. Token
management is admin-only even where reads are public.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.dashboard.routes import TOKEN_COOKIE
from app.main import create_app
from app.services.tokens import authenticate, revoke_token
from tests.app.factories import bearer

# (method, route template) -> the scope it needs. Every non-GET route must be listed.
WRITES: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/runs"): "ci",
    ("POST", "/api/v1/results"): "ci",
    ("POST", "/api/v1/regressions/{regression_id}/acknowledge"): "ci",
    ("POST", "/api/v1/regressions/{regression_id}/resolve"): "ci",
    ("POST", "/api/v1/tokens"): "admin",
    ("POST", "/api/v1/tokens/{token_id}/revoke"): "admin",
    # what counts as a regression: not for every pipeline's ci token to loosen
    ("PUT", "/api/v1/projects/{name}/detection"): "admin",
}
# GET routes anyone may call: probes and the API's own documentation (`/metrics` is a read:
# run counts and the route list are not for everyone when reads are private).
PUBLIC_READS = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                "/redoc", "/static/dashboard.{name}", "/static/plotly.min.js"}
# GET routes that need more than `read`, public reads or not.
PRIVILEGED_READS: dict[str, str] = {"/api/v1/tokens": "admin"}
UNDER_SCOPED = {"ci": ["read"], "admin": ["read", "ci"]}


def _route_table(routes: Iterable[object], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path template) of every route, looking inside included routers and mounts
    (FastAPI wraps `include_router` results, so `app.routes` alone is not the table)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from _route_table(inner.routes, prefix + getattr(context, "prefix", ""))
        elif getattr(route, "methods", None) and getattr(route, "path", None):
            for method in route.methods:  # type: ignore[attr-defined]
                if method not in ("HEAD", "OPTIONS"):
                    # `{key:path}` is `{key}` in the OpenAPI document
                    template = prefix + route.path  # type: ignore[attr-defined]
                    yield method, re.sub(r"\{(\w+):[^}]+\}", r"{\1}", template)
        elif getattr(route, "routes", None) is not None:  # a Mount
            yield from _route_table(route.routes,  # type: ignore[attr-defined]
                                    prefix + getattr(route, "path", ""))


APP = create_app(Settings(database_url="sqlite://", executor="none"))
ROUTES = set(_route_table(APP.routes))


def test_the_route_table_sees_every_documented_operation() -> None:
    documented = {(method.upper(), path) for path, operations in APP.openapi()["paths"].items()
                  for method in operations}
    assert documented and documented <= ROUTES, documented - ROUTES


def _url(template: str) -> str:
    """Fill every path parameter with 1 (`{key:path}` too): auth is checked before lookup."""
    return re.sub(r"\{[^}]+\}", "1", template)


def test_every_write_route_has_a_decided_scope() -> None:
    writes = {(method, path) for method, path in ROUTES if method != "GET"}
    assert writes == set(WRITES), (
        "a write route was added or removed: give it a row in WRITES with the scope it needs")


GUARDED_READS = sorted({path for method, path in ROUTES if method == "GET"} - PUBLIC_READS)
# Dashboard pages: a browser sends the token as the page's cookie, not a bearer header.
# Machine reads (the API, Prometheus' scrape) send a bearer header.
MACHINE_READS = ("/api/", "/metrics")
GUARDED_PAGES = [path for path in GUARDED_READS if not path.startswith(MACHINE_READS)]
GUARDED_API_READS = [path for path in GUARDED_READS if path.startswith(MACHINE_READS)]


@pytest.fixture
def tokens(settings: Settings) -> Iterator[dict[str, str]]:
    from app.db import session_scope
    from app.services.tokens import create_token

    plaintexts = {}
    with session_scope(settings) as session:
        for scope in ("read", "ci", "admin"):
            plaintexts[scope] = create_token(session, scope, f"access-{scope}")[1]
        token, plaintexts["revoked-admin"] = create_token(session, "admin", "access-revoked")
        session.flush()
        revoke_token(session, token.id)
    yield plaintexts


def _call(client: TestClient, method: str, template: str,
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    response = client.request(method, _url(template), json={} if method != "GET" else None,
                              headers=headers or {})
    body = response.json() if response.headers.get("content-type", "").startswith(
        "application/json") else {}
    return response.status_code, body


@pytest.mark.parametrize(("method", "template"), sorted(WRITES),
                         ids=[f"{m} {p}" for m, p in sorted(WRITES)])
def test_write_routes_refuse_missing_wrong_revoked_and_under_scoped_tokens(
    client: TestClient, tokens: dict[str, str], method: str, template: str
) -> None:
    scope = WRITES[(method, template)]
    status, body = _call(client, method, template)
    assert status == 401 and "token" in str(body["detail"]), body
    for wrong in ("sw_" + "x" * 43, "not-even-a-token", tokens["revoked-admin"]):
        status, body = _call(client, method, template, bearer(wrong))
        assert status == 401 and body["detail"] == "invalid or revoked token", (wrong, body)
    for weaker in UNDER_SCOPED[scope]:
        status, body = _call(client, method, template, bearer(tokens[weaker]))
        assert status == 403 and f"{scope!r} scope" in str(body["detail"]), (weaker, body)
    # The control: the right scope gets past authentication (to validation or lookup).
    status, body = _call(client, method, template, bearer(tokens[scope]))
    assert status not in (401, 403), body


@pytest.mark.parametrize("template", GUARDED_API_READS)
def test_read_routes_need_a_token_when_reads_are_not_public(
    client: TestClient, tokens: dict[str, str], template: str
) -> None:
    scope = PRIVILEGED_READS.get(template, "read")
    status, body = _call(client, "GET", template)
    assert status == 401 and "token" in str(body["detail"]), body
    for wrong in ("sw_" + "x" * 43, tokens["revoked-admin"]):
        assert _call(client, "GET", template, bearer(wrong))[0] == 401
    for weaker in UNDER_SCOPED.get(scope, []):
        assert _call(client, "GET", template, bearer(tokens[weaker]))[0] == 403, weaker
    assert _call(client, "GET", template, bearer(tokens[scope]))[0] not in (401, 403)


@pytest.mark.parametrize("template", GUARDED_PAGES)
def test_dashboard_pages_need_a_read_token_cookie_when_reads_are_not_public(
    client: TestClient, tokens: dict[str, str], template: str
) -> None:
    def page(token: str | None) -> tuple[int, str]:
        client.cookies.clear()
        if token is not None:
            client.cookies.set(TOKEN_COOKIE, token)
        response = client.get(_url(template))
        return response.status_code, response.text

    status, text = page(None)
    assert status == 401 and "token" in text
    for wrong in ("sw_" + "x" * 43, tokens["revoked-admin"]):
        assert page(wrong)[0] == 401, wrong
    assert page(bearer(tokens["read"])["Authorization"])[0] == 401  # not a bearer header
    assert page(tokens["read"])[0] not in (401, 403)
    client.cookies.clear()


def test_public_reads_open_reads_only(settings: Settings, tokens: dict[str, str]) -> None:
    public = create_app(settings.model_copy(update={"public_reads": True}))
    with TestClient(public) as client:
        for template in GUARDED_READS:
            status, _ = _call(client, "GET", template)
            if template in PRIVILEGED_READS:
                assert status == 401, template
            else:
                assert status not in (401, 403), template
        for method, template in WRITES:
            assert _call(client, method, template)[0] == 401, template


def test_an_admin_manages_tokens_over_http_and_a_revoked_one_stops_working(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    admin = bearer(tokens["admin"])
    created = client.post("/api/v1/tokens", json={"scope": "ci", "name": "gha"}, headers=admin)
    assert created.status_code == 201, created.text
    new = created.json()
    assert new["token"].startswith("sw_") and new["scopes"] == ["ci"]
    assert client.get("/api/v1/runs", headers=bearer(new["token"])).status_code == 200

    listed = client.get("/api/v1/tokens", headers=admin)
    assert new["token"] not in listed.text and "token_hash" not in listed.text
    assert {"gha", "access-admin"} <= {t["name"] for t in listed.json()["items"]}

    revoked = client.post(f"/api/v1/tokens/{new['id']}/revoke", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.get("/api/v1/runs", headers=bearer(new["token"])).status_code == 401
    assert client.post("/api/v1/tokens/999999/revoke", headers=admin).status_code == 404
    bad = client.post("/api/v1/tokens", json={"scope": "root"}, headers=admin)
    assert bad.status_code == 422 and "scope" in bad.json()["detail"]

    from app.db import session_scope

    with session_scope(settings) as session:
        assert authenticate(session, new["token"]) is None
