"""API tokens: creation (plaintext shown once), constant-time authentication, scopes.

Only sha256(token) is stored. A token is 256 bits of randomness, so a plain hash is enough
(no salt or slow hash needed: there is nothing to brute-force). The lookup is by hash and
the final comparison uses hmac.compare_digest so timing says nothing about near misses.
Tokens are never logged; log the id or name.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidRequest, NotFound
from app.models import TOKEN_SCOPES, ApiToken

TOKEN_PREFIX = "sw_"
# Writing last_used on every request would turn each read into a write; minute precision
# is enough to find unused tokens.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(session: Session, scope: str, name: str | None = None) -> tuple[ApiToken, str]:
    """Store a new token and return it with its plaintext (the only time it exists)."""
    if scope not in TOKEN_SCOPES:
        raise InvalidRequest("scope", f"{scope!r} is not one of {', '.join(TOKEN_SCOPES)}")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name or f"{scope}-token",
        token_hash=hash_token(plaintext),
        scopes=[scope],
    )
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


def has_scope(token: ApiToken, needed: str) -> bool:
    """admin implies every scope; ci implies read (a CI job polls the run it triggered)."""
    scopes = set(token.scopes or [])
    if "admin" in scopes or needed in scopes:
        return True
    return needed == "read" and "ci" in scopes


def revoke_token(session: Session, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} not found")
    if token.revoked_at is None:
        token.revoked_at = datetime.now(timezone.utc)
    return token


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))
