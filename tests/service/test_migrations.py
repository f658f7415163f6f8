from __future__ import annotations

import psycopg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, pool

from migrations.env_filters import include_name
from services.profiler_api import migrate
from services.profiler_api.db import libpq_url, scratch_database
from services.profiler_api.orm import Base

CORE_TABLES = {
    "organisations",
    "tokens",
    "hardware",
    "problems",
    "candidates",
    "probe_runs",
    "measurements",
    "candidate_stats",
}
# Every table the ORM knows (later domains add theirs), which must include the core ones.
TABLES = set(Base.metadata.tables)


def _tables(url: str) -> set[str]:
    """Return the tables of the schema; a partitioned table counts once, not per partition."""
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "AND relkind IN ('r', 'p') AND NOT relispartition"
        ).fetchall()
    return {row[0] for row in rows} - {"alembic_version"}


def test_migrations_upgrade_and_downgrade_cleanly(postgres_server_url: str) -> None:
    assert CORE_TABLES <= TABLES
    with scratch_database(postgres_server_url, prefix="tps_migrations") as url:
        migrate.upgrade(url)
        assert _tables(url) == TABLES
        assert migrate.current(url).endswith("(head)")
        migrate.downgrade(url, "base")
        assert _tables(url) == set()
        assert migrate.current(url) == ""
        migrate.upgrade(url)  # and back up again, from nothing
        assert _tables(url) == TABLES


def test_migrations_match_the_orm(migrated_database_url: str) -> None:
    engine = create_engine(migrated_database_url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_name": include_name})
        diff = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert diff == []
