"""SQL of ingest: one COPY per table per batch, never a row at a time.

Measurements are copied straight into their table; every other table is copied into a
temporary staging table and moved with one INSERT ... ON CONFLICT.

Keys are inserted in sorted order so that concurrent batches take row locks in the
same order and cannot deadlock each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy.orm import Session

RunRow = tuple[
    uuid.UUID,  # run_id
    int,  # org_id
    str,  # host_id
    str,  # hardware_id
    str,  # problem_id
    str | None,  # winner_id
    float,  # budget_ms
    float,  # compile_ms
    str | None,  # telemetry (JSON)
    str,  # priors (JSON)
    str,  # software (JSON)
    str | None,  # rationale
    str | None,  # agent_version
    str,  # source
    datetime,  # created_at
]
MeasurementRow = tuple[Any, ...]

HARDWARE_COLUMNS = "fingerprint, vendor, arch, name, spec"
PROBLEM_COLUMNS = "hash, canonical, op, dtype, dims, key"
CANDIDATE_COLUMNS = "id, backend, params"
RUN_COLUMNS = (
    "run_id, org_id, host_id, hardware_id, problem_id, winner_id, budget_ms, compile_ms, "
    "telemetry, priors, software, rationale, agent_version, source, created_at"
)
MEASUREMENT_COLUMNS = (
    "run_id, ordinal, candidate_id, median_us, p10_us, p90_us, std_us, samples, "
    "outliers_rejected, valid, error, compile_ms"
)
MEASUREMENT_TYPES = (
    "uuid", "int2", "text", "float8", "float8", "float8", "float8", "int4", "int4", "bool",
    "text", "float8",
)  # fmt: skip

STATS_COLUMNS = (
    "hardware_id, problem_id, candidate_id, runs, valid_measurements, samples, "
    "sum_log_median, sum_sq_log_median, min_median_us, max_median_us, first_seen_at, last_seen_at"
)
STATS_TYPES = (
    "text", "text", "text", "int4", "int4", "int8", "float8", "float8", "float8", "float8",
    "timestamptz", "timestamptz",
)  # fmt: skip

# Adds a batch's aggregate deltas (computed while planning) to the stored aggregates.
_ADD_STATS = """
ON CONFLICT (hardware_id, problem_id, candidate_id) DO UPDATE SET
    runs = s.runs + excluded.runs,
    valid_measurements = s.valid_measurements + excluded.valid_measurements,
    samples = s.samples + excluded.samples,
    sum_log_median = s.sum_log_median + excluded.sum_log_median,
    sum_sq_log_median = s.sum_sq_log_median + excluded.sum_sq_log_median,
    min_median_us = LEAST(s.min_median_us, excluded.min_median_us),
    max_median_us = GREATEST(s.max_median_us, excluded.max_median_us),
    first_seen_at = LEAST(s.first_seen_at, excluded.first_seen_at),
    last_seen_at = GREATEST(s.last_seen_at, excluded.last_seen_at)
"""


def raw_connection(session: Session) -> psycopg.Connection[Any]:
    """Return the psycopg connection under the session's current transaction."""
    driver_connection = session.connection().connection.driver_connection
    assert isinstance(driver_connection, psycopg.Connection)
    return driver_connection


def _copy(
    conn: psycopg.Connection[Any],
    table: str,
    columns: str,
    rows: Iterable[Sequence[Any]],
    *,
    types: Sequence[str] | None = None,
) -> None:
    # Binary when the types are given (no text parsing on the server), else text.
    options = " (FORMAT BINARY)" if types else ""
    with conn.cursor() as cursor:
        with cursor.copy(f"COPY {table} ({columns}) FROM STDIN{options}") as copy:
            if types:
                copy.set_types(list(types))
            for row in rows:
                copy.write_row(row)


