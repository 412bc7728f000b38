"""Who may call what, for every route the app has: the routes are enumerated from the app, so
a new endpoint without a row in these tables fails here until someone decides its scope,
and whether (and how) it touches a project's data.

Writes: no token or a wrong one -> 401, a revoked one -> 401, one without the scope -> 403,
one with it gets past authentication. Reads: the same with public reads off. Token
management is admin-only even where reads are public.

Tokens limited to projects: a route that names its project (trigger, ingest, detection
policy) refuses another project with 403; one object of another project (a run, series,
regression, comparison, policy, by id, key or name) is a 404 as if it did not exist, and
nothing changes; a list leaves other projects out. A token limited to the right project
is served as an unlimited one. With public reads a limit restricts writes only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.testclient import TestClient

from app import ports
from app.api import deps
from app.config import Settings
from app.dashboard.page_kit import page_access
from app.dashboard.session import TOKEN_COOKIE
from app.main import create_app
from app.services.tokens import authenticate, revoke_token
from benchmarks.profile import document
from devkit.factories import bearer, bench_result, ingest_body, run_request, tiny_spec
from tests.app.detection_docs import body, measured
from workers import dispatch

# (method, route template) -> the scope it needs. Every non-GET route must be listed.
WRITES: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/runs"): "ci",
    ("POST", "/api/v1/results"): "ci",
    ("POST", "/api/v1/results/batch"): "ci",
    ("POST", "/api/v1/regressions/{regression_id}/acknowledge"): "ci",
    ("POST", "/api/v1/regressions/{regression_id}/resolve"): "ci",
    # a sweep or bisect triggers runs, as a trigger does
    ("POST", "/api/v1/sweeps"): "ci",
    ("POST", "/api/v1/bisects"): "ci",
    ("POST", "/api/v1/sweeps/{sweep_id}/cancel"): "ci",
    ("POST", "/api/v1/tokens"): "admin",
    ("POST", "/api/v1/tokens/{token_id}/revoke"): "admin",
    # what counts as a regression: not for every pipeline's ci token to loosen
    ("PUT", "/api/v1/projects/{name}/detection"): "admin",
}
# GET routes anyone may call: probes and the API's own documentation (`/metrics` is a read:
# run counts and the route list are not for everyone when reads are private).
PUBLIC_READS = {"/healthz", "/readyz", "/livez", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                "/redoc", "/static/dashboard.{name}", "/static/plotly.min.js",
                "/static/swagger/{name}"}
# GET routes that need more than `read`, public reads or not.
PRIVILEGED_READS: dict[str, str] = {"/api/v1/tokens": "admin"}
UNDER_SCOPED = {"ci": ["read"], "admin": ["read", "ci"]}


def _route_table(
    routes: Iterable[object], prefix: str = ""
) -> Iterator[tuple[str, str, object]]:
    """(method, path template, route) of every route, looking inside included routers and
    mounts (FastAPI wraps `include_router` results, so `app.routes` alone is not the table)."""
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
                    yield method, re.sub(r"\{(\w+):[^}]+\}", r"{\1}", template), route
        elif getattr(route, "routes", None) is not None:  # a Mount
            yield from _route_table(route.routes,  # type: ignore[attr-defined]
                                    prefix + getattr(route, "path", ""))


APP = create_app(Settings(database_url="sqlite://", executor="none"))
ROUTE_OBJECTS = {(method, path): route for method, path, route in _route_table(APP.routes)}
ROUTES = set(ROUTE_OBJECTS)


def test_the_route_table_sees_every_documented_operation() -> None:
    documented = {(method.upper(), path) for path, operations in APP.openapi()["paths"].items()
                  for method in operations}
    assert documented and documented <= ROUTES, documented - ROUTES


def _url(template: str) -> str:
    """Fill every path parameter with 1 (`{key:path}` too): auth is checked before lookup."""
    return re.sub(r"\{[^}]+\}", "1", template)


# The pages' cookie (app.dashboard.session): set from any valid token, cleared by anyone.
PAGE_SESSION = {("POST", "/session/token"), ("POST", "/session/forget")}


def test_every_write_route_has_a_decided_scope() -> None:
    writes = {(method, path) for method, path in ROUTES if method != "GET"}
    assert writes == set(WRITES) | PAGE_SESSION, (
        "a write route was added or removed: give it a row in WRITES with the scope it needs")


def test_the_pages_cookie_is_set_by_the_server_from_a_valid_token_only(
    settings: Settings, tokens: dict[str, str],
) -> None:
    with TestClient(create_app(settings), base_url="https://testserver") as client:
        assert client.post("/session/token").status_code == 401
        for wrong in ("sw_" + "x" * 43, tokens["revoked-admin"]):
            refused = client.post("/session/token", headers=bearer(wrong))
            assert refused.status_code == 401 and "set-cookie" not in refused.headers
        assert client.get("/runs").status_code == 401  # private reads, no cookie yet
        kept = client.post("/session/token", headers=bearer(tokens["read"]))
        assert kept.status_code == 204
        cookie = kept.headers["set-cookie"]
        assert cookie.startswith(f"{TOKEN_COOKIE}={tokens['read']};")
        assert {"HttpOnly", "Secure", "SameSite=strict", "Path=/"} <= {
            part.strip() for part in cookie.split(";")}
        assert client.get("/runs").status_code == 200  # the pages read with it
        forgot = client.post("/session/forget")
        assert forgot.status_code == 204 and 'speedwatch_token=""' in forgot.headers[
            "set-cookie"]
        assert client.get("/runs").status_code == 401


@pytest.mark.parametrize("headers", [
    {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
    {"sec-fetch-site": "same-site", "origin": "https://other.testserver"},
    {"origin": "https://evil.example"},  # an older browser: no Sec-Fetch-Site
    {"origin": "null"},  # a sandboxed frame, a data: URL
], ids=["cross-site", "same-site", "foreign-origin", "null-origin"])
def test_another_sites_request_cannot_sign_the_pages_in_or_out(
    settings: Settings, tokens: dict[str, str], headers: dict[str, str],
) -> None:
    with TestClient(create_app(settings), base_url="https://testserver") as client:
        assert client.post("/session/token", headers=bearer(tokens["read"])).status_code == 204
        forgot = client.post("/session/forget", headers=headers)
        assert forgot.status_code == 403, forgot.text
        assert "set-cookie" not in forgot.headers
        assert "may not change this site's session" in forgot.json()["detail"]
        assert client.get("/runs").status_code == 200  # still signed in
        signed_in = client.post("/session/token", headers={**bearer(tokens["admin"]),
                                                             **headers})
        assert signed_in.status_code == 403 and "set-cookie" not in signed_in.headers


@pytest.mark.parametrize("headers", [
    {"sec-fetch-site": "same-origin", "origin": "https://testserver"},
    {"sec-fetch-site": "none"},  # typed into the address bar
    {"origin": "https://testserver"},
    {"origin": "https://speedwatch.example.com"},  # the public URL, behind a proxy
    {},  # no browser: curl, a script
], ids=["same-origin", "typed", "own-origin", "public-url", "no-browser"])
def test_the_sites_own_pages_and_scripts_sign_out(
    settings: Settings, tokens: dict[str, str], headers: dict[str, str],
) -> None:
    public = settings.model_copy(update={"public_url": "https://speedwatch.example.com"})
    with TestClient(create_app(public), base_url="https://testserver") as client:
        assert client.post("/session/token", headers=bearer(tokens["read"])).status_code == 204
        forgot = client.post("/session/forget", headers=headers)
        assert forgot.status_code == 204, forgot.text
        assert client.get("/runs").status_code == 401


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


# ---- tokens limited to projects ------------------------------------------------------------

MINE, THEIRS = "proj-mine", "proj-theirs"
KEY = tiny_spec().series_key("cpu")  # both projects measure it

# How a token limited to projects is held to them, for every route with a project's data:
#   "write":  the request names its project -> 403 for another one
#   "object": one object of a project, by id, key or name -> 404 as if it did not exist
#   "list":   other projects' rows are left out (200)
PROJECT_DATA: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/runs"): "write",
    ("POST", "/api/v1/results"): "write",
    ("POST", "/api/v1/results/batch"): "write",
    ("PUT", "/api/v1/projects/{name}/detection"): "write",
    ("POST", "/api/v1/sweeps"): "write",
    ("POST", "/api/v1/bisects"): "write",
    ("POST", "/api/v1/sweeps/{sweep_id}/cancel"): "object",
    ("GET", "/api/v1/sweeps"): "list",
    ("GET", "/api/v1/sweeps/{sweep_id}"): "object",
    ("GET", "/api/v1/environments"): "list",
    ("GET", "/sweeps"): "list",
    ("GET", "/sweeps/{sweep_id}"): "object",
    ("GET", "/regressions/{regression_id}"): "object",
    ("GET", "/environments"): "list",
    ("POST", "/api/v1/regressions/{regression_id}/acknowledge"): "object",
    ("POST", "/api/v1/regressions/{regression_id}/resolve"): "object",
    ("GET", "/api/v1/projects/{name}/detection"): "object",
    ("GET", "/api/v1/runs"): "list",
    ("GET", "/api/v1/runs/{run_id}"): "object",
    ("GET", "/api/v1/series"): "list",
    ("GET", "/api/v1/series/{key}/points"): "object",
    ("GET", "/api/v1/series/{key}/changes"): "object",
    ("GET", "/api/v1/regressions"): "list",
    ("GET", "/api/v1/regressions/{regression_id}"): "object",
    ("GET", "/api/v1/compare"): "object",
    ("GET", "/api/v1/results/{result_id}"): "object",
    ("GET", "/results/{result_id}/repro.tar.gz"): "object",
    ("GET", "/api/v1/results/{result_id}/profile"): "object",
    ("GET", "/api/v1/results/profile-diff"): "object",
    ("GET", "/api/v1/regressions/{regression_id}/profile-diff"): "object",
    ("GET", "/"): "list",
    ("GET", "/runs"): "list",
    ("GET", "/regressions"): "list",
    ("GET", "/runs/{run_id}"): "object",
    ("GET", "/series/{key}"): "object",
    ("GET", "/compare"): "object",
}
# Routes with no project's data, and why a limit leaves them alone.
TOKEN_MANAGEMENT = "token management: an admin token of every project only"
NO_PROJECT_DATA: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "a probe",
    ("GET", "/readyz"): "a probe",
    ("POST", "/session/token"): "keeps the caller's own token as the pages' cookie",
    ("POST", "/session/forget"): "clears the pages' cookie",
    ("GET", "/livez"): "a probe",
    ("GET", "/metrics"): "server-wide counts by status, naming no project",
    ("GET", "/openapi.json"): "the API's own description",
    ("GET", "/docs"): "the API's own description",
    ("GET", "/docs/oauth2-redirect"): "the API's own description",
    ("GET", "/redoc"): "the API's own description",
    ("GET", "/static/dashboard.{name}"): "an asset",
    ("GET", "/static/plotly.min.js"): "an asset",
    ("GET", "/static/swagger/{name}"): "an asset",
    ("GET", "/api/v1/workers"): "workers and per-queue cell counts, naming no project",
    ("GET", "/workers"): "workers and per-queue cell counts, naming no project",
    ("GET", "/api/v1/tokens"): TOKEN_MANAGEMENT,
    ("POST", "/api/v1/tokens"): TOKEN_MANAGEMENT,
    ("POST", "/api/v1/tokens/{token_id}/revoke"): TOKEN_MANAGEMENT,
}
# The dependencies that turn a token into the projects it may touch (deps, dashboard).
PROJECT_ACCESS: set[Callable[..., Any]] = {deps.require_read, deps.ci_access,
                                           deps.admin_access, page_access}


def _dependencies(dependant: Dependant) -> set[Callable[..., Any]]:
    found: set[Callable[..., Any]] = set()
    for sub in dependant.dependencies:
        if sub.call is not None:
            found.add(sub.call)
        found |= _dependencies(sub)
    return found


def test_every_route_has_a_decided_project_rule() -> None:
    assert not set(PROJECT_DATA) & set(NO_PROJECT_DATA)
    assert set(PROJECT_DATA) | set(NO_PROJECT_DATA) == ROUTES, (
        "a route was added or removed: say in PROJECT_DATA how a token limited to projects "
        "is held to it, or in NO_PROJECT_DATA why it has no project's data")


@pytest.mark.parametrize(("method", "template"), sorted(PROJECT_DATA),
                         ids=[f"{m} {p}" for m, p in sorted(PROJECT_DATA)])
def test_every_route_with_project_data_resolves_the_callers_projects(
    method: str, template: str
) -> None:
    """The rule lives in one place (ProjectAccess, from these dependencies); a route that
    does not ask for it cannot be applying it."""
    route = ROUTE_OBJECTS[(method, template)]
    assert _dependencies(route.dependant) & PROJECT_ACCESS  # type: ignore[attr-defined]


def test_token_management_routes_and_only_they_need_an_admin_of_every_project() -> None:
    for (method, template), why in NO_PROJECT_DATA.items():
        dependant = getattr(ROUTE_OBJECTS[(method, template)], "dependant", None)
        calls = _dependencies(dependant) if dependant is not None else set()
        assert (deps.require_token_admin in calls) == (why == TOKEN_MANAGEMENT), template


@dataclass(frozen=True)
class Seeded:
    """One project's history: two ingest runs (v1 at 2.0x, v2 at 1.6x), the regression
    the second opened, and a sweep of two onnxruntime releases (its runs not measured)."""

    name: str
    run_ids: tuple[int, int]
    regression_id: int
    sweep_id: int
    result_ids: tuple[int, int]


SWEPT = ["1.21.0", "1.22.0"]


def sweep_request(project: str) -> dict[str, Any]:
    return {"project": project, "package": "onnxruntime", "from_version": SWEPT[0],
            "to_version": SWEPT[-1], "matrix": {"models": ["resnet18"],
                                                "backends": ["onnxruntime"]}}


def bisect_request(project: str) -> dict[str, Any]:
    return {"project": project, "good": [f"onnxruntime=={SWEPT[0]}"],
            "bad": [f"onnxruntime=={SWEPT[-1]}"],
            "matrix": {"models": ["resnet18"], "backends": ["onnxruntime"]}}


class Releases:
    """The package index as far as these tests care (pip's own is tested elsewhere:
    tests/app/test_sweeps_api.py): the releases a sweep or bisect of SWEPT reads."""

    def versions(self, package: str, *, pre: bool, settings: Settings) -> list[str]:
        return list(SWEPT)


@pytest.fixture
def world(client: TestClient, tokens: dict[str, str]) -> Iterator[dict[str, Seeded]]:
    ports.wire(cells=ports.cell_queue(), deliveries=ports.delivery_queue(), index=Releases())
    ci = bearer(tokens["ci"])
    seeded = {}
    for name in (MINE, THEIRS):
        runs, results = [], []
        for revision, speedup, kernels in (("v1", 2.0, 58), ("v2", 1.6, 161)):
            profile = document("onnxruntime", "nodes", 1, [("/conv/Conv", "Conv", 1, kernels)])
            measured_doc = measured(speedup, evidence={
                "kernels_per_inference": kernels,
                "profile": {"baseline": profile, "candidate": profile}})
            posted = client.post("/api/v1/results", json=body(measured_doc, revision, name),
                                 headers=ci)
            assert posted.status_code == 201, posted.text
            runs.append(posted.json()["run_id"])
            results.append(posted.json()["result_id"])
        listed = client.get("/api/v1/regressions", params={"project": name}, headers=ci)
        (regression,) = listed.json()["items"]
        swept = client.post("/api/v1/sweeps", json=sweep_request(name), headers=ci)
        assert swept.status_code == 201, swept.text
        seeded[name] = Seeded(name, (runs[0], runs[1]), regression["id"], swept.json()["id"],
                              (results[0], results[1]))
    yield seeded
    dispatch.install()  # pip's index again


@pytest.fixture
def mine_only(settings: Settings) -> dict[str, str]:
    """A token of each scope limited to MINE."""
    from app.db import session_scope
    from app.services.tokens import create_token

    with session_scope(settings) as session:
        return {scope: create_token(session, scope, f"{scope}-of-mine", [MINE])[1]
                for scope in ("read", "ci", "admin")}


def _project_request(method: str, template: str, project: Seeded) -> tuple[str, Any]:
    """The request of this route for `project`'s data (url, json body)."""
    url = (template.replace("{run_id}", str(project.run_ids[1]))
           .replace("{regression_id}", str(project.regression_id))
           .replace("{sweep_id}", str(project.sweep_id))
           .replace("{result_id}", str(project.result_ids[1]))
           .replace("{name}", project.name).replace("{key}", KEY))
    if "{key}" in template:
        url += f"?project={project.name}"
    if template.endswith("/compare"):
        url += f"?base={project.run_ids[0]}&head={project.run_ids[1]}"
    if template == "/api/v1/results/profile-diff":
        url += f"?base={project.result_ids[0]}&head={project.result_ids[1]}"
    bodies: dict[str, Any] = {
        "/api/v1/runs": run_request(project=project.name),
        "/api/v1/results": ingest_body(bench_result(), project=project.name),
        "/api/v1/results/batch": {
            **{k: v for k, v in ingest_body(bench_result()).items() if k != "result"},
            "project": project.name, "results": [bench_result().to_dict()]},
        "/api/v1/projects/{name}/detection": {"threshold": 0.1},
        "/api/v1/sweeps": sweep_request(project.name),
        "/api/v1/bisects": bisect_request(project.name),
    }
    return url, bodies.get(template) if method != "GET" else None


