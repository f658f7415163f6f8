"""Engines, sessions, and the embedded Postgres used when no database is configured."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from services.profiler_api.settings import Settings

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
    import pgserver  # imported here: only the embedded mode needs the wheel

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    url = sqlalchemy_url(server.get_uri())
    log.info("embedded Postgres at %s (data in %s)", url, data_dir)
    return url


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
