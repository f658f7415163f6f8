"""SQL of the fleet views: hardware seen and table counts."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import ScalarSelect

from services.profiler_api.orm import (
    Base,
    CandidateRow,
    FleetCounter,
    Hardware,
    Organisation,
    ProbeRunRow,
    Problem,
)
from tps.hardware import HardwareSpec
from tps.schemas import FleetStats, HardwareEntry

COUNTER_SLOTS = 16

# A batch adds to its backend's slot: concurrent batches (other backends) rarely share one.
_COUNT = f"""
INSERT INTO fleet_counters AS f (org_id, slot, runs, measurements)
VALUES (%(org_id)s, pg_backend_pid() %% {COUNTER_SLOTS}, %(runs)s, %(measurements)s)
ON CONFLICT (org_id, slot) DO UPDATE
SET runs = f.runs + excluded.runs, measurements = f.measurements + excluded.measurements
"""


def count_ingested(
    conn: psycopg.Connection[Any], *, org_id: int, runs: int, measurements: int
) -> None:
    """Add a batch's runs and measurements to the fleet counters, in its transaction."""
    conn.execute(_COUNT, {"org_id": org_id, "runs": runs, "measurements": measurements})


def list_hardware(session: Session, *, limit: int, offset: int) -> list[HardwareEntry]:
    """Return hardware with its run and problem counts, most-probed first."""
    counts = (
        select(
            ProbeRunRow.hardware_id,
            func.count().label("runs"),
            func.count(func.distinct(ProbeRunRow.problem_id)).label("problems"),
        )
        .group_by(ProbeRunRow.hardware_id)
        .subquery()
    )
    rows = session.execute(
        select(Hardware, func.coalesce(counts.c.runs, 0), func.coalesce(counts.c.problems, 0))
        .outerjoin(counts, counts.c.hardware_id == Hardware.fingerprint)
        .order_by(func.coalesce(counts.c.runs, 0).desc(), Hardware.fingerprint)
        .limit(limit)
        .offset(offset)
    ).all()
    return [
        HardwareEntry(
            fingerprint=hardware.fingerprint,
            spec=HardwareSpec.model_validate(hardware.spec),
            runs=runs,
            problems=problems,
            first_seen_at=hardware.first_seen_at,
        )
        for hardware, runs, problems in rows
    ]


def fleet_stats(session: Session, *, org_id: int) -> FleetStats:
    """Count what is stored, and how many runs came from organisation `org_id`.

    Runs and measurements come from the counters kept at ingest (a few rows, whatever the
    size of the raw tables); hardware, problems, candidates and organisations are counted:
    they are the small tables, thousands of rows while measurements are billions.
    """

    def count(model: type[Base]) -> ScalarSelect[int]:
        return select(func.count()).select_from(model).scalar_subquery()

    def total(column: Any, *where: Any) -> ScalarSelect[int]:
        return select(func.coalesce(func.sum(column), 0)).where(*where).scalar_subquery()

    row = session.execute(
        select(
            total(FleetCounter.runs),
            total(FleetCounter.measurements),
            count(Hardware),
            count(Problem),
            count(CandidateRow),
            count(Organisation),
            total(FleetCounter.runs, FleetCounter.org_id == org_id),
        )
    ).one()
    names = (
        "runs",
        "measurements",
        "hardware",
        "problems",
        "candidates",
        "organisations",
        "org_runs",
    )
    return FleetStats(**dict(zip(names, (int(v) for v in row), strict=True)))