def _send(client: TestClient, method: str, template: str, project: Seeded,
          token: str) -> tuple[int, str]:
    """The route's request for `project`, with `token` as a page's cookie or a bearer."""
    url, json = _project_request(method, template, project)
    client.cookies.clear()
    if template.startswith(MACHINE_READS):
        response = client.request(method, url, json=json, headers=bearer(token))
    else:
        client.cookies.set(TOKEN_COOKIE, token)
        response = client.get(url)
        client.cookies.clear()
    return response.status_code, response.text


def _scope(method: str, template: str) -> str:
    return WRITES.get((method, template), "read")


def _everything(client: TestClient, admin: str) -> list[object]:
    """What an unlimited admin sees of both projects: runs, regressions, sweeps and
    policies."""
    out: list[object] = []
    for path in ("/api/v1/runs", "/api/v1/regressions", "/api/v1/sweeps"):
        out.append(client.get(path, headers=bearer(admin)).json()["items"])
    for name in (MINE, THEIRS):
        out.append(client.get(f"/api/v1/projects/{name}/detection",
                              headers=bearer(admin)).json())
    return out


@pytest.mark.parametrize(("method", "template"), sorted(PROJECT_DATA),
                         ids=[f"{m} {p}" for m, p in sorted(PROJECT_DATA)])
