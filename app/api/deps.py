"""Request dependencies as `Annotated` aliases, so routes declare what they need by type.

SessionDep: a session on the app's engine (closed after the request; routes commit).
CurrentToken: the bearer token if one was sent (a bad one is a 401 even where optional).
CiToken: a token with the `ci` scope (writes). AdminToken: `admin`.
TokenAdmin: an `admin` token of every project (token management).
ReadAccess: the projects the caller may read (a `read` token unless reads are public).
CiAccess, AdminAccess: the projects a `ci` / `admin` token may change.
RowIdPath, IdCursor: ids bounded to the store's integer range.

Every route that touches a project's data takes one of the *Access dependencies and hands
the ProjectAccess to the services (lists, single objects) or calls its check_write (a
write that names its project); tests/app/test_access.py holds every route to it.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.config import Settings
from app.errors import DATABASE_ERRORS, Forbidden, Unauthorized, database_reason
from app.models import ApiToken
from app.schemas import ID_MAX
from app.services.tokens import (
    EVERY_PROJECT,
    ProjectAccess,
    authenticate,
    has_scope,
    project_access,
)

log = logging.getLogger(__name__)


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_app_settings)]


def get_session(request: Request) -> Iterator[Session]:
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        try:
            session.close()
        except DATABASE_ERRORS as exc:
            # The connection died after the route's work (the database restarted): its
            # ROLLBACK fails. The answer is made, possibly on its way: raising here broke
            # it mid-response ("response already started"); the pool drops the connection.
            log.warning("closing a session after its request: %s", database_reason(exc))


SessionDep = Annotated[Session, Depends(get_session)]

_bearer = HTTPBearer(
    auto_error=False,
    description="`Authorization: Bearer sw_...`; create one with `speedwatch token create`",
)

BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def get_current_token(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiToken | None:
    if credentials is None:
        return None
    token = authenticate(session, credentials.credentials)
    if token is None:
        raise Unauthorized("invalid or revoked token")
    # Ends the transaction (writing last_used_at if it moved on), so the connection goes
    # back to the pool: what the route waits on next (a package index, a broker) is not
    # waited on while holding one.
    session.commit()
    return token


CurrentToken = Annotated[ApiToken | None, Depends(get_current_token)]


def _require(token: ApiToken | None, scope: str) -> ApiToken:
    if token is None:
        raise Unauthorized(f"this endpoint needs a bearer token with the {scope!r} scope")
    if not has_scope(token, scope):
        raise Forbidden(f"token {token.name!r} lacks the {scope!r} scope")
    return token


def require_ci(token: CurrentToken) -> ApiToken:
    return _require(token, "ci")


def require_read(token: CurrentToken, settings: SettingsDep) -> ProjectAccess:
    """With public reads anyone reads every project without a token, so a token's limit
    cannot hide anything there: it restricts only what the token writes."""
    if settings.public_reads:
        return EVERY_PROJECT
    return project_access(_require(token, "read"))


def require_admin(token: CurrentToken) -> ApiToken:
    return _require(token, "admin")


def require_metrics_reader(
    session: SessionDep, settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """`/metrics` follows the read policy, but a scrape holding the settings' metrics token
    gets in without the store (the session is not touched then): a database outage is what
    a scrape must report (`speedwatch_database_up 0`), not a 503."""
    if settings.public_reads:
        return
    expected = settings.metrics_token
    if expected is not None and credentials is not None and hmac.compare_digest(
            credentials.credentials.encode(), expected.get_secret_value().encode()):
        return
    _require(get_current_token(session, credentials), "read")


CiToken = Annotated[ApiToken, Depends(require_ci)]
AdminToken = Annotated[ApiToken, Depends(require_admin)]
ReadAccess = Annotated[ProjectAccess, Depends(require_read)]


def ci_access(token: CiToken) -> ProjectAccess:
    return project_access(token)


def admin_access(token: AdminToken) -> ProjectAccess:
    return project_access(token)


def require_token_admin(token: AdminToken) -> ApiToken:
    """A limited admin could mint a token of every project, so managing tokens needs an
    admin token that already has every project."""
    if token.projects:
        raise Forbidden(f"token {token.name!r} is limited to projects; managing tokens needs "
                        "an admin token of every project")
    return token


CiAccess = Annotated[ProjectAccess, Depends(ci_access)]
AdminAccess = Annotated[ProjectAccess, Depends(admin_access)]
TokenAdmin = Annotated[ApiToken, Depends(require_token_admin)]

RowIdPath = Annotated[int, Path(ge=1, le=ID_MAX)]
IdCursor = Annotated[
    int | None, Query(ge=1, le=ID_MAX, description="next_cursor of the previous page")
]
