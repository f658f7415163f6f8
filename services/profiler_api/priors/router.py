"""POST and GET /v1/priors."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Request

from services.profiler_api.deps import AgentDep, MetricsDep, SessionDep
from services.profiler_api.examples import (
    HARDWARE_ID,
    PRIORS_REQUEST,
    PRIORS_RESPONSE,
    PROBLEM_HASH,
    json_examples,
)
from services.profiler_api.priors.service import PriorService
from services.profiler_api.priors.sources import PriorQuery
from tps.schemas import Prior, PriorBatch, PriorBatchRequest, PriorRequest

router = APIRouter(prefix="/v1", tags=["priors"])
OBSERVED = frozenset({"observed"})


async def get_prior_service(request: Request) -> PriorService:
    return request.app.state.prior_service


PriorServiceDep = Annotated[PriorService, Depends(get_prior_service)]


@router.post(
    "/priors",
    response_model=Prior,
    summary="Ranked candidates for a spec and a problem",
    responses={200: {"content": json_examples(PRIORS_RESPONSE)}},
)
def post_priors(
    body: Annotated[PriorRequest, Body(openapi_examples=PRIORS_REQUEST)],
    session: SessionDep,
    _: AgentDep,
    priors: PriorServiceDep,
    metrics: MetricsDep,
) -> Prior:
    """Rank candidates for a problem on hardware given by its full spec (new hardware too)."""
    prior = priors.prior(session, PriorQuery.of(body.hardware, body.problem, limit=body.limit))
    metrics.priors.labels(prior.source or "none").inc()
    return prior


@router.post(
    "/priors/batch",
    response_model=PriorBatch,
    summary="Observed priors of many problems on one spec (a model's warm start)",
)
def post_priors_batch(
    body: PriorBatchRequest,
    session: SessionDep,
    _: AgentDep,
    priors: PriorServiceDep,
    metrics: MetricsDep,
) -> PriorBatch:
    """Return, in the order asked, what the fleet measured for each problem on this hardware.

    Only observed priors answer: a runtime that warm-starts a model dispatches measured
    winners, and probes or keeps the default where the fleet has measured nothing.
    """
    answers = []
    for problem in body.problems:
        query = PriorQuery.of(body.hardware, problem, limit=body.limit)
        prior = priors.prior(session, query, only=OBSERVED)
        metrics.priors.labels(prior.source or "none").inc()
        answers.append(prior)
    return PriorBatch(priors=answers)


@router.get(
    "/priors",
    response_model=Prior,
    summary="Ranked candidates for known ids",
    responses={200: {"content": json_examples(PRIORS_RESPONSE)}},
)
def get_priors(
    session: SessionDep,
    _: AgentDep,
    priors: PriorServiceDep,
    metrics: MetricsDep,
    hardware_id: Annotated[
        str,
        Query(
            min_length=1,
            max_length=64,
            description="hardware fingerprint, as POST /v1/probe-runs answers it",
            examples=[HARDWARE_ID],
        ),
    ],
    problem: Annotated[
        str,
        Query(
            min_length=1,
            max_length=512,
            description="problem hash (as POST /v1/probe-runs answers it) or canonical key",
            examples=[PROBLEM_HASH],
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=256)] = 8,
) -> Prior:
    """Rank candidates for a known hardware fingerprint and a problem hash or canonical key."""
    prior = priors.prior_by_ids(session, hardware_id=hardware_id, problem=problem, limit=limit)
    metrics.priors.labels(prior.source or "none").inc()
    return prior
