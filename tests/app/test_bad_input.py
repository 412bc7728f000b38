"""Bad input beyond one endpoint's own validation: numbers past the store's range, page sizes,
bodies streamed without a length. Each is a 4xx with a message, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from devkit.factories import bearer, run_request

TOO_BIG = 2**31  # one past PostgreSQL's integer


@pytest.mark.parametrize("path", [
    f"/api/v1/runs/{TOO_BIG}",
    f"/api/v1/runs?cursor={TOO_BIG}",
    f"/api/v1/regressions/{TOO_BIG}",
    f"/api/v1/regressions?cursor={TOO_BIG}",
    f"/api/v1/compare?base=1&head={TOO_BIG}",
    f"/api/v1/series?batch_size={TOO_BIG}",
])
def test_ids_past_the_stores_integer_range_are_422_not_500(
    client: TestClient, read_token: str, path: str
) -> None:
    response = client.get(path, headers=bearer(read_token))
    assert response.status_code == 422, response.text
    assert "less than or equal to 2147483647" in response.json()["detail"]


def _list_routes(client: TestClient) -> list[tuple[str, int | None]]:
    """(path, largest allowed limit) of every GET operation that takes a `limit`."""
    document = client.get("/openapi.json").json()
    found = []
    for path, operations in document["paths"].items():
        for param in operations.get("get", {}).get("parameters", []):
            if param["name"] == "limit" and param["in"] == "query":
                found.append((path, param["schema"].get("maximum")))
    return found


def test_every_list_endpoint_bounds_its_page_size(
    client: TestClient, read_token: str, ci_token: str
) -> None:
    client.post("/api/v1/runs", json=run_request(), headers=bearer(ci_token))
    key = client.get("/api/v1/runs", headers=bearer(read_token)).json()["items"]
    assert key  # a run exists, so the series below exists too
    series_key = client.get(f"/api/v1/runs/{key[0]['id']}",
                            headers=bearer(read_token)).json()["cells"][0]["series_key"]
    routes = _list_routes(client)
    assert {path for path, _ in routes} >= {
        "/api/v1/runs", "/api/v1/series", "/api/v1/regressions", "/api/v1/series/{key}/points"}
    for path, largest in routes:
        assert largest is not None and largest <= 2000, (path, largest)
        url = path.replace("{key}", series_key)
        for limit in (0, largest + 1):
            response = client.get(f"{url}?limit={limit}", headers=bearer(read_token))
            assert response.status_code == 422, (url, limit, response.text)
            assert response.json()["errors"][0]["field"] == "query.limit"


def test_a_streamed_body_over_the_limit_is_413_without_content_length(
    settings: Settings, ci_token: str
) -> None:
    """No Content-Length (chunked upload): the limit still holds, counted while reading."""
    limited = create_app(settings.model_copy(update={"max_body_bytes": 1024}))
    body = json.dumps(run_request(revision="r" * 190, branch="b" * 190,
                                  environment={"pins": ["onnxruntime==1.22.0"] * 30}))
    assert len(body) > 1024

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 100):
            yield body[start:start + 100].encode()

    with TestClient(limited) as client:
        response = client.post("/api/v1/runs", content=chunks(),
                               headers={**bearer(ci_token), "Content-Type": "application/json"})
        assert "content-length" not in {k.lower() for k in response.request.headers}
        assert response.status_code == 413
        assert "1024 bytes" in response.json()["detail"]
        small = json.dumps(run_request()).encode()
        ok = client.post("/api/v1/runs", content=iter([small[:50], small[50:]]),
                         headers={**bearer(ci_token), "Content-Type": "application/json"})
        assert ok.status_code == 201, ok.text


def test_a_body_that_is_not_json_is_a_4xx_with_a_message(
    client: TestClient, ci_token: str
) -> None:
    response = client.post("/api/v1/runs", content=b"{not json",
                           headers={**bearer(ci_token), "Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"]
