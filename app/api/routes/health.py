"""Health, split as Kubernetes splits it, so that a broker outage does not take a working
API out of a load balancer.

- /livez: the process answers (no dependency is read): restart it when this fails.
- /readyz: it can serve: the database is reachable and migrated. Reads, uploads and
  triggers work without the broker (a trigger's cells wait in SQL and the reconciler sends
  them once the broker is back), so the broker does not decide readiness.
- /healthz: the whole report: 503 when the database is down, 200 "degraded" when only the
  broker is (when Celery executes), with each dependency's state.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import SettingsDep
from app.config import Settings
from app.db import schema_problem
from app.errors import database_reason
from app.schemas import HealthPublic, LivePublic

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


def _answer(request: Request, settings: Settings) -> JSONResponse:
    """Both dependencies reported; 503 only when the database is down."""
    db_ok, database = check_database(request)
    broker_ok, broker = check_broker(settings)
    status: Literal["ok", "degraded", "unavailable"] = (
        "ok" if db_ok and broker_ok else "degraded" if db_ok else "unavailable")
    body = HealthPublic(status=status, database=database, broker=broker)
    return JSONResponse(body.model_dump(), status_code=200 if db_ok else 503)


@router.get(
    "/healthz", response_model=HealthPublic,
    responses={503: {"model": HealthPublic, "description": "the database is down"}},
    summary="Database and broker reachability (degraded: the broker only)",
)
def healthz(request: Request, settings: SettingsDep) -> JSONResponse:
    return _answer(request, settings)


@router.get(
    "/readyz", response_model=HealthPublic,
    responses={503: {"model": HealthPublic, "description": "the database is down"}},
    summary="Readiness: the API can serve (the database is reachable and migrated)",
)
def readyz(request: Request, settings: SettingsDep) -> JSONResponse:
    # the same answer as /healthz: only the database decides whether the API can serve
    return _answer(request, settings)


@router.get("/livez", response_model=LivePublic, summary="Liveness: the process answers")
def livez() -> LivePublic:
    return LivePublic(status="ok")
