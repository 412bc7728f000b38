"""The OpenAPI document is part of the contract with CI clients: any change shows up here.

After an intended API change, regenerate the snapshot and review its diff:

    SPEEDWATCH_UPDATE_OPENAPI_SNAPSHOT=1 .venv/bin/pytest tests/app/test_openapi.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi.testclient import TestClient

SNAPSHOT = Path(__file__).with_name("openapi_snapshot.json")


def test_openapi_document_matches_the_snapshot(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    rendered = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if os.environ.get("SPEEDWATCH_UPDATE_OPENAPI_SNAPSHOT") == "1":
        SNAPSHOT.write_text(rendered)
    assert SNAPSHOT.exists(), "no snapshot yet: run with SPEEDWATCH_UPDATE_OPENAPI_SNAPSHOT=1"
    assert json.loads(SNAPSHOT.read_text()) == document, (
        "the API changed; if intended, regenerate the snapshot (see this module's docstring)")


def test_docs_are_served(client: TestClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200 and "swagger" in response.text.lower()


def test_every_route_documents_its_errors(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    for path, operations in document["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"401", "422", "503"} <= codes, (method, path, codes)
            error_schema = operation["responses"]["503"]["content"]["application/json"]["schema"]
            assert error_schema == {"$ref": "#/components/schemas/ErrorPublic"}
