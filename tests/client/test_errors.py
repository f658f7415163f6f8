"""How the client reads each kind of answer, on a transport that answers what the test says."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest

from client import (
    AuthError,
    BadAnswer,
    ClientError,
    JobTimeout,
    RejectedError,
    ServiceBusy,
    ServiceClient,
    ServiceTimeout,
)
from client.service import batches
from tests.factories import probe_run

Handler = Callable[[httpx.Request], httpx.Response]


def client_of(handler: Handler, *, token: str | None = "s3cret") -> ServiceClient:
    http = httpx.Client(base_url="http://tps.test", transport=httpx.MockTransport(handler))
    return ServiceClient(http, token=token, clock=lambda: 1445412480.0)


def answer(status: int, body: object, **headers: str) -> Handler:
    return lambda request: httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 425, 429])
def test_server_errors_and_throttling_are_retryable(status: int) -> None:
    tps = client_of(answer(status, {"detail": "busy"}, **{"Retry-After": "7"}))

    with pytest.raises(ServiceBusy) as err:
        tps.stats()

    assert err.value.retryable and err.value.status == status
    assert err.value.retry_after == 7.0
    assert err.value.body is not None and err.value.body.detail == "busy"


def test_retry_after_as_an_http_date_counts_from_now() -> None:
    date = "Wed, 21 Oct 2015 07:28:10 GMT"  # ten seconds after the client's clock
    tps = client_of(answer(503, {"detail": "x"}, **{"Retry-After": date}))

    with pytest.raises(ServiceBusy) as err:
        tps.stats()

    assert err.value.retry_after == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, RejectedError),
        (413, RejectedError),
        (422, RejectedError),
        (401, AuthError),
        (403, AuthError),
    ],
)
def test_other_client_errors_are_permanent(status: int, kind: type[ClientError]) -> None:
    tps = client_of(answer(status, {"detail": "no", "errors": None}))

    with pytest.raises(kind) as err:
        tps.stats()

    assert not err.value.retryable and err.value.status == status
    assert "answered" in str(err.value) and "no" in str(err.value)


def test_an_error_page_that_is_not_the_service_s_keeps_its_text() -> None:
    tps = client_of(lambda request: httpx.Response(502, text="<html>bad gateway</html>"))

    with pytest.raises(ServiceBusy) as err:
        tps.stats()

    assert err.value.body is None and "bad gateway" in str(err.value)


def test_a_success_with_a_body_of_another_shape_is_a_bad_answer() -> None:
    tps = client_of(answer(200, {"runs": "many"}))

    with pytest.raises(BadAnswer) as err:
        tps.stats()

    assert err.value.retryable and err.value.status == 200


def test_a_timeout_says_how_long_it_waited() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(ServiceTimeout, match="within 200 ms") as err:
        client_of(slow).request("GET", "/v1/stats", timeout=0.2)

    assert err.value.retryable


def test_pushes_are_gzipped_batches_with_the_token() -> None:
    seen: list[httpx.Request] = []

    def ingest(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        runs = json.loads(gzip.decompress(request.content))["runs"]
        return httpx.Response(200, json={"accepted": len(runs), "duplicates": 0, "measurements": 3})

    result = client_of(ingest).push([probe_run() for _ in range(5)], max_runs=2)

    assert result.accepted == 5 and len(seen) == 3
    assert all(r.url.path == "/v1/probe-runs" for r in seen)
    assert all(r.headers["authorization"] == "Bearer s3cret" for r in seen)
    assert all(r.headers["content-encoding"] == "gzip" for r in seen)


def test_no_token_sends_no_authorization_header() -> None:
    seen: list[httpx.Request] = []

    def ready(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "ready"})

    client_of(ready, token=None).ready()

    assert "authorization" not in seen[0].headers


def test_batches_keep_under_both_limits_and_never_leave_a_run_out() -> None:
    runs = [b"x" * 10] * 7

    by_count = [len(b) for b in batches(runs, max_bytes=1000, max_runs=3)]
    by_size = [len(b) for b in batches(runs, max_bytes=25, max_runs=100)]
    oversized = [len(b) for b in batches([b"y" * 50, b"z"], max_bytes=10, max_runs=100)]

    assert by_count == [3, 3, 1]
    assert by_size == [2, 2, 2, 1]
    assert oversized == [1, 1]  # a run larger than the limit still goes, alone


def test_waiting_for_a_job_polls_until_it_ends_or_the_deadline() -> None:
    states = iter(["queued", "running", "succeeded"])
    now = [0.0]

    def job(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_job(next(states, "running")))

    def sleep(seconds: float) -> None:
        now[0] += seconds

    done = client_of(job).wait_for_job(uuid.uuid4(), poll_s=1.0, sleep=sleep, clock=lambda: now[0])
    assert done.state == "succeeded" and now[0] == 2.0

    with pytest.raises(JobTimeout):
        client_of(job).wait_for_job(
            uuid.uuid4(), timeout_s=3.0, poll_s=1.0, sleep=sleep, clock=lambda: now[0]
        )


def _job(state: str) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "state": state,
        "params": {},
        "metrics": None,
        "error": None,
        "model_version": None,
        "worker": None,
        "requested_at": datetime.now(UTC).isoformat(),
        "started_at": None,
        "finished_at": None,
    }
