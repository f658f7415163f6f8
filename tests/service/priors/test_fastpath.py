"""Cached `GET /v1/priors` answers leave before the router, with the router's checks and body."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from services.profiler_api.app import create_app
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine
from services.profiler_api.priors.fastpath import CachedPriorsMiddleware
from services.profiler_api.settings import Settings
from tests.factories import batch_body, probe_run
from tps.schemas import ProbeRun


class Served:
    """What the cached path answered, request by request (None: passed to the router)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bodies: list[bytes | None] = []
        answer = CachedPriorsMiddleware._answer

        def spy(middleware: CachedPriorsMiddleware, scope: Any) -> bytes | None:
            body = answer(middleware, scope)
            self.bodies.append(body)
            return body

        monkeypatch.setattr(CachedPriorsMiddleware, "_answer", spy)

    def last(self) -> bytes | None:
        return self.bodies[-1]


@pytest.fixture
def app_client(
    migrated_database_url: str, request: pytest.FixtureRequest
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """An app in this process (its middleware can be watched), and tokens; `burst` by param."""
    engine = make_engine(migrated_database_url, Settings(db_pool_size=1))
    with Session(engine) as session, session.begin():
        tokens = {
            "agent": create_token(session, org="fastpath", role=Role.AGENT),
            "admin": create_token(session, org="fastpath", role=Role.ADMIN),
        }
    settings = Settings(
        database_url=migrated_database_url,
        rate_limit_per_s=1.0,
        rate_limit_burst=getattr(request, "param", 1000),
        training_worker=False,
        db_pool_size=2,
    )
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 10
        while not client.app.state.token_cache.live:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the token cache never went live"
            time.sleep(0.02)
        yield client, tokens
    engine.dispose()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _pushed_run(client: TestClient, token: str) -> ProbeRun:
    """Push one probe run of a new problem; return it."""
    run = probe_run()
    pushed = client.post("/v1/probe-runs", content=batch_body([run]), headers=_bearer(token))
    assert pushed.status_code == 200, pushed.text
    return run


def test_a_cached_answer_leaves_before_the_router_with_the_same_body(
    app_client: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, tokens = app_client
    run = _pushed_run(client, tokens["agent"])
    served = Served(monkeypatch)
    params = {"hardware_id": run.hardware.fingerprint(), "problem": run.problem.key_hash()}
    first = client.get("/v1/priors", params=params, headers=_bearer(tokens["agent"]))
    assert first.status_code == 200 and served.last() is None  # the router answered, and cached
    second = client.get("/v1/priors", params=params, headers=_bearer(tokens["agent"]))
    assert second.status_code == 200 and served.last() == first.content
    assert second.content == first.content
    assert second.headers["content-type"] == "application/json"
    assert int(second.headers["content-length"]) == len(first.content)
    metrics = client.get("/metrics").text
    assert 'tps_priors_served_total{source="observed"} 2.0' in metrics
    assert 'tps_priors_answer_seconds_count{source="observed"} 1.0' in metrics  # computed once
    assert 'route="/v1/priors"' in metrics and "unmatched" not in metrics


def test_what_the_cached_path_cannot_answer_goes_to_the_router(
    app_client: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, tokens = app_client
    run = _pushed_run(client, tokens["agent"])
    hw, problem = run.hardware.fingerprint(), run.problem.key_hash()
    good = f"hardware_id={hw}&problem={problem}"
    assert client.get(f"/v1/priors?{good}", headers=_bearer(tokens["agent"])).status_code == 200
    served = Served(monkeypatch)
    cases = [
        (good, {}, 401),  # no token
        (good, _bearer("tps_" + "x" * 40), 401),  # a token nobody issued
        (good, {"Authorization": f"Basic {tokens['agent']}"}, 401),
        (f"{good}&limit=0", _bearer(tokens["agent"]), 422),
        (f"{good}&limit=9999", _bearer(tokens["agent"]), 422),
        (f"{good}&limit=eight", _bearer(tokens["agent"]), 422),
        (f"hardware_id={'a' * 65}&problem={problem}", _bearer(tokens["agent"]), 422),
        (f"hardware_id={hw}&problem=%00", _bearer(tokens["agent"]), 422),
        (f"problem={problem}", _bearer(tokens["agent"]), 422),
    ]
    for query, headers, status in cases:
        response = client.get(f"/v1/priors?{query}", headers=headers)
        assert response.status_code == status, (query, response.text)
        assert served.last() is None, query
        assert response.json()["detail"], query  # the router's error names the problem
    # a question not cached, and one whose parameter is repeated, reach the router too
    other = client.get(
        f"/v1/priors?{good}&limit=3", headers=_bearer(tokens["agent"])
    )  # not cached yet
    assert other.status_code == 200 and served.last() is None
    repeated = client.get(f"/v1/priors?{good}&problem={problem}", headers=_bearer(tokens["agent"]))
    assert repeated.status_code == 200 and served.last() is None


@pytest.mark.parametrize("app_client", [6], indirect=True)
def test_the_cached_path_keeps_the_tokens_rate_limit(
    app_client: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, tokens = app_client
    run = _pushed_run(client, tokens["admin"])
    params = {"hardware_id": run.hardware.fingerprint(), "problem": run.problem.key_hash()}
    served = Served(monkeypatch)
    statuses = [
        client.get("/v1/priors", params=params, headers=_bearer(tokens["agent"])).status_code
        for _ in range(8)
    ]
    # a burst of 6 at 1 request a second: the seventh is refused, cached or not
    assert statuses[:6] == [200] * 6 and 429 in statuses[6:], statuses
    assert any(body is not None for body in served.bodies[:6])
    refused = client.get("/v1/priors", params=params, headers=_bearer(tokens["agent"]))
    assert refused.status_code == 429 and served.last() is None
    assert int(refused.headers["retry-after"]) >= 1
