"""Engines, sessions, and the embedded Postgres used when no database is configured."""

from __future__ import annotations

import json
import logging
import secrets
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from services.profiler_api.settings import Settings
from tps.errors import TPSError

log = logging.getLogger(__name__)


def sqlalchemy_url(url: str) -> str:
    """Return `url` with the psycopg 3 driver, whatever driver it named."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """Return `url` as libpq (and so psycopg.connect) understands it."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def start_embedded(data_dir: Path) -> str:
    """Start (or reuse) the embedded Postgres in `data_dir` and return its URL.

    The server stops when the last process that started it exits; the data stays.
    """
    try:
        with warnings.catch_warnings():
            # Without XDG_RUNTIME_DIR, platformdirs warns: pgserver's lock goes to /tmp/runtime-UID.
            warnings.simplefilter("ignore")
            import pgserver  # imported here: only the embedded mode needs the wheel
            from pgserver.postgres_server import PostgresServer
    except ImportError as exc:  # the service image has no embedded Postgres
        raise TPSError(
            "TPS_DATABASE_URL is unset and the embedded Postgres is not installed: "
            "set TPS_DATABASE_URL, or pip install 'tps[local]'"
        ) from exc

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with PostgresServer._lock:  # pgserver's own lock over its handle file
        forget_dead_handles(data_dir)
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    url = sqlalchemy_url(server.get_uri())
    log.debug("embedded Postgres at %s (data in %s)", url, data_dir)
    return url


def forget_dead_handles(data_dir: Path) -> list[int]:
    """Drop the pids of processes that died holding the embedded server; return the dropped.

    pgserver stops the server when its last holder exits, and counts holders in a pid file. A
    holder that was killed never takes its pid out, and the server would then run forever.
    """
    import psutil

    handles = data_dir / ".handle_pids.json"
    if not handles.is_file():
        return []
    pids: list[int] = json.loads(handles.read_text() or "[]")
    dead = [pid for pid in pids if not psutil.pid_exists(pid)]
    if dead:
        handles.write_text(json.dumps([pid for pid in pids if pid not in dead]))
        log.info("embedded Postgres: forgot holders %s that exited without letting go", dead)
    return dead


def resolve_database_url(settings: Settings) -> str:
    """Return the configured database URL, starting the embedded server when there is none."""
    if settings.database_url:
        return sqlalchemy_url(settings.database_url)
    return start_embedded(settings.data_dir)


def make_engine(url: str, settings: Settings) -> Engine:
    """Create the engine of one replica."""
    return create_engine(
        sqlalchemy_url(url),
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
        pool_pre_ping=True,
    )


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Return the session factory the request boundary opens sessions from."""
    return sessionmaker(engine, expire_on_commit=False)


def recreate_database(url: str, name: str) -> str:
    """Drop database `name` on `url`'s server if it exists, create it empty, and return its URL.

    `url`'s own database is never the one dropped.
    """
    parsed = make_url(sqlalchemy_url(url))
    if parsed.database == name:
        raise ValueError(f"refusing to drop {name!r}: it is the configured database itself")
    database = sql.Identifier(name)
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(database))
    return parsed.set(database=name).render_as_string(hide_password=False)


@contextmanager
def scratch_database(url: str, *, prefix: str = "tps_scratch") -> Iterator[str]:
    """Create a fresh, empty database next to `url`'s, yield its URL, and drop it."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = libpq_url(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(sqlalchemy_url(url)).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
