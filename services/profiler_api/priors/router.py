"""POST and GET /v1/priors, and the batch a model's warm start asks.

The handlers are `async`: a cached answer goes out from the event loop, already encoded;
only a miss takes a worker thread, and a session of the read database (a replica when
TPS_READ_DATABASE_URL names one).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.profiler_api.db import read_with_retry
from services.profiler_api.deps import AgentDep, MetricsDep
from services.profiler_api.examples import (
    HARDWARE_ID,
    PRIORS_REQUEST,
    PRIORS_RESPONSE,
    PROBLEM_HASH,
    json_examples,
)
from services.profiler_api.metrics import ServiceMetrics
from services.profiler_api.priors.query import (
    DEFAULT_LIMIT,
    HARDWARE_ID_MAX,
    LIMIT_MAX,
    PROBLEM_MAX,
    PriorQuery,
    ids_key,
)
from services.profiler_api.priors.service import Answer, PriorService, SessionFactory
from tps.bounds import NO_NUL
from tps.schemas import Prior, PriorBatch, PriorBatchRequest, PriorRequest

router = APIRouter(prefix="/v1", tags=["priors"])
# What a warm start is answered from: measurements (a compiled product's, on this hardware or,
# new to it, on the most similar hardware), never predictions.
MEASURED = frozenset({"observed", "compiled"})


async def get_prior_service(request: Request) -> PriorService:
    service: PriorService = request.app.state.prior_service
    return service


async def get_read_sessions(request: Request) -> SessionFactory:
    sessions: SessionFactory = request.app.state.read_session_factory
    return sessions


PriorServiceDep = Annotated[PriorService, Depends(get_prior_service)]
ReadSessionsDep = Annotated[SessionFactory, Depends(get_read_sessions)]


def _respond(answer: Answer, metrics: ServiceMetrics) -> Response:
    metrics.priors.labels(answer.source).inc()
    return Response(content=answer.body, media_type="application/json")


@router.post(
    "/priors",
    response_model=Prior,
    summary="Ranked candidates for a spec and a problem",
    responses={200: {"content": json_examples(PRIORS_RESPONSE)}},
)
async def post_priors(
    body: Annotated[PriorRequest, Body(openapi_examples=PRIORS_REQUEST)],
    _: AgentDep,
    priors: PriorServiceDep,
    sessions: ReadSessionsDep,
    metrics: MetricsDep,
) -> Response:
    """Rank candidates for a problem on hardware given by its full spec (new hardware too);
    with `offered`, among the candidates the host can run."""
    query = PriorQuery.of(body.hardware, body.problem, limit=body.limit, offered=body.offered)
    key = ("spec", query.hardware_fingerprint, query.problem_hash, query.limit, query.offered_key)
    answer = priors.cached(key)
    if answer is None:
        answer = await priors.answer_once(
            sessions, key, lambda session: priors.prior(session, query)
        )
    return _respond(answer, metrics)


@router.post(
    "/priors/batch",
    response_model=PriorBatch,
    summary="Measured priors of many problems on one spec (a model's warm start)",
)
async def post_priors_batch(
    body: PriorBatchRequest,
    _: AgentDep,
    priors: PriorServiceDep,
    sessions: ReadSessionsDep,
    metrics: MetricsDep,
) -> PriorBatch:
    """Return, in the order asked, what the fleet measured for each problem on this hardware.

    Only measurements answer: a runtime that warm-starts a model dispatches measured
    winners, and probes or keeps the default where the fleet has measured nothing. A
    compiled product new to this hardware gets the most similar hardware's measurements
    (source `nearest`), which a compiling host searches among instead of everything.
    """

    def ask_all(session: Session) -> list[Prior]:
        queries = [PriorQuery.of(body.hardware, p, limit=body.limit) for p in body.problems]
        return [priors.prior(session, query, only=MEASURED) for query in queries]

    answers = await run_in_threadpool(read_with_retry, sessions, ask_all)
    for prior in answers:
        metrics.priors.labels(prior.source or "none").inc()
    return PriorBatch(priors=answers)


@router.get(
    "/priors",
    response_model=Prior,
    summary="Ranked candidates for known ids",
    responses={200: {"content": json_examples(PRIORS_RESPONSE)}},
)
async def get_priors(
    _: AgentDep,
    priors: PriorServiceDep,
    sessions: ReadSessionsDep,
    metrics: MetricsDep,
    hardware_id: Annotated[
        str,
        Query(
            min_length=1,
            max_length=HARDWARE_ID_MAX,
            pattern=NO_NUL,
            description="hardware fingerprint, as POST /v1/probe-runs answers it",
            examples=[HARDWARE_ID],
        ),
    ],
    problem: Annotated[
        str,
        Query(
            min_length=1,
            max_length=PROBLEM_MAX,
            pattern=NO_NUL,
            description="problem hash (as POST /v1/probe-runs answers it) or canonical key",
            examples=[PROBLEM_HASH],
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=LIMIT_MAX)] = DEFAULT_LIMIT,
) -> Response:
    """Rank candidates for a known hardware fingerprint and a problem hash or canonical key.

    A cached answer usually leaves before this handler (`priors.fastpath`).
    """
    key = ids_key(hardware_id, problem, limit)
    answer = priors.cached(key)
    if answer is None:
        answer = await priors.answer_once(
            sessions,
            key,
            lambda session: priors.prior_by_ids(
                session, hardware_id=hardware_id, problem=problem, limit=limit
            ),
        )
    return _respond(answer, metrics)