def _merge(
    conn: psycopg.Connection[Any],
    table: str,
    columns: str,
    rows: Iterable[Sequence[Any]],
    *,
    order_by: str,
    on_conflict: str,
    types: Sequence[str] | None = None,
    returning: str = "",
) -> list[tuple[Any, ...]]:
    """COPY rows into a staging table, then move them with one INSERT ... ON CONFLICT.

    COPY is the cheap way to get many rows to the server (binding arrays costs more in
    Python than the whole insert); the ordered INSERT gives idempotency and lock order.
    """
    stage = f"stage_{table}"
    # One stage per pooled connection, kept; a rollback empties it with everything else.
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {table} INCLUDING DEFAULTS)")
    _copy(conn, stage, columns, rows, types=types)
    # Moving (DELETE ... RETURNING) leaves the stage empty for the connection's next batch.
    cursor = conn.execute(
        f"WITH moved AS (DELETE FROM {stage} RETURNING {columns}) "
        f"INSERT INTO {table} AS s ({columns}) SELECT {columns} FROM moved "
        f"ORDER BY {order_by} {on_conflict} {returning}"
    )
    return cursor.fetchall() if returning else []


def upsert_hardware(conn: psycopg.Connection[Any], rows: Iterable[Sequence[str]]) -> None:
    """Insert (fingerprint, vendor, arch, name, spec JSON) rows that are new."""
    _merge(
        conn,
        "hardware",
        HARDWARE_COLUMNS,
        rows,
        order_by="fingerprint",
        on_conflict="ON CONFLICT (fingerprint) DO NOTHING",
    )


def upsert_problems(conn: psycopg.Connection[Any], rows: Iterable[Sequence[str]]) -> None:
    """Insert (hash, canonical, op, dtype, dims JSON, key JSON) rows that are new."""
    _merge(
        conn,
        "problems",
        PROBLEM_COLUMNS,
        rows,
        order_by="hash",
        on_conflict="ON CONFLICT (hash) DO NOTHING",
    )


def upsert_candidates(conn: psycopg.Connection[Any], rows: Iterable[Sequence[str]]) -> None:
    """Insert (id, backend, params JSON) rows that are new."""
    _merge(
        conn,
        "candidates",
        CANDIDATE_COLUMNS,
        rows,
        order_by="id",
        on_conflict="ON CONFLICT (id) DO NOTHING",
    )


def insert_runs(conn: psycopg.Connection[Any], rows: Iterable[RunRow]) -> set[uuid.UUID]:
    """Insert probe runs whose id is new; return the ids that were inserted."""
    inserted = _merge(
        conn,
        "probe_runs",
        RUN_COLUMNS,
        rows,
        order_by="run_id",
        on_conflict="ON CONFLICT (run_id) DO NOTHING",
        returning="RETURNING run_id",
    )
    return {row[0] for row in inserted}


def copy_measurements(conn: psycopg.Connection[Any], rows: Iterable[MeasurementRow]) -> None:
    """Stream measurement rows into their table with one binary COPY."""
    _copy(conn, "measurements", MEASUREMENT_COLUMNS, rows, types=MEASUREMENT_TYPES)


def copy_rows(
    conn: psycopg.Connection[Any], table: str, columns: str, rows: Iterable[Sequence[Any]]
) -> None:
    """COPY rows straight into `table`: the raw floor the ingest benchmark compares to."""
    _copy(conn, table, columns, rows)


def truncate_ingested(conn: psycopg.Connection[Any]) -> None:
    """Empty every table that ingest writes (organisations and tokens stay)."""
    conn.execute(
        "TRUNCATE measurements, candidate_stats, probe_runs, candidates, problems, hardware"
    )


def upsert_stats(conn: psycopg.Connection[Any], rows: Iterable[Sequence[Any]]) -> None:
    """Add aggregate deltas, one row per (hardware, problem, candidate), to the stored ones."""
    _merge(
        conn,
        "candidate_stats",
        STATS_COLUMNS,
        rows,
        order_by="hardware_id, problem_id, candidate_id",
        on_conflict=_ADD_STATS,
        types=STATS_TYPES,
    )
