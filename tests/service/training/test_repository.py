"""The training queue under concurrency: two workers never claim the same job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.repository import upsert_organisation
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.settings import Settings
from services.profiler_api.training import repository


@pytest.fixture
def queue_engine(postgres_server_url: str) -> Iterator[Engine]:
    """An engine on a database of its own: no live service's worker drains this queue."""
    with scratch_database(postgres_server_url, prefix="tps_queue") as url:
        migrate.upgrade(url)
        engine = make_engine(url, Settings(db_pool_size=3))
        yield engine
        engine.dispose()


def test_concurrent_claims_skip_locked_jobs(queue_engine: Engine) -> None:
    with Session(queue_engine) as session, session.begin():
        org = upsert_organisation(session, "queue")
        jobs = [repository.create_job(session, org_id=org, params={}).id for _ in range(2)]
    with (
        Session(queue_engine) as first,
        Session(queue_engine) as second,
        Session(queue_engine) as third,
    ):
        # Both claims are open transactions at once: the second must not wait, nor repeat.
        a = repository.claim_next_job(first, worker="a", stale_s=3600)
        b = repository.claim_next_job(second, worker="b", stale_s=3600)
        assert a is not None and b is not None
        a_id, b_id = a.id, b.id
        assert {a_id, b_id} == set(jobs)
        assert repository.claim_next_job(third, worker="c", stale_s=3600) is None
        first.commit()
        second.rollback()  # a worker that died before committing its claim
        third.rollback()
    with Session(queue_engine) as session, session.begin():
        again = repository.claim_next_job(session, worker="d", stale_s=3600)
        assert again is not None and again.id == b_id
        assert repository.get_job(session, a_id).state == "running"  # type: ignore[union-attr]


def test_a_job_whose_worker_died_is_claimed_again(queue_engine: Engine) -> None:
    with Session(queue_engine) as session, session.begin():
        org = upsert_organisation(session, "queue")
        job = repository.create_job(session, org_id=org, params={}).id
        assert repository.claim_next_job(session, worker="dead", stale_s=3600) is not None
    with Session(queue_engine) as session, session.begin():
        assert repository.claim_next_job(session, worker="live", stale_s=3600) is None
    with Session(queue_engine) as session, session.begin():
        # With a zero staleness limit, a running job counts as abandoned at once.
        claimed = repository.claim_next_job(session, worker="live", stale_s=0.0)
        assert claimed is not None and claimed.id == job and claimed.worker == "live"


def test_a_cancelled_job_is_never_claimed(queue_engine: Engine) -> None:
    with Session(queue_engine) as session, session.begin():
        org = upsert_organisation(session, "queue")
        first = repository.create_job(session, org_id=org, params={}).id
    with Session(queue_engine) as session, session.begin():  # a later now(): a newer job
        second = repository.create_job(session, org_id=org, params={}).id
    with Session(queue_engine) as session, session.begin():
        cancelled = repository.cancel_job(session, first)
        assert cancelled is not None and cancelled.state == "cancelled"
        assert cancelled.finished_at is not None
        assert repository.cancel_job(session, first) is None  # no longer queued
    with Session(queue_engine) as session, session.begin():
        claimed = repository.claim_next_job(session, worker="w", stale_s=3600)
        assert claimed is not None and claimed.id == second
        assert repository.cancel_job(session, second) is None  # running: too late
        assert [j.id for j in repository.list_jobs(session)] == [second, first]
        assert [j.id for j in repository.list_jobs(session, state="cancelled")] == [first]
