"""Cached answers to `GET /v1/priors`, sent before FastAPI routes the request.

Every agent of a fleet asks the same few questions again and again, and once an answer is
cached what is left of a request is FastAPI's work: routing, six dependencies and three
validated query parameters, about as much again as the answer itself. This middleware
answers a request that the router would answer from the cache, with the same checks in the
same order (a well-formed bearer token this replica knows, a role that may read priors, the
token's rate limit) and the same body. Anything else (no token or an unknown one, a bad or
repeated parameter, a question not cached, a token past its rate limit) goes on to the
router untouched, which answers it or names the problem as before.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Receive, Scope, Send

from services.profiler_api.auth.service import Principal, Role, check_token
from services.profiler_api.priors.query import (
    DEFAULT_LIMIT,
    HARDWARE_ID_MAX,
    LIMIT_MAX,
    PROBLEM_MAX,
    ids_key,
)
from tps.errors import TPSError

PATH = "/v1/priors"
_NAMES = frozenset({"hardware_id", "problem", "limit"})
_HEADERS = [(b"content-type", b"application/json")]


def _question(query_string: bytes) -> tuple[str, str, int] | None:
    """Return (hardware_id, problem, limit) if the router would accept them as they are."""
    try:
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        return None
    params = dict(pairs)
    if len(params) != len(pairs) or not params.keys() <= _NAMES:
        return None
    hardware_id, problem = params.get("hardware_id", ""), params.get("problem", "")
    if not 0 < len(hardware_id) <= HARDWARE_ID_MAX or not 0 < len(problem) <= PROBLEM_MAX:
        return None
    if "\x00" in hardware_id or "\x00" in problem:
        return None
    raw = params.get("limit")
    if raw is None:
        return hardware_id, problem, DEFAULT_LIMIT
    if not raw.isascii() or not raw.isdigit() or len(raw) > 3:
        return None
    limit = int(raw)
    return (hardware_id, problem, limit) if 1 <= limit <= LIMIT_MAX else None


def _token(scope: Scope) -> str | None:
    """Return the bearer token as FastAPI's HTTPBearer reads it (first header), or None."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, token = get_authorization_scheme_param(value.decode("latin-1"))
            return token if scheme.lower() == "bearer" and token else None
    return None


class CachedPriorsMiddleware:
    """Send cached `GET /v1/priors` answers; pass every other request on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route: Any = None  # the router's route of this path, which metrics label by

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        body = self._answer(scope)
        if body is None:
            await self.app(scope, receive, send)
            # Only the router's answers fill the cache, so it has routed one before any
            # answer leaves from here: its route labels those in the metrics too.
            self._route = self._route or scope.get("route")
            return
        scope["route"] = self._route
        headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, scope: Scope) -> bytes | None:
        """Return the cached body for this request, or None to let the router answer it."""
        question = _question(scope["query_string"])
        token = _token(scope)
        if question is None or token is None:
            return None
        state = scope["app"].state
        try:
            token_hash = check_token(token)
        except TPSError:
            return None
        principal: Principal | None = state.token_cache.get(token_hash)
        if principal is None:
            return None
        try:
            principal.require(Role.AGENT)
        except TPSError:
            return None
        answer = state.prior_service.cached(ids_key(*question))
        if answer is None:
            return None
        try:  # the token's rate limit counts only requests this path answers
            state.rate_limiter.check(token_hash)
        except TPSError:
            return None
        state.metrics.priors.labels(answer.source).inc()
        body: bytes = answer.body
        return body
