"""The page token's cookie, set by the server: HttpOnly (no script on the page can read
it back), SameSite=Strict, Secure when the page was served over HTTPS. The token field
sends the token once as a bearer header; the pages of a server without public reads are
then read with the cookie.

Both routes answer only the site's own pages: a browser says where a request comes from
(`Sec-Fetch-Site`, else `Origin`), and another site's form or script is refused 403. A
cross-site form could otherwise sign a user out (the answer deletes the cookie whatever
sent it). A request with neither header is no browser's (curl, a script) and is served."""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter, Request, Response

from app.api.deps import BearerDep, SessionDep, SettingsDep
from app.config import Settings
from app.errors import Forbidden, Unauthorized
from app.services.tokens import authenticate

TOKEN_COOKIE = "speedwatch_token"
# what a browser's Sec-Fetch-Site says of a request the site's own page made (or the user
# typed: "none")
_OWN_SITE = ("same-origin", "none")

router = APIRouter(prefix="/session", include_in_schema=False)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _same_site_only(request: Request, settings: Settings) -> None:
    """Forbidden unless the request came from this site's own pages (or from no browser)."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        if fetch_site.lower() not in _OWN_SITE:
            raise Forbidden(f"a {fetch_site} request may not change this site's session")
        return
    origin = request.headers.get("origin")
    if origin is None:
        return
    own = {request.headers.get("host", "").lower()}
    if settings.public_url:
        own.add(urlsplit(settings.public_url).netloc.lower())
    if urlsplit(origin).netloc.lower() not in own:
        raise Forbidden(f"a request from {origin[:100]!r} may not change this site's session")


@router.post("/token", status_code=204)
def keep_token(request: Request, session: SessionDep, settings: SettingsDep,
               credentials: BearerDep) -> Response:
    _same_site_only(request, settings)
    if credentials is None:
        raise Unauthorized("send the token as a bearer header to keep it for the pages")
    if authenticate(session, credentials.credentials) is None:
        raise Unauthorized("invalid or revoked token")
    session.commit()
    response = Response(status_code=204)
    response.set_cookie(TOKEN_COOKIE, credentials.credentials, httponly=True,
                        samesite="strict", secure=_secure(request), path="/")
    return response


@router.post("/forget", status_code=204)
def forget_token(request: Request, settings: SettingsDep) -> Response:
    _same_site_only(request, settings)
    response = Response(status_code=204)
    response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict",
                           secure=_secure(request), path="/")
    return response
