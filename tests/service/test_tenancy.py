"""Tenancy and quotas: an admin manages its own organisation; an operator the fleet.

Tokens are listed and revoked (API and CLI) and a revoked token is refused by every
replica, although replicas cache tokens; requests and queued jobs are bounded.
"""

from __future__ import annotations

import time

import httpx
import pytest
from typer.testing import CliRunner

from cli import app
from tests.factories import batch_body, probe_run
from tests.service.conftest import TIGHT_LIMITS, BoundedService, issue_tokens
from tools.local_service import running_service


def test_an_admin_issues_tokens_only_for_its_own_organisation(
    bounded_service: BoundedService,
) -> None:
    with bounded_service.client("acme-admin") as admin:
        other = admin.post("/v1/tokens", json={"org": "globex", "role": "admin"})
        assert other.status_code == 403 and "org" in other.json()["detail"]
        own = admin.post("/v1/tokens", json={"role": "agent", "name": "rack-7"})
        assert own.status_code == 201 and own.json()["org"] == "acme"
        operator = admin.post("/v1/tokens", json={"role": "operator"})
        assert operator.status_code == 422  # operators come only from the CLI
    with bounded_service.client("operator") as operator_client:
        minted = operator_client.post("/v1/tokens", json={"org": "initech", "role": "admin"})
        assert minted.status_code == 201 and minted.json()["org"] == "initech"


def test_runs_belong_to_their_organisation_admins_included(
    bounded_service: BoundedService,
) -> None:
    run = probe_run()
    with bounded_service.client("acme-agent") as agent:
        assert agent.post("/v1/probe-runs", content=batch_body([run])).status_code == 200
    path = f"/v1/probe-runs/{run.run_id}"
    with bounded_service.client("acme-admin") as own_admin:
        assert own_admin.get(path).status_code == 200
    with bounded_service.client("globex-admin") as other_admin:
        assert other_admin.get(path).status_code == 404
    with bounded_service.client("operator") as operator:
        assert operator.get(path).status_code == 200


def test_jobs_are_seen_and_cancelled_by_their_organisation_only(
    bounded_service: BoundedService,
) -> None:
    with bounded_service.client("acme-admin") as acme:
        job = acme.post("/v1/admin/retrain", json={})
        assert job.status_code == 202, job.text
        job_id = job.json()["job_id"]
        assert job_id in [j["id"] for j in acme.get("/v1/admin/jobs").json()]
    with bounded_service.client("globex-admin") as globex:
        assert globex.get(f"/v1/admin/jobs/{job_id}").status_code == 404
        assert globex.post(f"/v1/admin/jobs/{job_id}/cancel").status_code == 404
        assert job_id not in [j["id"] for j in globex.get("/v1/admin/jobs").json()]
    with bounded_service.client("operator") as operator:
        assert operator.get(f"/v1/admin/jobs/{job_id}").status_code == 200
    with bounded_service.client("acme-admin") as acme:
        assert acme.post(f"/v1/admin/jobs/{job_id}/cancel").status_code == 200


def test_queued_jobs_per_organisation_are_bounded(bounded_service: BoundedService) -> None:
    limit = int(TIGHT_LIMITS["TPS_MAX_QUEUED_JOBS_PER_ORG"])
    with bounded_service.client("globex-admin") as globex:
        answers = [globex.post("/v1/admin/retrain", json={}) for _ in range(limit + 2)]
        statuses = [a.status_code for a in answers]
        assert statuses == [202] * limit + [429, 429]
        assert int(answers[-1].headers["retry-after"]) >= 1
        # Another organisation's queue is its own.
        with bounded_service.client("acme-admin") as acme:
            assert acme.post("/v1/admin/retrain", json={}).status_code == 202
        # A cancelled job frees its place.
        globex.post(f"/v1/admin/jobs/{answers[0].json()['job_id']}/cancel")
        assert globex.post("/v1/admin/retrain", json={}).status_code == 202


