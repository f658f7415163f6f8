"""Run the service in a uvicorn subprocess on a free localhost port (demo, bench, tests)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from client import ClientError, ServiceClient
from services.profiler_api import migrate
from services.profiler_api.auth.repository import upsert_organisation
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.metrics import MULTIPROC_ENV, multiprocess_env
from services.profiler_api.server import PROTOCOL
from services.profiler_api.settings import Settings
from tps.errors import TPSError

APP_FACTORY = "services.profiler_api.app:create_app"
# Clients that log every request, migration step or server start at INFO.
CHATTY_LOGGERS = ("httpx", "alembic", "pgserver")


def quiet_client_logs() -> None:
    """Keep the clients' INFO lines out of the output of a demo or benchmark run."""
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class ServiceStartError(TPSError):
    """The service process exited or did not become ready in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RunningService:
    base_url: str
    pid: int
    log_path: Path

    def log(self) -> str:
        """Return what the service wrote so far."""
        return self.log_path.read_text(errors="replace")


def _wait_ready(
    process: subprocess.Popen[bytes], base_url: str, log_path: Path, deadline: float
) -> None:
    with ServiceClient.connect(base_url, timeout_s=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServiceStartError(
                    f"service exited with {process.returncode}:\n{log_path.read_text()[-4000:]}"
                )
            try:
                client.ready()
                return
            except ClientError:
                pass
            time.sleep(0.05)
    raise ServiceStartError(f"service not ready in time:\n{log_path.read_text()[-4000:]}")


@contextmanager
def running_service(
    database_url: str,
    *,
    workers: int = 1,
    port: int | None = None,
    env: dict[str, str] | None = None,
    startup_timeout_s: float = 60.0,
) -> Iterator[RunningService]:
    """Start the service against an already migrated database; stop it on exit.

    The service's log lives in a temporary file until then (`RunningService.log()`).
    """
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "uvicorn", "--factory", APP_FACTORY,
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--log-level", "warning", "--no-access-log", "--http", PROTOCOL,
    ]  # fmt: skip
    metrics_env = multiprocess_env(workers) if MULTIPROC_ENV not in (env or {}) else {}
    own_metrics_dir = metrics_env.get(MULTIPROC_ENV) if MULTIPROC_ENV not in os.environ else None
    child_env = {**os.environ, **metrics_env, **(env or {}), "TPS_DATABASE_URL": database_url}
    with tempfile.NamedTemporaryFile(prefix="tps-service-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            env=child_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(process, base_url, log_path, time.monotonic() + startup_timeout_s)
        yield RunningService(base_url=base_url, pid=process.pid, log_path=log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if own_metrics_dir:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
        log_path.unlink(missing_ok=True)  # its tail is in any ServiceStartError


@contextmanager
def migrated_scratch_database(server_url: str, *, prefix: str) -> Iterator[str]:
    """Yield a fresh database next to `server_url`'s at the newest schema; drop it afterwards."""
    with scratch_database(server_url, prefix=prefix) as url:
        migrate.upgrade(url)
        yield url


@dataclass(frozen=True)
class OrgTokens:
    """An organisation's id and a token per role asked for."""

    org_id: int
    tokens: dict[Role, str]


def issue_tokens(url: str, *, org: str, roles: Sequence[Role] = (Role.AGENT,)) -> OrgTokens:
    """Create `org` in the database at `url` and a token of each of `roles` for it."""
    engine = make_engine(url, Settings(db_pool_size=1))
    try:
        with Session(engine) as session, session.begin():
            tokens = {role: create_token(session, org=org, role=role) for role in roles}
            org_id = upsert_organisation(session, org)
    finally:
        engine.dispose()
    return OrgTokens(org_id=org_id, tokens=tokens)
