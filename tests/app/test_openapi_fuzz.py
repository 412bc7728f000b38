"""Generated requests from the OpenAPI document (schemathesis): whatever a client sends,
the API answers without a 5xx, and every 4xx says what was wrong.

Runs in-process against the ASGI app on the test PostgreSQL database, with an admin token
so that the write operations get past authentication and their bodies are exercised.
Bounded by `MAX_EXAMPLES` per operation so CI time stays predictable.

POST /api/v1/results gets a test of its own with more examples: its body is the largest
schema of the API (the typed result document), and the one a hostile client aims at. The
schema's example is a real document, so the coverage phase's variants of it, and some
fuzzed documents, pass the schema and reach the store's own checks (201, 409, or a 422 for
a series key its spec does not give); the summary printed at the end (`-s`) says how many.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from app.config import Settings
from app.main import create_app
from devkit.factories import bearer

MAX_EXAMPLES = 15
# Fuzzing phase of POST /api/v1/results. With the examples and coverage phases (about 2,200
# variants of the example document, each field at its bounds and beyond) some 2,500
# requests: about 30 s of CPU (30-70 s of wall time on this project's shared 2-core machine,
# by its load).
RESULTS_MAX_EXAMPLES = 300

pytestmark = pytest.mark.slow


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


def every_4xx_has_a_message(ctx: Any, response: Any, case: Any) -> bool | None:
    """A refusal the client can act on: JSON with a non-empty `detail` string."""
    if 400 <= response.status_code < 500:
        try:
            body = response.json()
        except ValueError:
            raise AssertionError(f"{response.status_code} without a JSON body: "
                                 f"{response.text[:200]!r}") from None
        detail = body.get("detail") if isinstance(body, dict) else None
        assert isinstance(detail, str) and detail.strip(), (
            f"{response.status_code} without a message: {body!r}")
    return None


# The document does not depend on the database, so it is read at import (pytest needs the
# operations to parametrize); each test then calls the app on the test database.
schema = schemathesis.openapi.from_dict(
    create_app(Settings(database_url="sqlite://", executor="none")).openapi())


@schema.exclude(path="/api/v1/results", method="POST").parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx_or_a_silent_4xx(
    case: Any, app: FastAPI, admin_token: str
) -> None:
    case.call_and_validate(app=app, headers=bearer(admin_token),
                           checks=[not_a_server_error, every_4xx_has_a_message])


@pytest.fixture(scope="module")
def result_statuses() -> Iterator[Counter[tuple[str, int]]]:
    """(phase, status) of every generated POST /api/v1/results, judged once all have run."""
    statuses: Counter[tuple[str, int]] = Counter()
    yield statuses
    by_status: Counter[int] = Counter()
    for (_phase, status), n in statuses.items():
        by_status[status] += n
    print(f"\nPOST /api/v1/results: {sum(statuses.values())} generated requests; by phase "
          f"and status {dict(sorted(statuses.items()))}")
    assert not [code for code in by_status if code >= 500], by_status
    # the example document was stored, and generated ones were refused with a 422
    assert by_status[201] >= 1 and by_status[422] >= 1, by_status


@schema.include(path="/api/v1/results", method="POST").parametrize()
@settings(max_examples=RESULTS_MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_generated_result_document_gets_a_5xx_or_a_silent_4xx(
    case: Any, app: FastAPI, ci_token: str, result_statuses: Counter[tuple[str, int]]
) -> None:
    response = case.call_and_validate(app=app, headers=bearer(ci_token),
                                      checks=[not_a_server_error, every_4xx_has_a_message])
    phase = case.meta.phase.name.value if case.meta is not None else "unknown"
    result_statuses[(phase, response.status_code)] += 1
