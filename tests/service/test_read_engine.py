"""The engine priors read through: one round trip a read, and a dropped connection read again."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.db import (
    libpq_url,
    make_engine,
    make_session_factory,
    read_with_retry,
    scratch_database,
)
from services.profiler_api.settings import Settings
from tests.factories import batch_body, probe_run
from tests.service.conftest import issue_tokens
from tools.local_service import running_service
from tps.schemas import ProbeRun

# True where the statement began its own transaction; after a BEGIN and another statement,
# the transaction's clock (now()) is behind the statement's.
OWN_TRANSACTION = text("SELECT now() = statement_timestamp()")


@pytest.fixture
def read_engine(migrated_database_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_database_url, Settings(db_pool_size=1), reads=True)
    yield engine
    engine.dispose()


def _cut(url: str, pid: int) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def _pid(session: Session) -> int:
    return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_read_runs_each_statement_in_a_transaction_of_its_own(
    read_engine: Engine, engine: Engine
) -> None:
    def second_statement(session: Session) -> bool:
        session.execute(text("SELECT pg_sleep(0.01)"))
        return bool(session.execute(OWN_TRANSACTION).scalar_one())

    assert read_with_retry(make_session_factory(read_engine), second_statement) is True
    # the primary's sessions stay transactions: the same two statements share one
    with make_session_factory(engine)() as session:
        assert second_statement(session) is False


def test_a_read_whose_connection_dropped_is_read_again_on_a_new_one(
    read_engine: Engine, migrated_database_url: str
) -> None:
    sessions = make_session_factory(read_engine)
    first = read_with_retry(sessions, _pid)
    _cut(migrated_database_url, first)
    again = read_with_retry(sessions, _pid)
    assert again != first
    # Nothing pings a connection before a read: without the retry, the read fails.
    _cut(migrated_database_url, again)
    with pytest.raises(OperationalError) as raised, sessions() as session:
        _pid(session)
    assert raised.value.connection_invalidated


def test_a_socket_closed_before_libpq_knew_is_a_dropped_connection(read_engine: Engine) -> None:
    """A backend terminated while the statement waited on its socket: psycopg says
    "connection socket closed" while libpq still reports the connection good."""
    sessions = make_session_factory(read_engine)
    first = read_with_retry(sessions, _pid)
    lost = []

    def socket_closed(cursor: object, statement: str, *_: object) -> None:
        if not lost:
            lost.append(statement)
            raise psycopg.OperationalError("connection socket closed")

    event.listen(read_engine, "before_cursor_execute", socket_closed)
    try:
        with pytest.raises(OperationalError) as raised, sessions() as session:
            _pid(session)
        assert raised.value.connection_invalidated
        lost.clear()
        again = read_with_retry(sessions, _pid)  # the read is asked again, on a new connection
    finally:
        event.remove(read_engine, "before_cursor_execute", socket_closed)
    assert lost and again != first
    # an operational error that the server answered on a good connection keeps it
    with pytest.raises(OperationalError) as raised, sessions() as session:
        session.execute(text("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '53300'; END $$"))
    assert not raised.value.connection_invalidated
    assert read_with_retry(sessions, _pid) == again


def test_a_read_that_fails_otherwise_is_not_read_again(read_engine: Engine) -> None:
    calls = []

    def broken(session: Session) -> None:
        calls.append(1)
        session.execute(text("SELECT no_such_column FROM hardware"))

    with pytest.raises(Exception, match="no_such_column"):
        read_with_retry(make_session_factory(read_engine), broken)
    assert len(calls) == 1


def test_priors_answer_after_every_database_connection_was_cut(postgres_server_url: str) -> None:
    runs = [probe_run(), probe_run()]
    with scratch_database(postgres_server_url, prefix="tps_cut") as url:
        migrate.upgrade(url)
        token = issue_tokens(url)["acme-agent"]
        with (
            running_service(url, env={"TPS_TRAINING_WORKER": "false"}) as service,
            httpx.Client(
                base_url=service.base_url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=30.0,
            ) as client,
        ):
            assert client.post("/v1/probe-runs", content=batch_body(runs)).status_code == 200

            def ask(run: ProbeRun) -> httpx.Response:
                return client.get(
                    "/v1/priors",
                    params={
                        "hardware_id": run.hardware.fingerprint(),
                        "problem": run.problem.key_hash(),
                    },
                )

            assert ask(runs[0]).json()["source"] == "observed"  # the read pool has a connection
            with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                cut = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert cut is not None and cut[0] >= 1
            answer = ask(runs[1])  # a question not cached: a read on a dropped connection
            assert answer.status_code == 200, answer.text
            assert answer.json()["source"] == "observed"
            assert "reading again on a new one" in service.log()
