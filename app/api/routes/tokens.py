"""API tokens over HTTP (admin scope): list, create, revoke; the same as `speedwatch token`.

An admin token limited to projects may not manage tokens (deps.TokenAdmin says why)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import RowIdPath, SessionDep, TokenAdmin
from app.api.presenters import error_responses
from app.schemas import TokenCreate, TokenCreatedPublic, TokenListPublic, TokenPublic
from app.services.tokens import create_token, list_tokens, revoke_token

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])

ERRORS = error_responses(401, 403, 422, 503)


@router.get("", response_model=TokenListPublic, responses=ERRORS,
            summary="List tokens, never their values (admin scope)")
def get_tokens(session: SessionDep, _admin: TokenAdmin) -> TokenListPublic:
    return TokenListPublic(items=[TokenPublic.model_validate(t) for t in list_tokens(session)])


@router.post("", response_model=TokenCreatedPublic, status_code=201, responses=ERRORS,
             summary="Create a token; its value is in this answer only (admin scope)")
def post_token(body: TokenCreate, session: SessionDep, _admin: TokenAdmin) -> TokenCreatedPublic:
    token, plaintext = create_token(session, body.scope, body.name, body.projects)
    session.commit()
    return TokenCreatedPublic(**TokenPublic.model_validate(token).model_dump(), token=plaintext)


@router.post("/{token_id}/revoke", response_model=TokenPublic,
             responses={**error_responses(404), **ERRORS},
             summary="Revoke a token: it is refused (401) from the next request (admin scope)")
def revoke(token_id: RowIdPath, session: SessionDep, _admin: TokenAdmin) -> TokenPublic:
    """Revoking an already revoked token keeps its first revocation time."""
    token = revoke_token(session, token_id)
    session.commit()
    return TokenPublic.model_validate(token)
