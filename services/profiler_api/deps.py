"""Dependencies of the routers, as typed aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.profiler_api.auth.cache import TokenCache
from services.profiler_api.auth.limits import RateLimiter
from services.profiler_api.auth.service import Principal, Role, check_token, lookup
from services.profiler_api.ingest.parsing import ParsePool
from services.profiler_api.metrics import ServiceMetrics
from services.profiler_api.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="a token from `tps token create`")


def get_session(request: Request) -> Iterator[Session]:
    """Open a session for one request; commit when the handler succeeds, else roll back.

    A session takes a pooled connection at its first statement, not here, so a request
    whose body is still arriving holds none.
    """
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
    settings: Settings = request.app.state.settings
    return settings


async def get_metrics(request: Request) -> ServiceMetrics:
    metrics: ServiceMetrics = request.app.state.metrics
    return metrics


async def get_parse_pool(request: Request) -> ParsePool:
    pool: ParsePool = request.app.state.parse_pool
    return pool


SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
ParsePoolDep = Annotated[ParsePool, Depends(get_parse_pool)]


def _lookup(request: Request, token_hash: str) -> Principal:
    # A session of its own, closed at once: the connection goes back to the pool before
    # the request reads its body or does its work.
    with request.app.state.session_factory() as session:
        return lookup(session, token_hash)


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Return the caller (from this replica's token cache when it can), or raise Unauthorized.

    Then take one request from the token's rate limit (429 with Retry-After past it).
    """
    token_hash = check_token(credentials.credentials if credentials else None)
    cache: TokenCache = request.app.state.token_cache
    principal: Principal | None = cache.get(token_hash)
    if principal is None:
        generation = cache.generation
        principal = await run_in_threadpool(_lookup, request, token_hash)
        cache.put(token_hash, principal, generation=generation)
    limiter: RateLimiter = request.app.state.rate_limiter
    limiter.check(token_hash)
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_agent(principal: PrincipalDep) -> Principal:
    return principal.require(Role.AGENT)


async def require_admin(principal: PrincipalDep) -> Principal:
    return principal.require(Role.ADMIN)


async def require_operator(principal: PrincipalDep) -> Principal:
    return principal.require(Role.OPERATOR)


AgentDep = Annotated[Principal, Depends(require_agent)]
AdminDep = Annotated[Principal, Depends(require_admin)]
OperatorDep = Annotated[Principal, Depends(require_operator)]
