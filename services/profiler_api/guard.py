"""Bound every request body in size and in time, before any route sees it.

A body that is declared or found too large answers 413; one that has not arrived by its
deadline answers 408 and the connection is closed. Routes read bodies through this
bound, and none takes a database connection before its body is in, so a slow or huge
upload holds a socket, never a pooled connection.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.profiler_api.errors import APIError, PayloadTooLarge, RequestTimeout


async def send_error(send: Send, error: APIError) -> None:
    """Send `error` as a whole response (ErrorBody) and close the connection after it."""
    body = json.dumps({"detail": error.message}).encode()
    headers = {
        **error.headers(),
        "content-type": "application/json",
        "content-length": str(len(body)),
        "connection": "close",
    }
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass
class _Request:
    error: APIError | None = None
    answered: bool = False
    received: int = 0
    complete: bool = False


class BodyGuardMiddleware:
    """Refuse bodies over `max_bytes` (413) or slower than `timeout_s` in all (408)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"body exceeds the limit of {self.max_bytes} bytes ({self.max_bytes // 2**20} MiB)"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await send_error(send, self._too_large())
                return
        state = _Request()
        deadline = asyncio.get_running_loop().time() + self.timeout_s

        async def bounded_receive() -> Message:
            if state.complete:  # waiting for a disconnect is not a body
                return await receive()
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(remaining, 0.0))
            except TimeoutError:
                state.error = RequestTimeout(f"the body did not arrive within {self.timeout_s:g} s")
                raise state.error from None
            if message["type"] == "http.request":
                state.received += len(message.get("body", b""))
                if state.received > self.max_bytes:
                    state.error = self._too_large()
                    raise state.error
                state.complete = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            # Whatever a route made of the failed read (a 400 from a parser), the client
            # hears the real reason.
            if state.error is None:
                await send(message)
            elif not state.answered:
                state.answered = True
                await send_error(send, state.error)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        except Exception:
            if state.error is None or state.answered:
                raise
            state.answered = True
            await send_error(send, state.error)
