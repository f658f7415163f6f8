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


def test_replicas_starting_together_migrate_once(postgres_server_url: str) -> None:
    """Init containers of several replicas run `tps db upgrade` at the same moment."""
    import subprocess
    import sys

    script = "import sys; from services.profiler_api import migrate; migrate.upgrade(sys.argv[1])"
    with scratch_database(postgres_server_url, prefix="tps_migrations") as url:
        upgrades = [
            subprocess.Popen([sys.executable, "-c", script, url], stderr=subprocess.PIPE)
            for _ in range(3)
        ]
        errors = [p.communicate(timeout=120)[1].decode() for p in upgrades]
        assert [p.returncode for p in upgrades] == [0, 0, 0], errors
        assert _tables(url) == TABLES
        assert migrate.current(url).endswith("(head)")
