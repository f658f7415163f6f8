"""Tokens over the API: issue, list and revoke (an admin, its own organisation's only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from services.profiler_api.auth import repository
from services.profiler_api.auth.schemas import IssuedToken, TokenOut, TokenRequest
from services.profiler_api.auth.service import Principal, Role, create_token
from services.profiler_api.bounds import Offset
from services.profiler_api.deps import AdminDep, SessionDep
from services.profiler_api.errors import Forbidden, NotFound
from tps.bounds import NO_NUL

router = APIRouter(prefix="/v1/tokens", tags=["auth"])
TokenId = Annotated[int, Path(ge=1, le=2**63 - 1, description="token id")]


def _scope(principal: Principal, org: str | None) -> str | None:
    """Return the organisation the caller acts on (None: every one, for an operator)."""
    if principal.fleet_wide:
        return org
    if org is not None and org != principal.org_name:
        raise Forbidden(f"org: an admin manages only its own organisation ({principal.org_name})")
    return principal.org_name


@router.post("", response_model=IssuedToken, status_code=201)
def issue_token(body: TokenRequest, session: SessionDep, principal: AdminDep) -> IssuedToken:
    """Create a token for the caller's organisation (an operator: any, created when new)."""
    org = _scope(principal, body.org) or principal.org_name
    role = Role(body.role.value)
    token = create_token(session, org=org, role=role, name=body.name)
    return IssuedToken(org=org, role=role, token=token)


@router.get("", response_model=list[TokenOut], summary="Tokens, oldest first")
def list_tokens(
    session: SessionDep,
    principal: AdminDep,
    org: Annotated[str | None, Query(min_length=1, max_length=128, pattern=NO_NUL)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> list[TokenOut]:
    """List the tokens of the caller's organisation (an operator: of `org`, or all)."""
    rows = repository.list_tokens(session, org=_scope(principal, org), limit=limit, offset=offset)
    return [TokenOut.model_validate(row, from_attributes=True) for row in rows]


@router.post("/{token_id}/revoke", response_model=TokenOut, summary="Revoke a token at once")
def revoke_token(
    request: Request, session: SessionDep, principal: AdminDep, token_id: TokenId
) -> TokenOut:
    """Revoke a token: this replica refuses it from this answer on, the others as soon as
    the revocation's notification reaches them (milliseconds)."""
    row = repository.revoke_token(session, token_id, org=_scope(principal, None))
    if row is None:
        raise NotFound(f"token_id: no token {token_id} in organisation {principal.org_name}")
    session.commit()
    request.app.state.token_cache.invalidate()  # not waiting for our own notification
    return TokenOut.model_validate(row, from_attributes=True)
