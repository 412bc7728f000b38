"""The page token's cookie, set by the server: HttpOnly (no script on the page can read
it back), SameSite=Strict, Secure when the page was served over HTTPS. The token field
sends the token once as a bearer header; the pages of a server without public reads are
then read with the cookie."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.api.deps import BearerDep, SessionDep
from app.errors import Unauthorized
from app.services.tokens import authenticate

TOKEN_COOKIE = "speedwatch_token"

router = APIRouter(prefix="/session", include_in_schema=False)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


@router.post("/token", status_code=204)
def keep_token(request: Request, session: SessionDep, credentials: BearerDep) -> Response:
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
def forget_token(request: Request) -> Response:
    response = Response(status_code=204)
    response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict",
                           secure=_secure(request), path="/")
    return response
