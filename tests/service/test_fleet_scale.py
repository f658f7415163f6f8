"""Growing past one machine: replicas sharing a database, a read replica, retention, counters."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import libpq_url, make_engine, scratch_database
from services.profiler_api.fleet.retention import maintain_partitions, utc_today
from services.profiler_api.settings import Settings
from tests.factories import batch_body, cublaslt, hardware_spec, probe_run, unique_problem
from tools.local_service import running_service
from tps.candidate import VENDOR_DEFAULT


def _token(url: str, role: Role = Role.AGENT) -> str:
    engine = make_engine(url, Settings(db_pool_size=1))
    with Session(engine) as session, session.begin():
        token = create_token(session, org="scale", role=role)
    engine.dispose()
    return token


def _client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
    )


def _poll(
    read: Callable[[], Any], until: Callable[[Any], bool], *, deadline_s: float = 15.0
) -> Any:
    """Return read()'s value once `until` holds, or fail with the last value at the deadline."""
    stop = time.monotonic() + deadline_s
    while True:
        value = read()
        if until(value) or time.monotonic() > stop:
            return value
        time.sleep(0.05)


def test_two_replicas_share_one_database_and_forget_changed_answers(
    migrated_database_url: str,
) -> None:
    token = _token(migrated_database_url)
    hardware, problem = hardware_spec(), unique_problem()
    fast, slow = cublaslt(11), cublaslt(12)
    query = {"hardware_id": hardware.fingerprint(), "problem": problem.key_hash()}
    # Answers are kept for ten minutes: only the change notice can make a replica forget one.
    env = {"TPS_PRIORS_CACHE_S": "600", "TPS_TRAINING_WORKER": "false"}
    with (
        running_service(migrated_database_url, env=env) as a,
        running_service(migrated_database_url, env=env) as b,
        _client(a.base_url, token) as writer,
        _client(b.base_url, token) as reader,
    ):
        first = probe_run(
            hardware=hardware, problem=problem, latencies=[(fast, 50.0), (slow, 80.0)]
        )
        assert writer.post("/v1/probe-runs", content=batch_body([first])).status_code == 200

        def top() -> list[str]:
            response = reader.get("/v1/priors", params=query)
            assert response.status_code == 200, response.text
            return [c["candidate_id"] for c in response.json()["candidates"]]

        assert top() == [fast.id, slow.id]
        # B answers from its cache now: a change written behind the service's back (no
        # notice) does not show, for as long as the answer is kept.
        with psycopg.connect(libpq_url(migrated_database_url)) as conn:
            conn.execute(
                "UPDATE candidate_stats SET sum_log_median = 0 "
                "WHERE hardware_id = %s AND problem_id = %s AND candidate_id = %s",
                (hardware.fingerprint(), problem.key_hash(), slow.id),
            )
        assert top() == [fast.id, slow.id]
        # Through A, `slow` becomes by far the faster: B must drop its answer.
        second = probe_run(
            hardware=hardware, problem=problem, latencies=[(fast, 900.0), (slow, 1.0)]
        )
        assert writer.post("/v1/probe-runs", content=batch_body([second])).status_code == 200
        assert _poll(top, lambda ids: ids == [slow.id, fast.id]) == [slow.id, fast.id]
        # Each replica counts what the other stored.
        stats = reader.get("/v1/stats").json()
        assert stats["org_runs"] == 2 and stats["runs"] >= 2


@contextmanager
def _replica_with(run: Any, postgres_server_url: str) -> Iterator[str]:
    """Yield the URL of another database holding `run`, read-only for whoever connects."""
    from cli.model import ingest_into_database

    with scratch_database(postgres_server_url, prefix="tps_replica") as replica:
        migrate.upgrade(replica)
        ingest_into_database([run], database_url=replica, org="replica")
        url = make_url(replica).update_query_dict({"options": "-cdefault_transaction_read_only=on"})
        yield url.render_as_string(hide_password=False)


