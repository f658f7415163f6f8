"""The HTTP protocol the service runs on: uvicorn's httptools parser, with a bounded head.

httptools parses a request line and headers of any size, buffering them as they come; a
client could send hundreds of megabytes of header and stall the event loop. This protocol
counts the bytes of each request's head and answers 431 once they pass the limit
(`TPS_MAX_HEADER_BYTES`), closing the connection, before the application sees anything.
"""

from __future__ import annotations

import json
from functools import cache

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

# uvicorn's --http option takes this path (`tps serve` and the runner pass it).
PROTOCOL = "services.profiler_api.server:HeadBoundedProtocol"


@cache
def max_head_bytes() -> int:
    """Return the limit from the service's settings, read once per process."""
    from services.profiler_api.settings import Settings

    return Settings().max_header_bytes


class HeadBoundedProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that refuses a request line plus headers over the limit (431)."""

    _head_bytes: int | None = 0  # bytes of the current head; None once the head is complete

    def data_received(self, data: bytes) -> None:
        in_head_before = self._head_bytes is not None
        super().data_received(data)
        if in_head_before and self._head_bytes is not None:
            self._head_bytes += len(data)
            if self._head_bytes > max_head_bytes() and not self.transport.is_closing():
                self._refuse_head()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes = 0  # the next request's head starts

    def _refuse_head(self) -> None:
        limit = max_head_bytes()
        body = json.dumps(
            {"detail": f"request line and headers exceed the limit of {limit} bytes"}
        ).encode()
        self.transport.write(
            STATUS_LINE[431]
            + b"content-type: application/json\r\n"
            + b"content-length: " + str(len(body)).encode() + b"\r\n"
            + b"connection: close\r\n\r\n"
            + body
        )  # fmt: skip
        self.transport.close()
