"""The pusher batches, gzips, retries with capped backoff, and deletes only after a 2xx."""

from __future__ import annotations

import gzip
import json
import threading

import httpx
import pytest

from agents.daemon.errors import PushError
from agents.daemon.metrics import AgentMetrics
from agents.daemon.pusher import Pusher, RetryPolicy
from agents.daemon.spool import Spool
from client.errors import ServiceUnreachable, retry_after_seconds
from tests.agents.daemon.conftest import gemm, make_run


class Service:
    """An in-test transport answering with scripted statuses, then 200 with an IngestResult."""

    def __init__(self, script: list[int | httpx.Response | Exception] | None = None) -> None:
        self.script = list(script or [])
        self.batches: list[list[str]] = []
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script.pop(0) if self.script else 200
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx.Response):
            return step
        if step != 200:
            return httpx.Response(step, json={"detail": "scripted"})
        body = json.loads(gzip.decompress(request.content))
        ids = [run["run_id"] for run in body["runs"]]
        self.batches.append(ids)
        return httpx.Response(
            200, json={"accepted": len(ids), "duplicates": 0, "measurements": len(ids)}
        )


def make_pusher(spool: Spool, service, *, sleeps: list[float], policy=None) -> Pusher:
    client = httpx.Client(base_url="http://tps.test", transport=httpx.MockTransport(service))
    return Pusher(
        spool=spool,
        client=client,
        token="agent-token",
        batch_runs=1000,
        policy=policy or RetryPolicy(max_attempts=5, initial_s=0.5, max_s=4.0),
        metrics=AgentMetrics(),
        sleep=sleeps.append,
    )


def test_batches_of_at_most_1000_gzipped_with_the_token(spool: Spool) -> None:
    runs = [make_run(gemm(m)) for m in range(1, 2501)]
    spool.put(runs)
    service = Service()

    assert make_pusher(spool, service, sleeps=[]).drain() == 2500

    assert [len(b) for b in service.batches] == [1000, 1000, 500]
    assert [i for b in service.batches for i in b] == [str(r.run_id) for r in runs]
    request = service.requests[0]
    assert request.headers["content-encoding"] == "gzip"
    assert request.headers["authorization"] == "Bearer agent-token"
    assert spool.depth() == 0
    assert spool.state()["last_push_at"] is not None


def test_retry_after_is_honoured_on_429_and_503(spool: Spool) -> None:
    spool.put([make_run(gemm(1))])
    throttled = httpx.Response(429, headers={"Retry-After": "3"})
    down = httpx.Response(503, headers={"Retry-After": "1.5"})
    service, sleeps = Service([throttled, down]), []

    assert make_pusher(spool, service, sleeps=sleeps).drain() == 1
    assert sleeps == [3.0, 1.5]


def test_backoff_is_exponential_jittered_and_capped(spool: Spool) -> None:
    spool.put([make_run(gemm(1))])
    service, sleeps = Service([500] * 5), []
    pusher = make_pusher(spool, service, sleeps=sleeps)

    assert pusher.drain() == 0

    assert len(service.requests) == 5  # max_attempts, then the runs wait for the next cycle
    assert len(sleeps) == 4
    assert all(0 <= s <= 4.0 for s in sleeps)
    assert spool.depth() == 1  # nothing deleted without a 2xx
    assert spool.state()["push_errors"] == 5  # every failed attempt counts
    assert "500" in str(spool.state()["last_error"])


def test_network_errors_are_wrapped_and_retried(spool: Spool) -> None:
    spool.put([make_run(gemm(1))])
    refused = httpx.ConnectError("connection refused")
    service, sleeps = Service([refused, httpx.ReadTimeout("slow")]), []

    assert make_pusher(spool, service, sleeps=sleeps).drain() == 1
    assert len(sleeps) == 2


def test_push_error_keeps_the_httpx_cause(spool: Spool) -> None:
    spool.put([make_run(gemm(1))])
    service = Service([httpx.ConnectError("connection refused")])
    pusher = make_pusher(spool, service, sleeps=[], policy=RetryPolicy(max_attempts=1))
    batch = spool.peek(10)
    with pytest.raises(PushError) as err:
        pusher.push_batch(batch, stop=threading.Event())
    assert isinstance(err.value.__cause__, ServiceUnreachable)
    assert isinstance(err.value.__cause__.__cause__, httpx.ConnectError)


def test_a_run_the_service_rejects_is_isolated_and_quarantined(spool: Spool) -> None:
    runs = [make_run(gemm(m)) for m in range(1, 9)]
    spool.put(runs)
    poison = str(runs[5].run_id)

    def service(request: httpx.Request) -> httpx.Response:
        ids = [r["run_id"] for r in json.loads(gzip.decompress(request.content))["runs"]]
        if poison in ids:
            return httpx.Response(422, json={"detail": "bad run"})
        return httpx.Response(200, json={"accepted": len(ids), "duplicates": 0, "measurements": 0})

    assert make_pusher(spool, service, sleeps=[]).drain() == 7
    assert spool.depth() == 0
    assert spool.state()["quarantined"] == 1


def test_a_bad_token_keeps_the_runs(spool: Spool) -> None:
    spool.put([make_run(gemm(1))])
    service = Service([401])
    assert make_pusher(spool, service, sleeps=[]).drain() == 0
    assert len(service.requests) == 1  # not retried
    assert spool.depth() == 1
    assert spool.state()["quarantined"] == 0


def test_retry_after_as_http_date() -> None:
    response = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"})
    assert retry_after_seconds(response, now=1445412480.0) == pytest.approx(10.0)
