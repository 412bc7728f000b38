"""API tokens: creation (plaintext shown once), constant-time authentication, scopes, and
the projects a token is limited to (ProjectAccess, the one place that decides it).

Only sha256(token) is stored. A token is 256 bits of randomness, so a plain hash is enough
(no salt or slow hash needed: there is nothing to brute-force). The lookup is by hash and
the final comparison uses hmac.compare_digest so timing says nothing about near misses.
Tokens are never logged; log the id or name.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from sqlalchemy import Select, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.errors import Forbidden, InvalidRequest, NotFound
from app.models import TOKEN_SCOPES, ApiToken, Project
from app.schemas import PROJECT_NAME_MAX, PROJECT_NAME_PATTERN

TOKEN_PREFIX = "sw_"
# Writing last_used on every request would turn each read into a write; minute precision
# is enough to find unused tokens.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(
    session: Session, scope: str, name: str | None = None,
    projects: Sequence[str] | None = None,
) -> tuple[ApiToken, str]:
    """Store a new token and return it with its plaintext (the only time it exists).

    `projects` limits it to those projects, which need not exist yet (a project is created
    by its first run, so a pipeline's token is made before it). None: every project.
    """
    if scope not in TOKEN_SCOPES:
        raise InvalidRequest("scope", f"{scope!r} is not one of {', '.join(TOKEN_SCOPES)}")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name or f"{scope}-token",
        token_hash=hash_token(plaintext),
        scopes=[scope],
    )
    if projects is not None:  # left unset otherwise: SQL NULL, not a JSON null
        token.projects = _project_names(projects)
    session.add(token)
    session.flush()
    return token, plaintext


def authenticate(session: Session, plaintext: str) -> ApiToken | None:
    """The live token matching `plaintext`, or None (unknown, malformed or revoked)."""
    if not plaintext.startswith(TOKEN_PREFIX) or len(plaintext) > 200:
        return None
    digest = hash_token(plaintext)
    token = session.scalars(select(ApiToken).where(ApiToken.token_hash == digest)).first()
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return None
    if token.revoked_at is not None:
        return None
    now = datetime.now(timezone.utc)
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        token.last_used_at = now
    return token


def admission_group(session: Session, plaintext: str) -> str | None:
    """Whose places a request holding `plaintext` takes (app.api.admission), or None when
    it is no live token. A token limited to projects shares its places with every token of
    the same projects, so minting two or three tokens for one project adds no places; a
    token of every project (an admin's to mint) has its own. Read-only: the route that
    answers authenticates again and records the use."""
    if not plaintext.startswith(TOKEN_PREFIX) or len(plaintext) > 200:
        return None
    digest = hash_token(plaintext)
    row = session.execute(
        select(ApiToken.id, ApiToken.token_hash, ApiToken.projects, ApiToken.revoked_at)
        .where(ApiToken.token_hash == digest)).first()
    if row is None or row.revoked_at is not None \
            or not hmac.compare_digest(row.token_hash, digest):
        return None
    if row.projects:
        return "projects:" + ",".join(sorted(row.projects))
    return f"token:{row.id}"


def has_scope(token: ApiToken, needed: str) -> bool:
    """admin implies every scope; ci implies read (a CI job polls the run it triggered)."""
    scopes = set(token.scopes or [])
    if "admin" in scopes or needed in scopes:
        return True
    return needed == "read" and "ci" in scopes


def _project_names(projects: Sequence[str]) -> list[str]:
    """Checked, deduplicated and sorted; an empty list is refused rather than read as "every
    project", since a script that computed no project surely did not mean all of them."""
    if not projects:
        raise InvalidRequest("projects", "name at least one project, or none at all for a "
                                         "token of every project")
    for name in projects:
        if len(name) > PROJECT_NAME_MAX or not re.fullmatch(PROJECT_NAME_PATTERN, name):
            raise InvalidRequest("projects", f"{name!r} is not a project name (letters, "
                                             f"digits, '.', '_', '/', '-'; at most "
                                             f"{PROJECT_NAME_MAX} characters)")
    return sorted(set(projects))


def revoke_token(session: Session, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} not found")
    if token.revoked_at is None:
        token.revoked_at = datetime.now(timezone.utc)
    return token


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


SelectT = TypeVar("SelectT", bound=Select[Any])


@dataclass(frozen=True)
class ProjectAccess:
    """The projects one request may touch; `names` None: every project.

    Reads of another project answer as if it did not exist: lists leave its rows out and a
    single object is a 404 with the very message of an unknown id, so a limited token
    cannot learn which other projects, runs or regressions exist. A write that names its
    project (trigger, ingest, detection policy) is a 403 instead: the caller named the
    project, so there is nothing to hide, and a pipeline holding the wrong token should be
    told so rather than see a 404 that reads like a typo.
    """

    names: frozenset[str] | None = None
    holder: str = ""  # the token's name, for the 403's message

    def allows(self, project: str) -> bool:
        return self.names is None or project in self.names

    def restrict(self, query: SelectT, project_id: InstrumentedAttribute[int]) -> SelectT:
        """Filtered in SQL, before LIMIT, so that a page of a list stays full and its
        cursor right (filtering the rows read would leave pages short or empty)."""
        if self.names is None:
            return query
        return query.where(project_id.in_(
            select(Project.id).where(Project.name.in_(sorted(self.names)))))

    def check_write(self, project: str) -> None:
        if not self.allows(project):
            assert self.names is not None
            raise Forbidden(f"token {self.holder!r} is limited to project(s) "
                            f"{', '.join(sorted(self.names))}; not {project!r}")


EVERY_PROJECT = ProjectAccess()


def project_access(token: ApiToken | None) -> ProjectAccess:
    """What `token` may touch (no token: what the server's read policy already let through,
    which is every project)."""
    if token is None or not token.projects:
        return EVERY_PROJECT
    return ProjectAccess(frozenset(token.projects), token.name)
