"""Cached answers to `GET` and `POST /v1/priors`, sent before FastAPI routes the request.

Every agent of a fleet asks the same few questions again and again (the hosts of a job ask
about their GPU all at once), and once an answer is cached what is left of a request is
FastAPI's work: routing, six dependencies, validated parameters or body, about as much again
as the answer itself. This middleware answers a request that the router would answer from
the cache, with the same checks in the same order (a well-formed bearer token this replica
knows, a role that may read priors, the question valid as the router validates it, the
token's rate limit) and the same body. Anything else (no token or an unknown one, a bad or
repeated parameter, a body that is not plain JSON or not a valid question, a question not
cached, a token past its rate limit) goes on to the router untouched, the body it read
replayed, and the router answers it or names the problem as before.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.profiler_api.auth.service import Principal, Role, check_token
from services.profiler_api.priors.query import (
    DEFAULT_LIMIT,
    HARDWARE_ID_MAX,
    LIMIT_MAX,
    PROBLEM_MAX,
    PriorQuery,
    ids_key,
    spec_key,
)
from tps.errors import TPSError
from tps.schemas import PriorRequest

PATH = "/v1/priors"
_BEARER = b"bearer "
_NAMES = frozenset({"hardware_id", "problem", "limit"})
_HEADERS = [(b"content-type", b"application/json")]
# A question's body is a spec and a problem, a few kilobytes: past this the router reads it.
BODY_MAX = 64 * 1024


def _get_question(query_string: bytes) -> tuple[str, str, int] | None:
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
    for name, value in scope["headers"]:
        if name == b"authorization":
            if value[:7].lower() != _BEARER:
                return None
            token = value[7:].decode("latin-1").strip()
            return token or None
    return None


def _post_question(scope: Scope, body: bytes) -> Hashable | None:
    """Return the cache key of a POSTed question, if the router would accept its body."""
    content_type = encoding = b""
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value.split(b";")[0].strip().lower()
        elif name == b"content-encoding":
            encoding = value
    if content_type != b"application/json" or encoding or not body:
        return None
    try:  # as FastAPI reads a body: json.loads, then the model in Python mode
        request = PriorRequest.model_validate(json.loads(body), from_attributes=True)
    except (ValueError, ValidationError):
        return None
    query = PriorQuery.of(request.hardware, request.problem, limit=request.limit)
    return spec_key(query)


async def _read_body(receive: Receive) -> tuple[list[Message], bytes | None]:
    """Read a whole body of at most BODY_MAX bytes; return the messages read and the body
    (None when it was larger, or something else arrived: the router reads the rest)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > BODY_MAX:
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(m.get("body", b"") for m in messages)


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """Return a receive that gives `messages` again, then what `receive` gives."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


class CachedPriorsMiddleware:
    """Send cached `/v1/priors` answers; pass every other request on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._routes: dict[str, Any] = {}  # the router's routes by method, for the metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if scope["type"] != "http" or scope["path"] != PATH or method not in ("GET", "POST"):
            await self.app(scope, receive, send)
            return
        key: Hashable | None = None
        if method == "GET":
            question = _get_question(scope["query_string"])
            key = ids_key(*question) if question is not None else None
        else:
            messages, body = await _read_body(receive)
            receive = _replaying(messages, receive)
            key = _post_question(scope, body) if body is not None else None
        answer = self._answer(scope, key) if key is not None else None
        if answer is None:
            await self.app(scope, receive, send)
            # Only the router's answers fill the cache, so it has routed one of this method
            # before any answer leaves from here: its route labels those in the metrics too.
            if scope.get("route") is not None:
                self._routes.setdefault(method, scope["route"])
            return
        scope["route"] = self._routes.get(method)
        headers = [*_HEADERS, (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    def _answer(self, scope: Scope, key: Hashable) -> bytes | None:
        """Return the cached body for the question `key`, or None to let the router answer."""
        token = _token(scope)
        if token is None:
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
        answer = state.prior_service.cached(key)
        if answer is None:
            return None
        try:  # the token's rate limit counts only requests this path answers
            state.rate_limiter.check(token_hash)
        except TPSError:
            return None
        state.metrics.priors.labels(answer.source).inc()
        body: bytes = answer.body
        return body
