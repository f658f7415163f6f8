"""Load for the benchmarks: a closed loop of concurrent clients, and an open loop at a fixed rate.

Closed loop: `clients` clients each send their next request as soon as the last one is
answered; the figure is requests per second. Open loop: requests leave on a fixed schedule
whatever the answers do, and each latency is measured from the request's scheduled send time,
so a stalled server shows as latency instead of silently slowing the load (no coordinated
omission). The clients are aiohttp's (httpx's connection pool costs more CPU per request
than the server under test once hundreds of requests are in flight). `hey` (a Go load
generator), when on PATH, gives a closed loop that costs the client less CPU still.
"""

from __future__ import annotations

import asyncio
import csv
import gc
import io
import shutil
import subprocess
import time
from collections.abc import Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp
import numpy as np


@contextmanager
def steady_heap() -> Iterator[list[float]]:
    """Keep the load generator's own collector out of what a loop measures; yield the pauses.

    The process that sends the load also holds the benchmark's data (hundreds of thousands of
    objects): a full collection walking them stalled every client for 100-300 ms, which an
    open loop counts as the server's latency. Collected once before the loop and frozen, they
    are not walked again until it ends. The list yielded gets each collection's pause
    (seconds) while the loop runs, so a result shows what the client itself stalled.
    """
    gc.collect()
    gc.freeze()
    pauses: list[float] = []
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(timed)
        gc.unfreeze()


def _steadily(loop: Coroutine[Any, Any, LoadResult]) -> LoadResult:
    """Run a loop with the generator's heap steady; its result carries the generator's pauses."""
    with steady_heap() as pauses:
        result = asyncio.run(loop)
    result.client_gc_pauses_s = pauses
    return result


class Call(NamedTuple):
    """One request of a load: a GET of `path`, or a POST of `body` (JSON) when it has one."""

    path: str
    body: bytes | None = None

    async def send(self, http: aiohttp.ClientSession) -> tuple[int, bytes]:
        """Send the request; return the status and the body."""
        if self.body is None:
            request = http.get(self.path)
        else:
            request = http.post(
                self.path, data=self.body, headers={"Content-Type": "application/json"}
            )
        async with request as response:
            return response.status, await response.read()


@dataclass
class LoadResult:
    """Latencies (seconds) and status codes of the requests of one load."""

    duration_s: float
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    # The load generator's own collections during the loop (seconds each).
    client_gc_pauses_s: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return len(self.latencies_s)

    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    def percentile_ms(self, q: float) -> float | None:
        if not self.latencies_s:
            return None
        return round(float(np.percentile(np.array(self.latencies_s) * 1000.0, q)), 2)

    def summary(self) -> dict[str, float | int | str | None]:
        return {
            "requests": self.requests,
            "rps": round(self.rps(), 1),
            "p50_ms": self.percentile_ms(50),
            "p99_ms": self.percentile_ms(99),
            "max_ms": self.percentile_ms(100),
            "errors": self.errors,
            "first_error": self.first_error,
            "client_gc_max_ms": round(max(self.client_gc_pauses_s, default=0.0) * 1000.0, 2),
        }

    def record(self, latency_s: float, status: int, detail: str) -> None:
        self.latencies_s.append(latency_s)
        if status != 200:
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{status}: {detail[:300]}"


async def _sent(http: aiohttp.ClientSession, call: Call) -> tuple[int, str]:
    try:
        status, body = await call.send(http)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, repr(exc)
    return status, "" if status == 200 else body.decode(errors="replace")


def _client(base_url: str, headers: dict[str, str], connections: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        base_url=base_url,
        headers=headers,
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=30.0),
    )


async def _closed_loop(
    base_url: str, headers: dict[str, str], calls: Sequence[Call], clients: int, duration_s: float
) -> LoadResult:
    async with _client(base_url, headers, clients) as http:
        result = LoadResult(duration_s=duration_s)
        stop_at = time.perf_counter() + duration_s

        async def client(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                status, detail = await _sent(http, calls[i % len(calls)])
                result.record(time.perf_counter() - started, status, detail)
                i += clients

        started = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(clients)))
        result.duration_s = time.perf_counter() - started
        return result


def closed_loop(
    base_url: str,
    calls: Sequence[Call],
    *,
    headers: dict[str, str] | None = None,
    clients: int = 50,
    duration_s: float = 10.0,
) -> LoadResult:
    """Run `clients` concurrent Python clients cycling through `calls` for `duration_s`."""
    return _steadily(_closed_loop(base_url, headers or {}, calls, clients, duration_s))


def hey_available() -> bool:
    return shutil.which("hey") is not None


def hey_closed_loop(
    url: str, *, headers: dict[str, str] | None = None, clients: int = 50, duration_s: float = 10.0
) -> LoadResult:
    """Run `hey -z duration -c clients` against one URL; return its per-request figures."""
    command = ["hey", "-z", f"{duration_s}s", "-c", str(clients), "-o", "csv"]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    started = time.perf_counter()
    output = subprocess.run(command + [url], capture_output=True, text=True, check=True).stdout
    result = LoadResult(duration_s=duration_s)
    offsets = []
    for row in csv.DictReader(io.StringIO(output)):
        latency = float(row["response-time"])
        offsets.append(float(row["offset"]) + latency)
        result.latencies_s.append(latency)
        if row["status-code"] != "200":
            result.errors += 1
            result.first_error = result.first_error or f"status {row['status-code']}"
    result.duration_s = max(offsets) if offsets else time.perf_counter() - started
    return result


async def _open_loop(
    base_url: str, headers: dict[str, str], calls: Sequence[Call], rate: float, duration_s: float
) -> LoadResult:
    count = int(rate * duration_s)
    async with _client(base_url, headers, 512) as http:
        result = LoadResult(duration_s=duration_s)
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.2

        async def one(i: int) -> None:
            scheduled = start + i / rate
            await asyncio.sleep(max(0.0, scheduled - loop.time()))
            status, detail = await _sent(http, calls[i % len(calls)])
            result.record(loop.time() - scheduled, status, detail)

        await asyncio.gather(*(one(i) for i in range(count)))
        return result


def open_loop(
    base_url: str,
    calls: Sequence[Call],
    *,
    headers: dict[str, str] | None = None,
    rate: float = 500.0,
    duration_s: float = 10.0,
) -> LoadResult:
    """Send `calls` (in turn) at `rate` per second for `duration_s`, on schedule."""
    return _steadily(_open_loop(base_url, headers or {}, calls, rate, duration_s))
