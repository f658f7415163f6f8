"""POST /v1/admin/retrain and GET /v1/admin/jobs/{id}: training runs in the worker, not here."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Response

from services.profiler_api.deps import AdminDep, SessionDep
from services.profiler_api.errors import NotFound
from services.profiler_api.training import repository
from services.profiler_api.training.schemas import JobOut, RetrainAccepted, RetrainParams

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post(
    "/retrain",
    status_code=202,
    response_model=RetrainAccepted,
    summary="Queue a training job",
)
def retrain(
    session: SessionDep,
    principal: AdminDep,
    response: Response,
    params: Annotated[RetrainParams | None, Body()] = None,
) -> RetrainAccepted:
    """Queue a retrain; poll the job. The new model serves only if it passes the quality gate."""
    params = params or RetrainParams()
    job = repository.create_job(
        session, org_id=principal.org_id, params=params.model_dump(mode="json")
    )
    url = f"/v1/admin/jobs/{job.id}"
    response.headers["Location"] = url
    return RetrainAccepted(job_id=job.id, state=job.state, status_url=url)


@router.get("/jobs/{job_id}", response_model=JobOut, summary="State and metrics of a job")
def get_job(session: SessionDep, _: AdminDep, job_id: uuid.UUID) -> JobOut:
    """Return a training job: queued, running, succeeded, rejected (by the gate) or failed."""
    job = repository.get_job(session, job_id)
    if job is None:
        raise NotFound(f"job_id: no training job {job_id}")
    return JobOut.model_validate(job)
