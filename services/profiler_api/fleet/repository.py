"""SQL of the fleet views: hardware seen and table counts."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import ScalarSelect

from services.profiler_api.fleet.schemas import FleetStats, HardwareEntry
from services.profiler_api.orm import (
    Base,
    CandidateRow,
    Hardware,
    MeasurementRow,
    Organisation,
    ProbeRunRow,
    Problem,
)
from tps.hardware import HardwareSpec


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
    """Count what is stored, and how many runs came from organisation `org_id`."""

    def count(model: type[Base]) -> ScalarSelect[int]:
        return select(func.count()).select_from(model).scalar_subquery()

    row = session.execute(
        select(
            count(ProbeRunRow),
            count(MeasurementRow),
            count(Hardware),
            count(Problem),
            count(CandidateRow),
            count(Organisation),
            select(func.count())
            .select_from(ProbeRunRow)
            .where(ProbeRunRow.org_id == org_id)
            .scalar_subquery(),
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
    return FleetStats(**dict(zip(names, row, strict=True)))
