"""Fleet scale: measurements partitioned by day, an index in priors' order, fleet counters.

- `measurements` becomes a table partitioned by range of `received_at` (one partition per
  UTC day, and a default partition so that ingest never fails for want of one); its primary
  key gains `received_at`, as partitioning requires. Existing rows are copied into their
  day's partition, with their run's `received_at`. `tps_measurement_partitions(from, to)`
  creates missing day partitions; `tps_drop_measurement_partitions(before)` drops whole
  days older than a date (retention) and returns how many rows went with them.
- `ix_candidate_stats_rank`: the aggregates in the order priors read them (fastest geometric
  mean first), so that the top `limit` of a (hardware, problem) come off an index.
- `fleet_counters`: runs and measurements counted at ingest, per organisation and slot
  (concurrent batches update different rows), so that /v1/stats reads a few rows, not
  every measurement. Organisation 0 holds the (negative) count of rows dropped by retention.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 21:45:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASUREMENT_COLUMNS = """
    run_id uuid NOT NULL,
    ordinal smallint NOT NULL,
    candidate_id varchar(64) COLLATE "C" NOT NULL,
    median_us double precision,
    p10_us double precision,
    p90_us double precision,
    std_us double precision,
    samples integer NOT NULL,
    outliers_rejected integer NOT NULL,
    valid boolean NOT NULL,
    error text,
    compile_ms double precision
"""
COLUMN_NAMES = (
    "run_id, ordinal, candidate_id, median_us, p10_us, p90_us, std_us, samples, "
    "outliers_rejected, valid, error, compile_ms"
)

PARTITION_FUNCTIONS = """
CREATE FUNCTION tps_measurement_partitions(first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date := first_day;
    name text;
    created integer := 0;
BEGIN
    WHILE day <= last_day LOOP
        name := 'measurements_p' || to_char(day, 'YYYYMMDD');
        IF to_regclass(name) IS NULL THEN
            BEGIN
                EXECUTE format(
                    'CREATE TABLE %I PARTITION OF measurements FOR VALUES FROM (%L) TO (%L)',
                    name, day::timestamp AT TIME ZONE 'UTC',
                    (day + 1)::timestamp AT TIME ZONE 'UTC');
                created := created + 1;
            EXCEPTION WHEN check_violation THEN
                -- The default partition already holds rows of that day: they stay there.
                RAISE NOTICE 'measurements of % stay in the default partition', day;
            END;
        END IF;
        day := day + 1;
    END LOOP;
    RETURN created;
END $$;

CREATE FUNCTION tps_drop_measurement_partitions(before_day date) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    dropped bigint := 0;
    rows_in bigint;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits AS i
        JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'measurements'::regclass
          AND c.relname ~ '^measurements_p[0-9]{8}$'
          AND to_date(substr(c.relname, 15), 'YYYYMMDD') < before_day
        ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT count(*) FROM %I', part.relname) INTO rows_in;
        EXECUTE format('DROP TABLE %I', part.relname);
        dropped := dropped + rows_in;
    END LOOP;
    IF dropped > 0 THEN
        INSERT INTO fleet_counters AS f (org_id, slot, runs, measurements)
        VALUES (0, 0, 0, -dropped)
        ON CONFLICT (org_id, slot) DO UPDATE SET measurements = f.measurements - dropped;
    END IF;
    RETURN dropped;
END $$;
"""


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_candidate_stats_rank ON candidate_stats "
        "(hardware_id, problem_id, (sum_log_median / valid_measurements), candidate_id) "
        "WHERE valid_measurements > 0"
    )
    op.execute(
        """
        CREATE TABLE fleet_counters (
            org_id bigint NOT NULL,
            slot smallint NOT NULL,
            runs bigint NOT NULL DEFAULT 0,
            measurements bigint NOT NULL DEFAULT 0,
            CONSTRAINT pk_fleet_counters PRIMARY KEY (org_id, slot)
        )
        """
    )
    op.execute("ALTER TABLE measurements RENAME TO measurements_unpartitioned")
    op.execute("ALTER INDEX pk_measurements RENAME TO pk_measurements_unpartitioned")
    op.execute(
        f"""
        CREATE TABLE measurements (
            {MEASUREMENT_COLUMNS},
            received_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_measurements PRIMARY KEY (run_id, ordinal, received_at)
        ) PARTITION BY RANGE (received_at)
        """
    )
    op.execute("CREATE TABLE measurements_default PARTITION OF measurements DEFAULT")
    op.execute(PARTITION_FUNCTIONS)
    op.execute(
        "SELECT tps_measurement_partitions("
        "coalesce((SELECT (min(received_at) AT TIME ZONE 'UTC')::date FROM probe_runs), "
        "(now() AT TIME ZONE 'UTC')::date), (now() AT TIME ZONE 'UTC')::date + 7)"
    )
    op.execute(
        f"INSERT INTO measurements ({COLUMN_NAMES}, received_at) "
        f"SELECT {', '.join('m.' + c.strip() for c in COLUMN_NAMES.split(','))}, r.received_at "
        "FROM measurements_unpartitioned AS m JOIN probe_runs AS r USING (run_id)"
    )
    op.execute("DROP TABLE measurements_unpartitioned")
    op.execute(
        """
        INSERT INTO fleet_counters (org_id, slot, runs, measurements)
        SELECT r.org_id, 0, count(*), coalesce(sum(m.n), 0)
        FROM probe_runs AS r
        LEFT JOIN (
            SELECT run_id, count(*) AS n FROM measurements GROUP BY run_id
        ) AS m USING (run_id)
        GROUP BY r.org_id
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE measurements RENAME TO measurements_partitioned")
    op.execute("ALTER INDEX pk_measurements RENAME TO pk_measurements_partitioned")
    op.execute(
        f"""
        CREATE TABLE measurements (
            {MEASUREMENT_COLUMNS},
            CONSTRAINT pk_measurements PRIMARY KEY (run_id, ordinal)
        )
        """
    )
    op.execute(
        f"INSERT INTO measurements ({COLUMN_NAMES}) "
        f"SELECT {COLUMN_NAMES} FROM measurements_partitioned"
    )
    op.execute("DROP TABLE measurements_partitioned")
    op.execute("DROP FUNCTION tps_drop_measurement_partitions(date)")
    op.execute("DROP FUNCTION tps_measurement_partitions(date, date)")
    op.execute("DROP TABLE fleet_counters")
    op.execute("DROP INDEX ix_candidate_stats_rank")