def test_a_token_limited_to_another_project_is_refused_or_sees_nothing_of_it(
    client: TestClient, tokens: dict[str, str], world: dict[str, Seeded],
    mine_only: dict[str, str], method: str, template: str,
) -> None:
    kind = PROJECT_DATA[(method, template)]
    before = _everything(client, tokens["admin"])
    status, text = _send(client, method, template, world[THEIRS],
                         mine_only[_scope(method, template)])
    if kind == "write":
        assert status == 403, text
        assert f"limited to project(s) {MINE}; not '{THEIRS}'" in text
    elif kind == "object":
        assert status == 404 and "not found" in text.lower(), text
    else:
        assert status == 200, text
        assert MINE in text and THEIRS not in text
    assert _everything(client, tokens["admin"]) == before, "a refused request changed data"


@pytest.mark.parametrize(("method", "template"), sorted(PROJECT_DATA),
                         ids=[f"{m} {p}" for m, p in sorted(PROJECT_DATA)])
def test_a_token_limited_to_the_right_project_is_served_and_shown_nothing_else(
    client: TestClient, world: dict[str, Seeded], mine_only: dict[str, str],
    method: str, template: str,
) -> None:
    status, text = _send(client, method, template, world[MINE],
                         mine_only[_scope(method, template)])
    assert status in (200, 201), text
    assert THEIRS not in text


