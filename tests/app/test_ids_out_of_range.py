"""Ids in URLs are PostgreSQL integers: one outside 1..2^31-1 names nothing. The API answers
422 naming the parameter, a dashboard page answers its 404 page, and neither reaches the
store (where such a number failed as an error: "integer out of range").

Every route with an id in its path is tried, so a route added later is held to it too."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.schemas import ID_MAX
from devkit.factories import bearer
from tests.app.test_access import ROUTES

OUT_OF_RANGE = [ID_MAX + 1, 2**63, 10**30, -1, 0]


def _id_routes(api: bool) -> list[tuple[str, str, str]]:
    """(method, path template, id parameter) of every route with an id in its path."""
    found = []
    for method, path in sorted(ROUTES):
        if path.startswith("/api/") != api:
            continue
        for name in re.findall(r"\{(\w+_id)\}", path):
            found.append((method, path, name))
    return found


API_ROUTES = _id_routes(api=True)
PAGE_ROUTES = _id_routes(api=False)


def test_the_routes_with_ids_are_found() -> None:
    assert len(API_ROUTES) >= 10
    assert {p for _, p, _ in PAGE_ROUTES} >= {"/runs/{run_id}", "/regressions/{regression_id}",
                                              "/sweeps/{sweep_id}",
                                              "/results/{result_id}/repro.tar.gz"}


@pytest.mark.parametrize(("method", "path", "name"), API_ROUTES,
                         ids=[f"{m} {p}" for m, p, _ in API_ROUTES])
def test_an_api_id_out_of_range_is_422_naming_the_parameter(
    client: TestClient, admin_token: str, method: str, path: str, name: str,
) -> None:
    for value in OUT_OF_RANGE:
        url = path.replace("{" + name + "}", str(value))
        url = re.sub(r"\{\w+(:path)?\}", "1", url)
        response = client.request(method, url, headers=bearer(admin_token), json={})
        assert response.status_code == 422, (url, response.text)
        assert f"path.{name}" in [e["field"] for e in response.json()["errors"]], response.text


@pytest.mark.parametrize(("method", "path", "name"), PAGE_ROUTES,
                         ids=[f"{m} {p}" for m, p, _ in PAGE_ROUTES])
def test_a_page_id_out_of_range_is_the_pages_404(
    client: TestClient, read_token: str, method: str, path: str, name: str,
) -> None:
    client.cookies.set("speedwatch_token", read_token)
    for value in OUT_OF_RANGE:
        response = client.request(method, path.replace("{" + name + "}", str(value)))
        assert response.status_code == 404, (value, response.text[:300])
        assert response.headers["content-type"].startswith("text/html")
        assert f"{value} not found" in response.text


@pytest.mark.parametrize("query", [f"base={ID_MAX + 1}&head=1", "base=1&head=-5",
                                   f"base={10**30}&head={10**30}"])
def test_the_compare_pages_run_ids_out_of_range_are_its_404(
    client: TestClient, read_token: str, query: str,
) -> None:
    client.cookies.set("speedwatch_token", read_token)
    response = client.get(f"/compare?{query}")
    assert response.status_code == 404, response.text[:300]
    assert "not found" in response.text


@pytest.mark.parametrize("query", [f"batch_size={ID_MAX + 1}", f"threads={10**12}",
                                   "batch_size=%C2%B2"])
def test_an_overview_filter_out_of_range_is_a_422_page_naming_it(
    client: TestClient, read_token: str, query: str,
) -> None:
    client.cookies.set("speedwatch_token", read_token)
    response = client.get(f"/?{query}")
    assert response.status_code == 422, response.text[:300]
    assert response.headers["content-type"].startswith("text/html")
    assert query.split("=")[0] in response.text
