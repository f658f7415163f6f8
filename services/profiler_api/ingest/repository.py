"""SQL of ingest: one statement per table per batch, never a row at a time.

Measurements are copied straight into their table; hardware, problems, candidates and runs
are sent as one binary array per column and inserted by one INSERT ... ON CONFLICT; the
aggregates are folded from the batch's stored measurements by one INSERT ... SELECT.

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
# One measurement's values in the order of the COPY's columns.
MeasurementValues = tuple[Any, ...]

HARDWARE_COLUMNS = "fingerprint, vendor, arch, name, spec"
HARDWARE_TYPES = ("text", "text", "text", "text", "jsonb")
PROBLEM_COLUMNS = "hash, canonical, op, dtype, dims, key"
PROBLEM_TYPES = ("text", "text", "text", "text", "jsonb", "jsonb")
CANDIDATE_COLUMNS = "id, backend, params"
CANDIDATE_TYPES = ("text", "text", "jsonb")
RUN_COLUMNS = (
    "run_id, org_id, host_id, hardware_id, problem_id, winner_id, budget_ms, compile_ms, "
    "telemetry, priors, software, rationale, agent_version, source, created_at"
)
RUN_TYPES = (
    "uuid", "int8", "text", "text", "text", "text", "float8", "float8", "jsonb", "jsonb",
    "jsonb", "text", "text", "text", "timestamptz",
)  # fmt: skip
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

# How a delta is added to a stored aggregate row of the same key.
STATS_ON_CONFLICT = """
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

# Adds the aggregate deltas of runs %(run_ids)s, read back from their stored measurements,
# to the stored aggregates. The runs are looked up by key, and the inner query aggregates one
# run at a time (an index scan of its measurements, in its day's partition: a run and its
# measurements share the ingest transaction's `received_at`), whatever the tables' sizes; so a
# candidate measured twice in one run counts as one run. The outer query sums the runs per
# key in key order (lock order); as nothing arrives in that order, the sort takes every
# delta before the first row is locked, and concurrent batches that wait on those rows wait
# for the upsert alone. Only valid measurements with a median count towards latency.
_ADD_STATS = f"""
INSERT INTO candidate_stats AS s ({STATS_COLUMNS})
SELECT r.hardware_id, r.problem_id, m.candidate_id,
    count(*), sum(m.valid_measurements), sum(m.samples),
    sum(m.sum_log_median), sum(m.sum_sq_log_median),
    min(m.min_median_us), max(m.max_median_us),
    min(r.created_at), max(r.created_at)
FROM unnest(%(run_ids)s::uuid[]) AS batch (run_id)
JOIN probe_runs AS r USING (run_id)
CROSS JOIN LATERAL (
    SELECT candidate_id,
        count(median_us) FILTER (WHERE valid) AS valid_measurements,
        sum(samples) AS samples,
        coalesce(sum(ln(median_us)) FILTER (WHERE valid), 0) AS sum_log_median,
        coalesce(sum(ln(median_us) ^ 2) FILTER (WHERE valid), 0) AS sum_sq_log_median,
        min(median_us) FILTER (WHERE valid) AS min_median_us,
        max(median_us) FILTER (WHERE valid) AS max_median_us
    FROM measurements
    WHERE run_id = r.run_id AND received_at = r.received_at
    GROUP BY candidate_id
) AS m
GROUP BY r.hardware_id, r.problem_id, m.candidate_id
ORDER BY r.hardware_id, r.problem_id, m.candidate_id
{STATS_ON_CONFLICT}
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
    types: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    order_by: str,
    on_conflict: str,
    returning: str = "",
) -> list[tuple[Any, ...]]:
    """Insert rows with one ordered INSERT ... SELECT FROM unnest(...) ON CONFLICT.

    Each column travels as one binary array parameter: in Python that costs what a COPY
    does, in one round trip and with no staging table (truncating staging tables at each
    commit took milliseconds, while the batch held its row locks). The ordered INSERT gives
    idempotency and lock order.
    """
    names = [name.strip() for name in columns.split(",")]
    arrays = [list(values) for values in zip(*rows, strict=True)]
    if not arrays:
        return []
    # JSON columns travel as text and are parsed on the server, as COPY would.
    sources = ", ".join(f"%b::{'text' if t == 'jsonb' else t}[]" for t in types)
    values = ", ".join(
        f"{name}::jsonb" if t == "jsonb" else name for name, t in zip(names, types, strict=True)
    )
    cursor = conn.execute(
        f"INSERT INTO {table} AS s ({columns}) "
        f"SELECT {values} FROM unnest({sources}) AS x({columns}) "
        f"ORDER BY {order_by} {on_conflict} {returning}",
        arrays,
    )
    return cursor.fetchall() if returning else []


def upsert_hardware(conn: psycopg.Connection[Any], rows: Iterable[Sequence[str]]) -> None:
    """Insert (fingerprint, vendor, arch, name, spec JSON) rows that are new."""
    _merge(
        conn,
        "hardware",
        HARDWARE_COLUMNS,
        HARDWARE_TYPES,
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
        PROBLEM_TYPES,
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
        CANDIDATE_TYPES,
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
        RUN_TYPES,
        rows,
        order_by="run_id",
        on_conflict="ON CONFLICT (run_id) DO NOTHING",
        returning="RETURNING run_id",
    )
    return {row[0] for row in inserted}


def runs_of_other_orgs(
    conn: psycopg.Connection[Any], run_ids: list[uuid.UUID], *, org_id: int
) -> list[uuid.UUID]:
    """Return those of `run_ids` that another organisation stored."""
    rows = conn.execute(
        "SELECT run_id FROM probe_runs WHERE run_id = ANY(%s) AND org_id <> %s ORDER BY run_id",
        (run_ids, org_id),
    ).fetchall()
    return [row[0] for row in rows]


def copy_measurements(conn: psycopg.Connection[Any], rows: Iterable[MeasurementValues]) -> None:
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


def add_stats(conn: psycopg.Connection[Any], run_ids: Iterable[uuid.UUID]) -> None:
    """Add the aggregates of stored runs `run_ids`, one row per (hardware, problem, candidate)."""
    # The planner guesses far more than the ~25 measurements of a run; past jit_above_cost
    # it would JIT-compile the statement, which costs more than running it.
    conn.execute("SET LOCAL jit = off")
    conn.execute(_ADD_STATS, {"run_ids": list(run_ids)})
