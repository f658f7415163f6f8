"""Services with tight limits, each on a scratch database of its own."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.settings import Settings
from tools.local_service import RunningService, running_service

# Small enough that a test reaches each limit in a few requests or seconds.
TIGHT_LIMITS = {
    "TPS_TRAINING_WORKER": "false",
    "TPS_DB_POOL_SIZE": "2",
    "TPS_DB_MAX_OVERFLOW": "0",
    "TPS_DB_POOL_TIMEOUT_S": "1",
    "TPS_BODY_TIMEOUT_S": "2",
    "TPS_MAX_BODY_BYTES": str(4 * 1024 * 1024),
    "TPS_MAX_HEADER_BYTES": "16384",
    "TPS_MAX_QUEUED_JOBS_PER_ORG": "2",
}


@dataclass(frozen=True)
class BoundedService:
    service: RunningService
    database_url: str
    tokens: dict[str, str]  # "acme-agent", "acme-admin", "globex-agent", ...

    @property
    def base_url(self) -> str:
        return self.service.base_url

    def client(self, who: str, **kwargs: object) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0, **kwargs)  # type: ignore[arg-type]


def issue_tokens(url: str) -> dict[str, str]:
    engine = make_engine(url, Settings(db_pool_size=1))
    with Session(engine) as session, session.begin():
        tokens = {
            f"{org}-{role.value}": create_token(session, org=org, role=role)
            for org in ("acme", "globex")
            for role in (Role.AGENT, Role.ADMIN)
        }
        tokens["operator"] = create_token(session, org="operators", role=Role.OPERATOR)
        tokens["limited"] = create_token(session, org="acme", role=Role.AGENT)
    engine.dispose()
    return tokens


@pytest.fixture(scope="module")
def bounded_service(postgres_server_url: str) -> Iterator[BoundedService]:
    """A service with TIGHT_LIMITS and tokens of two organisations and an operator."""
    with scratch_database(postgres_server_url, prefix="tps_bounded") as url:
        migrate.upgrade(url)
        tokens = issue_tokens(url)
        with running_service(url, env=TIGHT_LIMITS) as service:
            yield BoundedService(service=service, database_url=url, tokens=tokens)
