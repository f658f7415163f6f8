"""Read a request body within a size limit, inflating gzip incrementally.

A gzip bomb is stopped as soon as its output passes the limit: the decompressor is
never asked for more than the bytes still allowed.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterable

from starlette.requests import ClientDisconnect

from services.profiler_api.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

_GZIP_WBITS = 16 + zlib.MAX_WBITS


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"body exceeds the limit of {limit} bytes ({limit // 2**20} MiB)")


def check_encoding(content_encoding: str | None) -> str:
    """Return 'gzip' or 'identity', or raise UnsupportedMediaType."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return "identity"
    if encoding in ("gzip", "x-gzip"):
        return "gzip"
    raise UnsupportedMediaType(f"Content-Encoding {content_encoding!r} is not supported; use gzip")


async def read_raw(
    stream: AsyncIterator[bytes], *, limit: int, content_length: str | None = None
) -> list[bytes]:
    """Collect the body's chunks as sent, raising PayloadTooLarge past `limit` bytes."""
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise _too_large(limit)  # declared too large: refuse before reading any of it
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise BadRequest("the client disconnected before sending the whole body") from exc
    return chunks


def inflate(chunks: Iterable[bytes], *, encoding: str, limit: int) -> bytes:
    """Return the decoded body, never holding more than `limit` + 1 inflated bytes.

    Concatenated gzip members (RFC 1952) are one body, as `gzip -d` reads them.
    """
    if encoding == "identity":
        return b"".join(chunks)
    inflater = zlib.decompressobj(_GZIP_WBITS)
    out = bytearray()
    try:
        for chunk in chunks:
            data = chunk
            while data:
                if inflater.eof:  # the next member starts
                    inflater = zlib.decompressobj(_GZIP_WBITS)
                out += inflater.decompress(data, limit + 1 - len(out))
                if len(out) > limit:
                    raise _too_large(limit)
                data = inflater.unconsumed_tail or inflater.unused_data
        out += inflater.flush()
    except zlib.error as exc:
        raise BadRequest(f"Content-Encoding gzip but the body is not valid gzip: {exc}") from exc
    if len(out) > limit:
        raise _too_large(limit)
    if not inflater.eof:
        raise BadRequest("Content-Encoding gzip but the gzip stream is truncated")
    return bytes(out)
