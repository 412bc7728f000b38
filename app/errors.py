"""Domain exceptions and their HTTP mapping.

Services raise these with messages that are safe to show a client; the API edge turns them
into 4xx answers. Infrastructure failures (database unreachable, statement timeout, pool
exhausted) become 503 with a one-line reason, never a bare 500 or a hang.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, InterfaceError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from benchmarks.result_schema import error_message

log = logging.getLogger(__name__)


class SpeedwatchError(Exception):
    """Base of errors whose message may be shown to the client."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(SpeedwatchError):
    """Input that is well-formed JSON but not acceptable; `field` names what to fix."""

    status_code = 422

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.field_message = message


class NotFound(SpeedwatchError):
    status_code = 404


class Conflict(SpeedwatchError):
    status_code = 409


class Unauthorized(SpeedwatchError):
    status_code = 401


class Forbidden(SpeedwatchError):
    status_code = 403


class ServiceUnavailable(SpeedwatchError):
    status_code = 503


DATABASE_ERRORS = (OperationalError, InterfaceError, PoolTimeoutError)


def database_reason(exc: BaseException) -> str:
    """First line of the driver's message (host and port, never the password); for a
    database whose schema is missing or older than this code, what to do about it."""
    original = getattr(exc, "orig", None) or exc
    text = str(original).strip().splitlines()
    line = text[0] if text else type(original).__name__
    if schema_missing(exc):
        return f"{MIGRATE_HINT} ({line[:200]})"
    return line[:300]


MIGRATE_HINT = ("the database schema is missing or older than this server: "
                "run `speedwatch migrate`")
_SCHEMA_MISSING = ("no such table", "no such column", "does not exist", "undefinedtable",
                   "undefinedcolumn")


def schema_missing(exc: BaseException) -> bool:
    """A query failed because a table or column is not there: the database was never
    migrated, or was migrated by an older release (SQLite says "no such table", PostgreSQL
    "relation ... does not exist")."""
    if not isinstance(exc, (OperationalError, ProgrammingError)):
        return False
    original = getattr(exc, "orig", None) or exc
    text = f"{type(original).__name__} {original}".lower()
    return any(marker in text for marker in _SCHEMA_MISSING)


def _field_name(loc: tuple[Any, ...] | list[Any]) -> str:
    """("body", "matrix", "models", 1) -> "matrix.models[1]"."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] if parts[0] == "body" else parts
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += ("." if name else "") + str(part)
    return name or "body"


def _error_body(detail: str, errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": detail}
    if errors is not None:
        body["errors"] = errors
    return body


def install_exception_handlers(app: FastAPI) -> None:
    @app.exception_handler(SpeedwatchError)
    async def _domain(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SpeedwatchError)
        errors = None
        if isinstance(exc, InvalidRequest):
            errors = [{"field": exc.field, "message": exc.field_message}]
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return JSONResponse(
            _error_body(exc.message, errors), status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = []
        for error in exc.errors():
            errors.append({"field": _field_name(error.get("loc", ())),
                           "message": error_message(error)})
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
        return JSONResponse(_error_body(detail, errors), status_code=422)

    async def _database(_request: Request, exc: Exception) -> JSONResponse:
        reason = database_reason(exc)
        log.warning("database unavailable: %s", reason)
        return JSONResponse(
            _error_body(f"database unavailable: {reason}"),
            status_code=503,
            headers={"Retry-After": "5"},
        )

    for exc_type in DATABASE_ERRORS:
        app.add_exception_handler(exc_type, _database)

    @app.exception_handler(ProgrammingError)
    async def _programming(request: Request, exc: Exception) -> JSONResponse:
        if schema_missing(exc):  # not migrated: a 503 that says what to run
            return await _database(request, exc)
        log.error("SQL error", exc_info=exc)
        return JSONResponse(_error_body("internal error: the server logged it"),
                            status_code=500, headers={"Connection": "close"})

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, _exc: Exception) -> JSONResponse:
        # A defect of ours: still a JSON answer like every other, and `Connection: close`
        # said out loud, since the server drops the connection after an unhandled error
        # (a client that reuses it would otherwise see its next request reset). The
        # traceback is logged by the server; the client gets no internals.
        return JSONResponse(_error_body("internal error: the server logged it"),
                            status_code=500, headers={"Connection": "close"})

    @app.exception_handler(DataError)
    async def _data(_request: Request, exc: Exception) -> JSONResponse:
        # The schemas bound what they can; this catches a value the store still refuses
        # (a number beyond its column type, say): the client's input, so a 4xx, not a 500.
        reason = database_reason(exc)
        log.info("value refused by the database: %s", reason)
        return JSONResponse(_error_body(f"a value is outside what the store accepts: {reason}"),
                            status_code=422)