def test_priors_come_from_the_read_database_and_writes_from_the_primary(
    migrated_database_url: str, postgres_server_url: str
) -> None:
    token = _token(migrated_database_url)
    on_replica = probe_run(latencies=[(VENDOR_DEFAULT, 70.0), (cublaslt(21), 20.0)])
    with _replica_with(on_replica, postgres_server_url) as read_url:
        with psycopg.connect(libpq_url(read_url)) as conn:
            assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        env = {"TPS_READ_DATABASE_URL": read_url, "TPS_TRAINING_WORKER": "false"}
        with (
            running_service(migrated_database_url, env=env) as service,
            _client(service.base_url, token) as client,
        ):
            # The primary never saw this run: the answer can only come from the replica,
            # through connections that cannot write.
            body = {
                "hardware": on_replica.hardware.model_dump(mode="json"),
                "problem": on_replica.problem.model_dump(mode="json"),
            }
            prior = client.post("/v1/priors", json=body).json()
            assert prior["source"] == "observed"
            assert prior["candidates"][0]["candidate_id"] == cublaslt(21).id
            # Ingest still writes to the primary.
            on_primary = probe_run()
            assert (
                client.post("/v1/probe-runs", content=batch_body([on_primary])).status_code == 200
            )
    with psycopg.connect(libpq_url(migrated_database_url)) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM probe_runs WHERE run_id = ANY(%s)",
            ([on_primary.run_id, on_replica.run_id],),
        ).fetchone()
    assert stored == (1,)


@pytest.fixture
def scratch_url(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, prefix="tps_retention") as url:
        migrate.upgrade(url)
        yield url


def test_retention_drops_old_days_of_measurements_and_keeps_the_aggregates(
    scratch_url: str,
) -> None:
    from cli.model import ingest_into_database
    from services.profiler_api.fleet.repository import fleet_stats

    old, recent = probe_run(), probe_run()
    ingest_into_database([old, recent], database_url=scratch_url, org="acme")
    today = utc_today()
    engine = make_engine(scratch_url, Settings(db_pool_size=1))
    try:
        with Session(engine) as session, session.begin():
            # Forty days ago for `old`: its run and measurements move to that day's partition.
            session.execute(
                text("SELECT tps_measurement_partitions(:first, :last)"),
                {"first": today - timedelta(days=41), "last": today - timedelta(days=39)},
            )
            for table in ("probe_runs", "measurements"):
                session.execute(
                    text(
                        f"UPDATE {table} SET received_at = received_at - interval '40 days' "
                        "WHERE run_id = :run_id"
                    ),
                    {"run_id": old.run_id},
                )
            stats_before = session.execute(
                text("SELECT * FROM candidate_stats ORDER BY 1, 2, 3")
            ).all()
            counted = fleet_stats(session, org_id=0)
        with Session(engine) as session, session.begin():
            done = maintain_partitions(session, today=today, retention_days=30)
        assert done.dropped_rows == len(old.measurements)
        with Session(engine) as session:
            partitions = (
                session.execute(
                    text(
                        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                        "WHERE i.inhparent = 'measurements'::regclass"
                    )
                )
                .scalars()
                .all()
            )
            assert f"measurements_p{today - timedelta(days=40):%Y%m%d}" not in partitions
            assert f"measurements_p{today:%Y%m%d}" in partitions
            assert f"measurements_p{today + timedelta(days=7):%Y%m%d}" in partitions
            remaining = (
                session.execute(text("SELECT run_id FROM measurements GROUP BY run_id"))
                .scalars()
                .all()
            )
            assert remaining == [recent.run_id]
            # The aggregates priors read are whole; the runs stay as the idempotency ledger.
            stats_after = session.execute(
                text("SELECT * FROM candidate_stats ORDER BY 1, 2, 3")
            ).all()
            assert stats_after == stats_before
            assert session.execute(text("SELECT count(*) FROM probe_runs")).scalar() == 2
            after = fleet_stats(session, org_id=0)
        assert after.measurements == counted.measurements - len(old.measurements)
        assert after.runs == counted.runs == 2
        # A second round has nothing left to drop.
        with Session(engine) as session, session.begin():
            assert maintain_partitions(session, today=today, retention_days=30).dropped_rows == 0
    finally:
        engine.dispose()


def test_a_run_whose_measurements_retention_dropped_reads_back_as_gone(
    scratch_url: str,
) -> None:
    token = _token(scratch_url)
    run = probe_run()
    with (
        running_service(scratch_url, env={"TPS_TRAINING_WORKER": "false"}) as service,
        _client(service.base_url, token) as client,
    ):
        assert client.post("/v1/probe-runs", content=batch_body([run])).status_code == 200
        assert client.get(f"/v1/probe-runs/{run.run_id}").status_code == 200
        with psycopg.connect(libpq_url(scratch_url)) as conn:
            conn.execute("DELETE FROM measurements WHERE run_id = %s", (run.run_id,))
        response = client.get(f"/v1/probe-runs/{run.run_id}")
    assert response.status_code == 410
    assert "retention" in response.json()["detail"]


