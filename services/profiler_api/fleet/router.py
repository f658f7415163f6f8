"""GET /v1/hardware and GET /v1/stats."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.profiler_api.bounds import Offset
from services.profiler_api.deps import AgentDep, SessionDep
from services.profiler_api.fleet import repository
from tps.schemas import FleetStats, HardwareEntry

router = APIRouter(prefix="/v1", tags=["fleet"])


@router.get("/hardware", response_model=list[HardwareEntry])
def list_hardware(
    session: SessionDep,
    _: AgentDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> list[HardwareEntry]:
    """List the hardware the fleet has reported, most-probed first."""
    return repository.list_hardware(session, limit=limit, offset=offset)


@router.get("/stats", response_model=FleetStats)
def stats(session: SessionDep, principal: AgentDep) -> FleetStats:
    """Count runs, measurements, hardware and problems (and the caller's own runs)."""
    return repository.fleet_stats(session, org_id=principal.org_id)
