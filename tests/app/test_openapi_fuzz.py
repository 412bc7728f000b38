"""Generated requests from the OpenAPI document (schemathesis): whatever a client sends,
the API answers without a 5xx, and every 4xx says what was wrong.

Runs in-process against the ASGI app on the test PostgreSQL database, with an admin token
so that the write operations get past authentication and their bodies are exercised.
Bounded by `MAX_EXAMPLES` per operation so CI time stays predictable.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from app.config import Settings
from app.main import create_app
from tests.app.factories import bearer

MAX_EXAMPLES = 25

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


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx_or_a_silent_4xx(
    case: Any, app: FastAPI, admin_token: str
) -> None:
    case.call_and_validate(app=app, headers=bearer(admin_token),
                           checks=[not_a_server_error, every_4xx_has_a_message])
