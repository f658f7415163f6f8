"""Hostile clients cannot starve the others: slow uploads, huge headers, gzip bombs.

While they run, another organisation's priors keep answering within a second, and the
service's memory stays under a stated bound.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psutil
import pytest
import sqlalchemy.exc

from services.profiler_api.errors import database_error
from tests.factories import batch_body, probe_run
from tests.service.conftest import TIGHT_LIMITS, BoundedService

SLOW_UPLOADS = 16  # eight times the pool (TPS_DB_POOL_SIZE=2, no overflow)
ANSWER_WITHIN_S = 1.0


def _host_port(base_url: str) -> tuple[str, int]:
    host, port = base_url.removeprefix("http://").split(":")
    return host, int(port)


@contextmanager
def slow_uploads(service: BoundedService, count: int) -> Iterator[list[socket.socket]]:
    """Open `count` sockets that declare 100,000 body bytes and send 10."""
    host, port = _host_port(service.base_url)
    head = (
        "POST /v1/probe-runs HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"Authorization: Bearer {service.tokens['acme-agent']}\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 100000\r\n\r\n"
    ).encode()
    sockets = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, port))
            sock.sendall(head + b'{"runs": [')
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def _priors_latency(service: BoundedService) -> float:
    run = probe_run()
    with service.client("globex-agent") as client:
        started = time.monotonic()
        response = client.post(
            "/v1/priors",
            json={
                "hardware": run.hardware.model_dump(mode="json"),
                "problem": run.problem.model_dump(mode="json"),
            },
        )
        elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    return elapsed


def test_slow_uploads_hold_no_connection_and_time_out(bounded_service: BoundedService) -> None:
    with slow_uploads(bounded_service, SLOW_UPLOADS) as sockets:
        time.sleep(0.2)  # let every upload reach the service and start waiting for its body
        latencies = [_priors_latency(bounded_service) for _ in range(5)]
        with bounded_service.client("globex-agent") as client:
            assert client.post("/v1/probe-runs", content=batch_body([probe_run()])).is_success
        assert max(latencies) < ANSWER_WITHIN_S, latencies
        print(f"\nslow uploads: {SLOW_UPLOADS} held, priors max {max(latencies):.3f} s")
        # Each upload is refused with 408 once its body deadline passes.
        timeout_s = float(TIGHT_LIMITS["TPS_BODY_TIMEOUT_S"])
        sockets[0].settimeout(timeout_s + 5)
        answer = b""
        while chunk := sockets[0].recv(4096):  # headers and body may come in two reads
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive" in answer


def test_a_huge_header_is_431_at_once_and_health_stays_quick(
    bounded_service: BoundedService,
) -> None:
    host, port = _host_port(bounded_service.base_url)
    answer: list[bytes] = []

    def send_huge_header() -> None:
        with socket.create_connection((host, port)) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            chunk = b"a" * 65536
            try:
                for _ in range(2048):  # up to 128 MiB, until the server closes
                    sock.sendall(chunk)
            except OSError:
                pass
            sock.settimeout(5)
            try:
                answer.append(sock.recv(4096))
            except OSError:
                answer.append(b"")

    started = time.monotonic()
    sender = threading.Thread(target=send_huge_header)
    sender.start()
    with httpx.Client(base_url=bounded_service.base_url, timeout=5) as client:
        while sender.is_alive():
            probe = time.monotonic()
            assert client.get("/healthz").status_code == 200
            assert time.monotonic() - probe < ANSWER_WITHIN_S
    sender.join()
    assert time.monotonic() - started < 10
    assert answer and (answer[0].startswith(b"HTTP/1.1 431") or answer[0] == b""), answer


def test_a_long_request_line_is_431(bounded_service: BoundedService) -> None:
    host, port = _host_port(bounded_service.base_url)
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /healthz?" + b"q" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 431")


def test_keep_alive_requests_with_large_bodies_are_not_mistaken_for_heads(
    bounded_service: BoundedService,
) -> None:
    body = batch_body([probe_run() for _ in range(40)])
    assert len(body) > 2 * int(TIGHT_LIMITS["TPS_MAX_HEADER_BYTES"])
    with bounded_service.client("acme-agent") as client:
        for _ in range(3):  # one connection, several requests
            assert client.post("/v1/probe-runs", content=body).status_code == 200


BOMBS = 8
BOMB_INFLATED = 1024 * 1024 * 1024  # each bomb inflates to 1 GiB


def test_concurrent_gzip_bombs_are_413_within_a_memory_bound(
    bounded_service: BoundedService,
) -> None:
    limit = int(TIGHT_LIMITS["TPS_MAX_BODY_BYTES"])
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    bomb = b"".join([bomb] * (BOMB_INFLATED // (64 * 1024 * 1024)))  # 16 members, ~1 MiB
    assert len(bomb) < limit
    process = psutil.Process(bounded_service.service.pid)
    before = process.memory_info().rss
    peak = before
    statuses: list[int] = []

    def push() -> None:
        with bounded_service.client("acme-agent") as client:
            statuses.append(
                client.post(
                    "/v1/probe-runs", content=bomb, headers={"Content-Encoding": "gzip"}
                ).status_code
            )

    threads = [threading.Thread(target=push) for _ in range(BOMBS)]
    for thread in threads:
        thread.start()
    latencies = []
    while any(t.is_alive() for t in threads):
        peak = max(peak, process.memory_info().rss)
        latencies.append(_priors_latency(bounded_service))
    for thread in threads:
        thread.join()
    assert statuses == [413] * BOMBS
    print(
        f"\ngzip bombs: {BOMBS} x {len(bomb)} bytes, RSS growth {(peak - before) / 2**20:.0f} MiB "
        f"(bound {bound_mib(len(bomb), limit):.0f} MiB), priors max {max(latencies):.3f} s"
    )
    # Stated bound: each bomb in flight holds its compressed body and at most the limit
    # once inflated (plus the JSON of nothing); 64 MiB covers allocator slack.
    bound = bound_mib(len(bomb), limit) * 2**20
    assert peak - before < bound, (peak - before, bound)
    assert max(latencies) < ANSWER_WITHIN_S, latencies


def bound_mib(compressed: int, limit: int) -> float:
    """The stated bound: each bomb in flight holds its compressed body and at most the
    limit inflated; 64 MiB covers allocator slack."""
    return (BOMBS * (compressed + limit) + 64 * 2**20) / 2**20


@pytest.mark.parametrize(
    "error, status",
    [
        (sqlalchemy.exc.TimeoutError("QueuePool limit reached"), 503),
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed")), 503),
    ],
)
def test_a_busy_pool_is_a_503_with_retry_after(error: Exception, status: int) -> None:
    api_error = database_error(error)
    assert api_error.status_code == status
    assert int(api_error.headers()["Retry-After"]) >= 1
