"""Body decoding: the 32 MiB limit holds for plain and gzip bodies, whatever they claim."""

from __future__ import annotations

import gzip
import zlib

import pytest

from services.profiler_api.errors import BadRequest, PayloadTooLarge
from services.profiler_api.ingest.body import inflate
from services.profiler_api.settings import Settings


def test_default_limit_is_32_mib() -> None:
    assert Settings().max_body_bytes == 32 * 2**20


def test_gzip_within_limit_round_trips_in_any_chunking() -> None:
    data = b"x" * 100_000 + bytes(range(256)) * 100
    packed = gzip.compress(data)
    chunks = [packed[i : i + 7] for i in range(0, len(packed), 7)]
    assert inflate(chunks, encoding="gzip", limit=len(data)) == data


def test_inflating_stops_at_the_limit() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = compressor.compress(b"\0" * 2**26) + compressor.flush()  # 64 MiB from ~64 KiB
    with pytest.raises(PayloadTooLarge):
        inflate([bomb], encoding="gzip", limit=2**20)


def test_exactly_the_limit_is_accepted() -> None:
    data = b"a" * 4096
    assert inflate([gzip.compress(data)], encoding="gzip", limit=4096) == data
    with pytest.raises(PayloadTooLarge):
        inflate([gzip.compress(data + b"a")], encoding="gzip", limit=4096)


def test_trailing_bytes_after_the_stream_are_rejected() -> None:
    with pytest.raises(BadRequest, match="not valid gzip"):
        inflate([gzip.compress(b"{}") + b"junk"], encoding="gzip", limit=1024)


def test_concatenated_members_are_one_body_split_anywhere() -> None:
    body = gzip.compress(b'{"a": ') + gzip.compress(b"1}")
    for cut in range(len(body) + 1):
        assert inflate([body[:cut], body[cut:]], encoding="gzip", limit=1024) == b'{"a": 1}'


def test_a_bomb_split_over_members_is_still_stopped() -> None:
    member = gzip.compress(b"0" * 3000)
    with pytest.raises(PayloadTooLarge):
        inflate([member, member], encoding="gzip", limit=4096)
