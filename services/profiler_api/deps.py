"""Dependencies of the routers, as typed aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from services.profiler_api.auth.service import Principal, Role, authenticate
from services.profiler_api.metrics import ServiceMetrics
from services.profiler_api.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="a token from `tps token create`")


def get_session(request: Request) -> Iterator[Session]:
    """Open a session for one request; commit when the handler succeeds, else roll back."""
    session: Session = request.app.state.session_factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# scope="function": commit before the response is sent, so a 200 means the data is stored.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# Dependencies that only read app state or check a role are `async def`: FastAPI runs a
# sync dependency in the thread pool, and each hop costs about a millisecond on a busy box.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]


def get_principal(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Return the caller, or raise Unauthorized."""
    return authenticate(session, credentials.credentials if credentials else None)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_agent(principal: PrincipalDep) -> Principal:
    return principal.require(Role.AGENT)


async def require_admin(principal: PrincipalDep) -> Principal:
    return principal.require(Role.ADMIN)


AgentDep = Annotated[Principal, Depends(require_agent)]
AdminDep = Annotated[Principal, Depends(require_admin)]