@pytest.mark.parametrize("path", ["/api/v1/runs", "/api/v1/series", "/api/v1/regressions",
                                  "/api/v1/sweeps"])
def test_a_limited_token_filtering_lists_by_another_project_gets_an_empty_page(
    client: TestClient, world: dict[str, Seeded], mine_only: dict[str, str], path: str
) -> None:
    response = client.get(path, params={"project": THEIRS}, headers=bearer(mine_only["read"]))
    assert response.status_code == 200 and response.json()["items"] == []
    assert client.get(path, params={"project": MINE},
                      headers=bearer(mine_only["read"])).json()["items"]


def test_a_key_both_projects_measure_is_not_ambiguous_to_a_token_limited_to_one(
    client: TestClient, tokens: dict[str, str], world: dict[str, Seeded],
    mine_only: dict[str, str],
) -> None:
    path = f"/api/v1/series/{KEY}/points"
    unlimited = client.get(path, headers=bearer(tokens["read"]))
    assert unlimited.status_code == 422 and THEIRS in unlimited.text  # names both projects
    limited = client.get(path, headers=bearer(mine_only["read"]))
    assert limited.status_code == 200, limited.text
    assert limited.json()["series"]["project"] == MINE and THEIRS not in limited.text


@pytest.mark.parametrize(("method", "template"), sorted(
    k for k, why in NO_PROJECT_DATA.items() if why == TOKEN_MANAGEMENT))