def test_tokens_are_listed_and_revoked_over_the_api(bounded_service: BoundedService) -> None:
    with bounded_service.client("globex-admin") as admin:
        issued = admin.post("/v1/tokens", json={"role": "agent", "name": "doomed"}).json()
        listed = admin.get("/v1/tokens").json()
        assert {t["org"] for t in listed} == {"globex"}
        assert "token" not in listed[0] and "token_hash" not in listed[0]
        doomed = next(t for t in listed if t["name"] == "doomed")
        with httpx.Client(
            base_url=bounded_service.base_url,
            headers={"Authorization": f"Bearer {issued['token']}"},
        ) as agent:
            assert agent.get("/v1/stats").status_code == 200  # now cached by the replica
            revoked = admin.post(f"/v1/tokens/{doomed['id']}/revoke")
            assert revoked.status_code == 200 and revoked.json()["revoked_at"]
            assert agent.get("/v1/stats").status_code == 401
    with bounded_service.client("acme-admin") as other:
        # Another organisation's token is not there to revoke.
        assert other.post(f"/v1/tokens/{doomed['id']}/revoke").status_code == 404
        assert {t["org"] for t in other.get("/v1/tokens").json()} == {"acme"}


def _refused_within(client: httpx.Client, deadline_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if client.get("/v1/stats").status_code == 401:
            return time.monotonic() - started
    raise AssertionError(f"the revoked token was still accepted after {deadline_s} s")


def test_a_token_revoked_from_the_cli_is_refused_by_every_replica(
    bounded_service: BoundedService,
) -> None:
    """Two service processes cache the token; the CLI revokes it; both refuse it at once."""
    url = bounded_service.database_url
    tokens = issue_tokens(url)
    with running_service(url, env=TIGHT_LIMITS) as second:
        clients = [
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens['limited']}"})
            for base in (bounded_service.base_url, second.base_url)
        ]
        for client in clients:
            assert client.get("/v1/stats").status_code == 200
            assert client.get("/v1/stats").status_code == 200  # from the cache
        listed = CliRunner().invoke(app, ["token", "list", "--org", "acme", "--database-url", url])
        assert listed.exit_code == 0, listed.output
        engine_rows = _token_ids(url, tokens["limited"])
        revoked = CliRunner().invoke(
            app, ["token", "revoke", str(engine_rows), "--database-url", url]
        )
        assert revoked.exit_code == 0, revoked.output
        # NOTIFY reaches each replica as the revocation commits: milliseconds, bounded here.
        for client in clients:
            assert _refused_within(client, deadline_s=1.0) < 1.0
            client.close()


def _token_ids(url: str, token: str) -> int:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from services.profiler_api.auth.service import hash_token
    from services.profiler_api.db import make_engine
    from services.profiler_api.orm import Token
    from services.profiler_api.settings import Settings

    engine = make_engine(url, Settings(db_pool_size=1))
    try:
        with Session(engine) as session:
            return session.execute(
                select(Token.id).where(Token.token_hash == hash_token(token))
            ).scalar_one()
    finally:
        engine.dispose()


def test_requests_per_token_are_rate_limited(bounded_service: BoundedService) -> None:
    env = {**TIGHT_LIMITS, "TPS_RATE_LIMIT_PER_S": "2", "TPS_RATE_LIMIT_BURST": "5"}
    with running_service(bounded_service.database_url, env=env) as limited:
        headers = {"Authorization": f"Bearer {bounded_service.tokens['globex-agent']}"}
        with httpx.Client(base_url=limited.base_url, headers=headers) as client:
            statuses = [client.get("/v1/stats") for _ in range(8)]
            codes = [r.status_code for r in statuses]
            assert codes[:5] == [200] * 5 and 429 in codes[5:]
            refused = next(r for r in statuses if r.status_code == 429)
            assert int(refused.headers["retry-after"]) >= 1
            assert "rate limit" in refused.json()["detail"]
        # Another token has a bucket of its own.
        other = {"Authorization": f"Bearer {bounded_service.tokens['acme-agent']}"}
        with httpx.Client(base_url=limited.base_url, headers=other) as client:
            assert client.get("/v1/stats").status_code == 200


@pytest.mark.parametrize("token", ["", "tps_" + "x" * 5000])
def test_missing_or_oversized_tokens_are_401(bounded_service: BoundedService, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=bounded_service.base_url, headers=headers) as client:
        response = client.get("/v1/stats")
    assert response.status_code == 401
