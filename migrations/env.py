"""Alembic environment: the service's ORM metadata, the URL from the caller or TPS_DATABASE_URL."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool, text

from migrations.env_filters import include_name
from services.profiler_api.db import sqlalchemy_url
from services.profiler_api.orm import Base

# A domain that adds tables with its own models module imports it here, so that
# autogenerate and the ORM-vs-migrations test see them (they share Base.metadata).

# Held for the upgrade's transaction: replicas that start together (init containers) migrate
# one after another, and each later one finds the schema at head and does nothing.
MIGRATION_LOCK = 0x7470_735F_6D69_67  # "tps_mig"

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("TPS_DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: pass one or set TPS_DATABASE_URL")
    return sqlalchemy_url(url)


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, include_name=include_name
        )
        with context.begin_transaction():
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
