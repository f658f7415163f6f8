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

    _head_bytes = 0  # bytes of the current head received so far
    _tail = b""  # the last bytes of the head so far: its end may straddle two chunks

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._in_head():
            end = (self._tail + data).find(b"\r\n\r\n")
            size = self._head_bytes + (len(data) if end < 0 else end + 4 - len(self._tail))
            if size > max_head_bytes():
                self._refuse_head()  # before the parser buffers any of it
                return
            self._head_bytes, self._tail = (size, data[-3:]) if end < 0 else (0, b"")
        else:
            self._head_bytes, self._tail = 0, b""
        super().data_received(data)

    def _in_head(self) -> bool:
        # Between messages, or inside a head: no request is reading a body. A head that
        # begins in the chunk that ends a body is counted from the next chunk on.
        cycle = getattr(self, "cycle", None)
        return cycle is None or not cycle.more_body

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
