"""POST /v1/tokens (admin): issue tokens over the API, as `tps token create` does locally."""

from __future__ import annotations

from fastapi import APIRouter

from services.profiler_api.auth.schemas import IssuedToken, TokenRequest
from services.profiler_api.auth.service import create_token
from services.profiler_api.deps import AdminDep, SessionDep

router = APIRouter(prefix="/v1", tags=["auth"])


@router.post("/tokens", response_model=IssuedToken, status_code=201)
def issue_token(body: TokenRequest, session: SessionDep, _: AdminDep) -> IssuedToken:
    """Create a token for an organisation (created when new); it is shown once."""
    token = create_token(session, org=body.org, role=body.role, name=body.name)
    return IssuedToken(org=body.org, role=body.role, token=token)
