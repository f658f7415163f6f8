"""Engines, sessions and scratch databases on the configured Postgres."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg
from psycopg import sql
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from tenacity import Retrying, retry_if_exception, stop_after_attempt

from services.profiler_api.settings import Settings
from tps.errors import TPSError

log = logging.getLogger(__name__)
T = TypeVar("T")
# Server errors that end a connection besides the connection exceptions (class 08): the
# backend terminated by an administrator, by a crash, or refused while the server starts.
LOST_STATES = frozenset({"57P01", "57P02", "57P03"})


def sqlalchemy_url(url: str) -> str:
    """Return `url` with the psycopg 3 driver, whatever driver it named."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """Return `url` as libpq (and so psycopg.connect) understands it."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def resolve_database_url(settings: Settings) -> str:
    """Return the configured database URL; the service never starts a database of its own."""
    if not settings.database_url:
        raise TPSError(
            "TPS_DATABASE_URL is unset: set it, or run `tps serve`, which starts an embedded "
            "Postgres when it is unset"
        )
    return sqlalchemy_url(settings.database_url)


def make_engine(url: str, settings: Settings, *, reads: bool = False) -> Engine:
    """Create the engine of one replica.

    With `reads`, the engine that priors read through (`read_with_retry`): each statement
    is a transaction of its own, with no BEGIN and ROLLBACK round trips around it, and a
    connection is not pinged before each use. A connection that dropped (a restart, a
    replica's failover) fails its statement and invalidates the pool instead, and the read
    is asked once more. A priors miss then makes one round trip, not four.
    """
    engine = create_engine(
        sqlalchemy_url(url),
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
        pool_pre_ping=not reads,
        **({"isolation_level": "AUTOCOMMIT"} if reads else {}),
    )
    event.listen(engine, "handle_error", _connection_lost)
    return engine


def _connection_lost(context: ExceptionContext) -> None:
    """Count a connection that psycopg lost as a disconnect, even before libpq says so.

    A backend terminated while a statement waited on its socket fails the statement with
    "connection socket closed" while libpq still reports the connection good. SQLAlchemy's
    own check (libpq's status) then keeps the connection, its rollback fails too ("another
    command is already in progress"), and the read is not asked again on a new one.
    """
    lost = context.original_exception
    if context.is_disconnect or not isinstance(lost, psycopg.OperationalError):
        return
    state = lost.sqlstate
    if state is None or state.startswith("08") or state in LOST_STATES:
        context.is_disconnect = True


def _dropped(exc: BaseException) -> bool:
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def read_with_retry(sessions: Callable[[], Session], read: Callable[[Session], T]) -> T:
    """Return `read` of a session from `sessions`; once more if its connection had dropped."""
    for attempt in Retrying(
        retry=retry_if_exception(_dropped),
        stop=stop_after_attempt(2),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "a read's database connection had dropped; reading again on a new one"
        ),
    ):
        with attempt, sessions() as session:
            result = read(session)
    return result


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
