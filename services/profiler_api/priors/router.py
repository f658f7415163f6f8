"""POST and GET /v1/priors."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from services.profiler_api.deps import AgentDep, MetricsDep, SessionDep
from services.profiler_api.priors.service import PriorService
from services.profiler_api.priors.sources import PriorQuery
from tps.bounds import NO_NUL
from tps.schemas import Prior, PriorRequest

router = APIRouter(prefix="/v1", tags=["priors"])


async def get_prior_service(request: Request) -> PriorService:
    return request.app.state.prior_service


PriorServiceDep = Annotated[PriorService, Depends(get_prior_service)]


@router.post("/priors", response_model=Prior, summary="Ranked candidates for a spec and a problem")
def post_priors(
    body: PriorRequest,
    session: SessionDep,
    _: AgentDep,
    priors: PriorServiceDep,
    metrics: MetricsDep,
) -> Prior:
    """Rank candidates for a problem on hardware given by its full spec (new hardware too)."""
    prior = priors.prior(session, PriorQuery.of(body.hardware, body.problem, limit=body.limit))
    metrics.priors.labels(prior.source or "none").inc()
    return prior


@router.get("/priors", response_model=Prior, summary="Ranked candidates for known ids")
def get_priors(
    session: SessionDep,
    _: AgentDep,
    priors: PriorServiceDep,
    metrics: MetricsDep,
    hardware_id: Annotated[
        str, Query(min_length=1, max_length=64, pattern=NO_NUL, description="fingerprint")
    ],
    problem: Annotated[
        str,
        Query(
            min_length=1,
            max_length=512,
            pattern=NO_NUL,
            description="problem hash or canonical key",
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=256)] = 8,
) -> Prior:
    """Rank candidates for a known hardware fingerprint and a problem hash or canonical key."""
    prior = priors.prior_by_ids(session, hardware_id=hardware_id, problem=problem, limit=limit)
    metrics.priors.labels(prior.source or "none").inc()
    return prior
