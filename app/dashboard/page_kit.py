"""What every dashboard page is made with: the templates and their filters, a page or an
error page rendered, the route class that turns any failure into an HTML page, and who may
read (a page's access, from the token cookie or public reads)."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from sqlalchemy.exc import ProgrammingError

from app.api.deps import SessionDep, SettingsDep
from app.errors import (
    DATABASE_ERRORS,
    Forbidden,
    NotFound,
    SpeedwatchError,
    Unauthorized,
    database_reason,
    schema_missing,
)
from app.schemas import ID_MAX
from app.services import series as series_service
from app.services.tokens import (
    EVERY_PROJECT,
    ProjectAccess,
    authenticate,
    has_scope,
    project_access,
)

from .session import TOKEN_COOKIE

HERE = Path(__file__).resolve().parent
TRIGGER_HINT = ("speedwatch submit --url URL --token TOKEN --project P --revision R "
                "--model resnet50 --backend onnxruntime --wait")

templates = Jinja2Templates(directory=str(HERE / "templates"))


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _when(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def series_href(key: str, project: str) -> str:
    """The series page of `key` in `project`: every link to a series names its project,
    because the same key may be measured by several projects."""
    return f"/series/{quote(key, safe='/')}?project={quote(project, safe='')}"


def series_api_href(key: str, project: str, what: str) -> str:
    """The API's `points` or `changes` of the series (what a page links to as raw data)."""
    return f"/api/v1/series/{quote(key, safe='/')}/{what}?project={quote(project, safe='')}"


def _threads(value: int | None) -> str:
    return series_service.THREADS_AUTO if value is None else str(value)


def _json_script(value: Any) -> Markup:
    """JSON safe inside <script type="application/json">: no '<', '>' or '&' survive."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)


templates.env.filters.update(speedup=_speedup, pct=_pct, when=_when, json_script=_json_script,
                             threads=_threads)
templates.env.globals.update(series_href=series_href, series_api_href=series_api_href)
templates.env.globals["TRIGGER_HINT"] = TRIGGER_HINT


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def error_page(request: Request, status_code: int, message: str) -> HTMLResponse:
    titles = {401: "Token needed", 403: "Not allowed", 404: "Not found", 409: "Conflict",
              422: "Bad request", 503: "Unavailable"}
    return _page(request, "error.html", status_code=status_code,
                 title=titles.get(status_code, "Error"), message=message,
                 needs_token=status_code in (401, 403))


class PageRoute(APIRoute):
    """A route whose errors are HTML pages (the API's handlers answer JSON)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except SpeedwatchError as exc:
                return error_page(request, exc.status_code, exc.message)
            except RequestValidationError as exc:
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg')}"
                    for e in exc.errors())
                return error_page(request, 422, detail or "invalid request")
            except DATABASE_ERRORS as exc:
                return error_page(request, 503, f"database unavailable: {database_reason(exc)}")
            except ProgrammingError as exc:
                if not schema_missing(exc):
                    raise
                return error_page(request, 503, database_reason(exc))

        return page_handler


def page_access(request: Request, session: SessionDep, settings: SettingsDep) -> ProjectAccess:
    """Reads are open with public reads; otherwise the token cookie must have `read`, and
    its project limit applies (the API's deps.require_read, from a cookie)."""
    if settings.public_reads:
        return EVERY_PROJECT
    plaintext = request.cookies.get(TOKEN_COOKIE)
    if not plaintext:
        raise Unauthorized("this server has no public reads: paste a token with the 'read' "
                           "scope into the token field above, then reload")
    token = authenticate(session, plaintext)
    if token is None:
        raise Unauthorized("the saved token is invalid or revoked: paste another one")
    if not has_scope(token, "read"):
        raise Forbidden(f"token {token.name!r} lacks the 'read' scope")
    return project_access(token)


PageAccess = Annotated[ProjectAccess, Depends(page_access)]


def _row_id(value: int, what: str) -> int:
    """An id of a page's URL, or the page's 404: ids are PostgreSQL integers, and one
    outside their range names nothing (sent to the store, it failed there as an error)."""
    if not 1 <= value <= ID_MAX:
        raise NotFound(f"{what} {value} not found")
    return value
