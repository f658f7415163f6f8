"""POST /v1/admin/retrain and the job endpoints: training runs in the worker, not here."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Response

from services.profiler_api.auth.service import Principal
from services.profiler_api.deps import AdminDep, SessionDep, SettingsDep
from services.profiler_api.errors import Conflict, NotFound, TooManyRequests
from services.profiler_api.orm import JOB_STATES
from services.profiler_api.training import repository
from services.profiler_api.training.schemas import JobOut, RetrainParams
from tps.schemas import RetrainAccepted

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
    settings: SettingsDep,
    response: Response,
    params: Annotated[RetrainParams | None, Body()] = None,
) -> RetrainAccepted:
    """Queue a retrain; poll the job. The new model serves only if it passes the quality gate.

    An organisation has at most `TPS_MAX_QUEUED_JOBS_PER_ORG` jobs queued at once (429).
    """
    params = params or RetrainParams()
    queued = repository.count_queued(session, org_id=principal.org_id)
    if queued >= settings.max_queued_jobs_per_org:
        raise TooManyRequests(
            f"organisation {principal.org_name} has {queued} training jobs queued, the most "
            "allowed; retry when one has started",
            retry_after_s=int(settings.training_poll_s) + 30,
        )
    job = repository.create_job(
        session, org_id=principal.org_id, params=params.model_dump(mode="json")
    )
    url = f"/v1/admin/jobs/{job.id}"
    response.headers["Location"] = url
    return RetrainAccepted(job_id=job.id, state=job.state, status_url=url)


JobState = Literal[JOB_STATES]  # type: ignore[valid-type]


@router.get("/jobs", response_model=list[JobOut], summary="Training jobs, newest first")
def list_jobs(
    session: SessionDep,
    principal: AdminDep,
    state: Annotated[JobState | None, Query(description="only jobs in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[JobOut]:
    """Return the newest training jobs of the caller's organisation (an operator: all)."""
    jobs = repository.list_jobs(session, state=state, limit=limit, org_id=_org(principal))
    return [JobOut.model_validate(job) for job in jobs]


@router.post("/jobs/{job_id}/cancel", response_model=JobOut, summary="Cancel a queued job")
def cancel_job(session: SessionDep, principal: AdminDep, job_id: uuid.UUID) -> JobOut:
    """Cancel a job that no worker has claimed yet; a running or finished one gets 409."""
    job = repository.cancel_job(session, job_id, org_id=_org(principal))
    if job is not None:
        return JobOut.model_validate(job)
    existing = repository.get_job(session, job_id, org_id=_org(principal))
    if existing is None:
        raise NotFound(f"job_id: no training job {job_id}")
    raise Conflict(f"job {job_id} is {existing.state}: only a queued job can be cancelled")


@router.get("/jobs/{job_id}", response_model=JobOut, summary="State and metrics of a job")
def get_job(session: SessionDep, principal: AdminDep, job_id: uuid.UUID) -> JobOut:
    """Return a training job: queued, running, succeeded, rejected (by the gate), failed or
    cancelled."""
    job = repository.get_job(session, job_id, org_id=_org(principal))
    if job is None:
        raise NotFound(f"job_id: no training job {job_id}")
    return JobOut.model_validate(job)


def _org(principal: Principal) -> int | None:
    """Return the organisation whose jobs the caller sees (None: all, for an operator)."""
    return None if principal.fleet_wide else principal.org_id
