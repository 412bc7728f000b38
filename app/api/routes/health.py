"""Liveness with its dependencies: the database always, the broker when Celery executes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import SettingsDep
from app.config import Settings
from app.db import schema_problem
from app.errors import database_reason
from app.schemas import HealthPublic

router = APIRouter(tags=["health"])


def check_database(request: Request) -> tuple[bool, str]:
    """Reachable and at this code's schema revision: a database nobody migrated answers
    SELECT 1 but fails every real request, so it is not "ok"."""
    try:
        with request.app.state.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
            problem = schema_problem(connection)
    except Exception as exc:  # any failure is "down", with its reason
        return False, f"unavailable: {database_reason(exc)}"
    if problem is not None:
        return False, problem
    return True, "ok"


def check_broker(settings: Settings) -> tuple[bool, str]:
    if settings.executor != "celery":
        return True, f"not used (executor {settings.executor!r})"
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        return True, "not checked (only Redis brokers are probed)"
    import redis

    try:
        client = redis.Redis.from_url(
            settings.broker_url, socket_connect_timeout=2, socket_timeout=2
        )
        client.ping()
        client.close()
    except Exception as exc:  # connection refused, timeout, auth...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return False, f"unavailable: {first[:300]}"
    return True, "ok"


@router.get(
    "/healthz", response_model=HealthPublic,
    responses={503: {"model": HealthPublic, "description": "a dependency is down"}},
    summary="Database and broker reachability",
)
def healthz(request: Request, settings: SettingsDep) -> JSONResponse:
    db_ok, database = check_database(request)
    broker_ok, broker = check_broker(settings)
    ok = db_ok and broker_ok
    body = HealthPublic(status="ok" if ok else "unavailable", database=database, broker=broker)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)
