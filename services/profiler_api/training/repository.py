"""SQL of training: the job queue, and the measurements that models learn from."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from models.dataset import MedianRow, TuningData
from services.profiler_api.orm import (
    CandidateRow,
    Hardware,
    MeasurementRow,
    ProbeRunRow,
    Problem,
    TrainingJob,
)
from tps.candidate import COMPILER_BACKENDS, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

_QUEUE_LOCK = 0x7470_7371  # advisory lock class of the per-organisation job queue


def create_job(session: Session, *, org_id: int, params: dict[str, Any]) -> TrainingJob:
    """Queue a training job."""
    job = TrainingJob(id=uuid.uuid4(), state="queued", requested_by=org_id, params=params)
    session.add(job)
    session.flush()
    return job


def count_queued(session: Session, *, org_id: int) -> int:
    """Return the jobs organisation `org_id` has queued, serialising its concurrent retrains.

    The transaction-scoped advisory lock makes count-then-insert whole per organisation.
    """
    session.execute(select(func.pg_advisory_xact_lock(_QUEUE_LOCK, org_id)))
    return session.execute(
        select(func.count())
        .select_from(TrainingJob)
        .where(TrainingJob.requested_by == org_id, TrainingJob.state == "queued")
    ).scalar_one()


def get_job(
    session: Session, job_id: uuid.UUID, *, org_id: int | None = None
) -> TrainingJob | None:
    """Return job `job_id` (only if organisation `org_id` requested it, when given)."""
    job = session.get(TrainingJob, job_id)
    if job is None or (org_id is not None and job.requested_by != org_id):
        return None
    return job


def list_jobs(
    session: Session, *, state: str | None = None, limit: int = 50, org_id: int | None = None
) -> list[TrainingJob]:
    """Return the newest jobs first, optionally only those in `state` or of `org_id`."""
    query = select(TrainingJob).order_by(TrainingJob.requested_at.desc(), TrainingJob.id)
    if org_id is not None:
        query = query.where(TrainingJob.requested_by == org_id)
    if state is not None:
        query = query.where(TrainingJob.state == state)
    return list(session.execute(query.limit(limit)).scalars())


def cancel_job(
    session: Session, job_id: uuid.UUID, *, org_id: int | None = None
) -> TrainingJob | None:
    """Cancel a queued job; return it, or None when it is not queued (or does not exist).

    Row-locked like a claim, so a worker claiming it at this moment wins or loses whole.
    """
    job = session.execute(
        select(TrainingJob).where(TrainingJob.id == job_id).with_for_update()
    ).scalar_one_or_none()
    if job is None or job.state != "queued":
        return None
    if org_id is not None and job.requested_by != org_id:
        return None
    job.state, job.finished_at = "cancelled", func.now()
    session.flush()
    session.refresh(job)
    return job


def claim_next_job(session: Session, *, worker: str, stale_s: float) -> TrainingJob | None:
    """Mark the oldest queued job running and return it; replicas never claim the same one.

    SKIP LOCKED: a job another worker is claiming right now is passed over, not waited for.
    A job left running longer than `stale_s` (its worker died) is claimed again.
    """
    stale = (TrainingJob.state == "running") & (
        TrainingJob.started_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, stale_s)
    )
    job = session.execute(
        select(TrainingJob)
        .where((TrainingJob.state == "queued") | stale)
        .order_by(TrainingJob.requested_at)
        .limit(1)
        .with_for_update(skip_locked=True)
    ).scalar_one_or_none()
    if job is None:
        return None
    job.state, job.worker, job.started_at = "running", worker, func.now()
    session.flush()
    return job


def finish_job(
    session: Session,
    job_id: uuid.UUID,
    *,
    state: str,
    metrics: dict[str, Any] | None = None,
    error: str | None = None,
    model_version: int | None = None,
) -> None:
    """Record how a job ended."""
    session.execute(
        update(TrainingJob)
        .where(TrainingJob.id == job_id)
        .values(
            state=state,
            metrics=metrics,
            error=error,
            model_version=model_version,
            finished_at=func.now(),
        )
    )


def tuning_data(session: Session, *, ops: list[str] | None = None) -> TuningData:
    """Read the training table from the stored measurements.

    One row per (hardware, problem, candidate): the median over runs of the valid medians
    (NULL when it never ran validly), as models.dataset.TuningData.from_runs computes it.
    """
    m, r, p, c = MeasurementRow, ProbeRunRow, Problem, CandidateRow
    valid_median = func.percentile_cont(0.5).within_group(m.median_us)
    query = (
        select(
            p.op,
            r.hardware_id,
            r.problem_id,
            m.candidate_id,
            valid_median.filter(m.valid & m.median_us.is_not(None)),
        )
        .join(r, r.run_id == m.run_id)
        .join(p, p.hash == r.problem_id)
        .join(c, c.id == m.candidate_id)
        # inductor's template configurations (the compiled runtime's recorded searches) are
        # served to compiling hosts as observed winners; in a model's candidate universe
        # they would be offered to agents that have no way to run them
        .where(c.backend.not_in(COMPILER_BACKENDS))
        .group_by(p.op, r.hardware_id, r.problem_id, m.candidate_id)
        .order_by(p.op, r.hardware_id, r.problem_id, m.candidate_id)
    )
    if ops:
        query = query.where(p.op.in_(ops))
    rows = [MedianRow(*row) for row in session.execute(query).all()]
    hardware_ids = sorted({row.hw_key for row in rows})
    problem_ids = sorted({row.problem_hash for row in rows})
    candidate_ids = sorted({row.candidate_id for row in rows})
    hardware = {
        key: HardwareSpec.model_validate(spec)
        for key, spec in session.execute(
            select(Hardware.fingerprint, Hardware.spec).where(
                Hardware.fingerprint.in_(hardware_ids)
            )
        ).all()
    }
    problems = {
        key: ProblemKey.model_validate(doc)
        for key, doc in session.execute(
            select(Problem.hash, Problem.key).where(Problem.hash.in_(problem_ids))
        ).all()
    }
    candidates = {
        key: Candidate(backend=backend, params=params)
        for key, backend, params in session.execute(
            select(CandidateRow.id, CandidateRow.backend, CandidateRow.params).where(
                CandidateRow.id.in_(candidate_ids)
            )
        ).all()
    }
    return TuningData.from_medians(
        rows, hardware=hardware, problems=problems, candidates=candidates
    )
