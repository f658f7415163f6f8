"""Fixtures shared by the whole suite: a real Postgres, a migrated schema, a live service.

- `database_url`: a fresh, empty database for this test session, on the server named by
  TPS_TEST_DATABASE_URL or, when unset, on an embedded pgserver; dropped at the end.
- `migrated_database_url`: the same database at the head revision.
- `db_session`: a Session inside a transaction that is rolled back after the test.
- `live_service`: a real uvicorn server on a free port, with agent and admin tokens.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

# Every service the suite starts answers model questions on a worker thread, on any host:
# `auto` would start answering processes where the CPUs are many (tests/service/priors/
# test_answering.py starts them on purpose).
os.environ.setdefault("TPS_MODEL_ANSWER_PROCESSES", "0")

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """Return the URL of a Postgres server the tests may create databases on."""
    url = os.environ.get("TPS_TEST_DATABASE_URL")
    if url:
        yield url
        return
    import pgserver

    from services.profiler_api.db import sqlalchemy_url

    root = Path(tempfile.mkdtemp(prefix="tps-test-pg-"))
    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    try:
        yield sqlalchemy_url(server.get_uri())
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def database_url(postgres_server_url: str) -> Iterator[str]:
    """Return the URL of a fresh database of this test session (no schema yet)."""
    from services.profiler_api.db import scratch_database

    with scratch_database(postgres_server_url, prefix="tps_test") as url:
        yield url


@pytest.fixture(scope="session")
def migrated_database_url(database_url: str) -> str:
    """Return `database_url` upgraded to the head revision."""
    from services.profiler_api import migrate

    migrate.upgrade(database_url)
    return database_url


@pytest.fixture(scope="session")
def engine(migrated_database_url: str) -> Iterator[Engine]:
    from services.profiler_api.db import make_engine
    from services.profiler_api.settings import Settings

    engine = make_engine(migrated_database_url, Settings(db_pool_size=2))
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(engine: Engine) -> Iterator[Session]:
    """Yield a Session whose work is rolled back after the test, commits included."""
    from sqlalchemy.orm import Session

    with engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


@dataclass(frozen=True)
class LiveService:
    """A running service and tokens of two organisations."""

    base_url: str
    database_url: str
    agent_token: str
    admin_token: str
    other_agent_token: str  # an agent of another organisation
    other_admin_token: str  # an admin of the other organisation
    operator_token: str  # fleet-wide, of an organisation of its own
    org: str = "acme"
    other_org: str = "globex"

    def client(self, token: str | None = None, **kwargs: object) -> httpx.Client:
        """Return an HTTP client of the service that sends `token` (default: the agent's)."""
        token = self.agent_token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def live_service(migrated_database_url: str) -> Iterator[LiveService]:
    """Run the service on the session's database; yield its URL and tokens."""
    from sqlalchemy.orm import Session

    from services.profiler_api.auth.service import Role, create_token
    from services.profiler_api.db import make_engine
    from services.profiler_api.settings import Settings
    from tools.local_service import running_service

    engine = make_engine(migrated_database_url, Settings(db_pool_size=1))
    with Session(engine) as session, session.begin():
        tokens = {
            "agent_token": create_token(session, org="acme", role=Role.AGENT),
            "admin_token": create_token(session, org="acme", role=Role.ADMIN),
            "other_agent_token": create_token(session, org="globex", role=Role.AGENT),
            "other_admin_token": create_token(session, org="globex", role=Role.ADMIN),
            "operator_token": create_token(session, org="tps-operators", role=Role.OPERATOR),
        }
    engine.dispose()
    with running_service(migrated_database_url) as service:
        yield LiveService(base_url=service.base_url, database_url=migrated_database_url, **tokens)
