"""Listing and cancelling training jobs over HTTP, on a service that runs no worker."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.settings import Settings
from tools.local_service import running_service


@pytest.fixture(scope="module")
def idle_service(postgres_server_url: str) -> Iterator[tuple[str, str, str]]:
    """(base URL, admin token, agent token) of a service whose jobs stay queued."""
    with scratch_database(postgres_server_url, prefix="tps_jobs") as url:
        migrate.upgrade(url)
        engine = make_engine(url, Settings(db_pool_size=1))
        with Session(engine) as session, session.begin():
            admin = create_token(session, org="ops", role=Role.ADMIN)
            agent = create_token(session, org="ops", role=Role.AGENT)
        engine.dispose()
        with running_service(url, env={"TPS_TRAINING_WORKER": "false"}) as service:
            yield service.base_url, admin, agent


def _client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"})


def test_jobs_are_listed_newest_first_and_a_queued_one_cancels(
    idle_service: tuple[str, str, str],
) -> None:
    base_url, admin_token, _ = idle_service
    with _client(base_url, admin_token) as admin:
        first = admin.post("/v1/admin/retrain", json={}).json()["job_id"]
        second = admin.post("/v1/admin/retrain", json={"n_estimators": 5}).json()["job_id"]
        listed = admin.get("/v1/admin/jobs").json()
        assert [j["id"] for j in listed][:2] == [second, first]

        cancelled = admin.post(f"/v1/admin/jobs/{first}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled" and cancelled.json()["finished_at"]
        assert admin.get(f"/v1/admin/jobs/{first}").json()["state"] == "cancelled"

        again = admin.post(f"/v1/admin/jobs/{first}/cancel")
        assert again.status_code == 409 and "only a queued job" in again.json()["detail"]
        only = admin.get("/v1/admin/jobs", params={"state": "cancelled"}).json()
        assert [j["id"] for j in only] == [first]
        assert [j["id"] for j in admin.get("/v1/admin/jobs", params={"limit": 1}).json()] == [
            second
        ]


def test_bad_job_requests_are_a_clear_4xx(idle_service: tuple[str, str, str]) -> None:
    base_url, admin_token, agent_token = idle_service
    with _client(base_url, admin_token) as admin:
        assert admin.get("/v1/admin/jobs", params={"state": "done"}).status_code == 422
        assert admin.get("/v1/admin/jobs", params={"limit": 0}).status_code == 422
        missing = admin.post("/v1/admin/jobs/00000000-0000-0000-0000-000000000000/cancel")
        assert missing.status_code == 404 and "no training job" in missing.json()["detail"]
        assert admin.post("/v1/admin/jobs/not-a-uuid/cancel").status_code == 422
    with _client(base_url, agent_token) as agent:
        assert agent.get("/v1/admin/jobs").status_code == 403
        job = "00000000-0000-0000-0000-000000000000"
        assert agent.post(f"/v1/admin/jobs/{job}/cancel").status_code == 403