def test_stats_count_what_ingest_stored(live_service: Any) -> None:
    runs = [probe_run(), probe_run()]
    with live_service.client() as client:
        before = client.get("/v1/stats").json()
        assert client.post("/v1/probe-runs", content=batch_body(runs)).status_code == 200
        again = client.post("/v1/probe-runs", content=batch_body(runs)).json()  # duplicates
        after = client.get("/v1/stats").json()
    assert again["accepted"] == 0
    assert after["runs"] - before["runs"] == 2
    assert after["org_runs"] - before["org_runs"] == 2
    assert after["measurements"] - before["measurements"] == sum(len(r.measurements) for r in runs)
    with psycopg.connect(libpq_url(live_service.database_url)) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM probe_runs), (SELECT count(*) FROM measurements)"
        ).fetchone()
    assert row == (after["runs"], after["measurements"])


def test_a_burst_of_priors_does_not_exhaust_the_connection_pool(
    migrated_database_url: str,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    token = _token(migrated_database_url)
    runs = [probe_run() for _ in range(30)]
    # Two connections per pool, none more: each request holds one for its token while it
    # reads priors; were the priors read from the same pool, the burst would wait forever.
    env = {"TPS_DB_POOL_SIZE": "2", "TPS_DB_MAX_OVERFLOW": "0", "TPS_TRAINING_WORKER": "false"}
    with running_service(migrated_database_url, env=env) as service:
        with _client(service.base_url, token) as client:
            assert client.post("/v1/probe-runs", content=batch_body(runs)).status_code == 200

        def ask(run: Any) -> int:
            with _client(service.base_url, token) as client:
                params = {
                    "hardware_id": run.hardware.fingerprint(),
                    "problem": run.problem.key_hash(),
                }
                return client.get("/v1/priors", params=params, timeout=20.0).status_code

        with ThreadPoolExecutor(max_workers=30) as pool:
            statuses = list(pool.map(ask, runs))
    assert statuses == [200] * len(runs)


def test_an_answer_is_kept_longer_when_priors_are_read_from_the_primary() -> None:
    primary = Settings(database_url="postgresql+psycopg://db/tps")
    assert primary.priors_cache_ttl_s() == 60.0
    replica = Settings(
        database_url="postgresql+psycopg://db/tps", read_database_url="postgresql+psycopg://r/tps"
    )
    assert replica.priors_cache_ttl_s() == 5.0  # bounds what a lagging replica leaves behind
    assert Settings(priors_cache_s=0).priors_cache_ttl_s() == 0.0
    assert (
        Settings(
            read_database_url="postgresql+psycopg://r/tps", priors_cache_s=30
        ).priors_cache_ttl_s()
        == 30.0
    )


def test_an_ingest_process_runs_at_its_niceness_and_stores_what_it_is_sent(
    migrated_database_url: str,
) -> None:
    token = _token(migrated_database_url)
    hardware, problem = hardware_spec(), unique_problem()
    fast = cublaslt(11)
    query = {"hardware_id": hardware.fingerprint(), "problem": problem.key_hash()}
    ingest_env = {"TPS_CPU_NICE": "7", "TPS_TRAINING_WORKER": "false"}
    with (
        running_service(migrated_database_url, env=ingest_env) as ingest,
        running_service(migrated_database_url, env={"TPS_TRAINING_WORKER": "false"}) as priors,
        _client(ingest.base_url, token) as writer,
        _client(priors.base_url, token) as reader,
    ):
        assert os.getpriority(os.PRIO_PROCESS, ingest.pid) == 7
        assert os.getpriority(os.PRIO_PROCESS, priors.pid) == os.getpriority(os.PRIO_PROCESS, 0)
        run = probe_run(hardware=hardware, problem=problem, latencies=[(fast, 50.0)])
        assert writer.post("/v1/probe-runs", content=batch_body([run])).status_code == 200
        response = reader.get("/v1/priors", params=query)
        assert response.status_code == 200, response.text
        assert [c["candidate_id"] for c in response.json()["candidates"]] == [fast.id]