def test_an_admin_token_limited_to_projects_cannot_manage_tokens(
    client: TestClient, mine_only: dict[str, str], method: str, template: str
) -> None:
    status, body = _call(client, method, template, bearer(mine_only["admin"]))
    assert status == 403 and "admin token of every project" in str(body["detail"]), body


def test_routes_without_project_data_serve_a_limited_token_as_an_unlimited_one(
    client: TestClient, tokens: dict[str, str], mine_only: dict[str, str]
) -> None:
    for method, template in sorted(k for k, why in NO_PROJECT_DATA.items()
                                   if why != TOKEN_MANAGEMENT):
        limited = client.request(method, _url(template),
                                 headers=bearer(mine_only["read"])).status_code
        unlimited = client.request(method, _url(template),
                                   headers=bearer(tokens["read"])).status_code
        assert limited == unlimited, template
    client.cookies.clear()


def test_with_public_reads_a_limit_restricts_writes_only(
    settings: Settings, world: dict[str, Seeded], mine_only: dict[str, str]
) -> None:
    """Anyone reads every project there without a token; hiding them from a token's holder
    would protect nothing."""
    public = create_app(settings.model_copy(update={"public_reads": True}))
    with TestClient(public) as client:
        runs = client.get("/api/v1/runs", headers=bearer(mine_only["read"])).json()["items"]
        assert {r["project"] for r in runs} == {MINE, THEIRS}
        theirs = _project_request("GET", "/api/v1/runs/{run_id}", world[THEIRS])[0]
        assert client.get(theirs, headers=bearer(mine_only["read"])).status_code == 200
        url, json = _project_request("POST", "/api/v1/runs", world[THEIRS])
        assert client.post(url, json=json, headers=bearer(mine_only["ci"])).status_code == 403
