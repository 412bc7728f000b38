"""The API's interactive documentation, served whole by the app: Swagger UI's script and
stylesheet come from the installed `fastapi-swagger` package instead of a CDN, so `/docs`
works on a machine without internet (FastAPI's default page is blank there)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from app.errors import NotFound

router = APIRouter(include_in_schema=False)

ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "favicon-32x32.png": "image/png"}


def _asset(name: str) -> Path:
    return Path(str(resources.files("fastapi_swagger").joinpath("resources", name)))


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} API",
        swagger_js_url=f"{root}/static/swagger/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/static/swagger/swagger-ui.css",
        swagger_favicon_url=f"{root}/static/swagger/favicon-32x32.png",
        oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
    )


@router.get("/docs/oauth2-redirect")
def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc() -> RedirectResponse:
    """ReDoc's bundle has no maintained offline package; its old address leads to /docs."""
    return RedirectResponse("/docs")


@router.get("/static/swagger/{name}")
def swagger_asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise NotFound(f"no asset {name!r}")
    return FileResponse(_asset(name), media_type=ASSETS[name],
                        headers={"Cache-Control": "public, max-age=86400"})
