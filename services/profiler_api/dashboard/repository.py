"""SQL of the dashboard: coverage, speedups, probe time saved by priors, rates, the model."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Boolean, Float, Integer, cast, func, literal, select
from sqlalchemy.orm import Session

from services.profiler_api.dashboard.schemas import (
    ActiveModel,
    CoverageCell,
    HardwareLabel,
    PriorSavingsRow,
    RateBucket,
    SpeedupRow,
)
from services.profiler_api.orm import (
    CandidateRow,
    CandidateStats,
    Hardware,
    MeasurementRow,
    ModelVersion,
    ProbeRunRow,
    Problem,
    TrainingJob,
)

# A best candidate this much faster than vendor-default counts as an improvement.
IMPROVED = 1.05


def hardware_labels(session: Session) -> dict[str, HardwareLabel]:
    """Return every known device by fingerprint."""
    rows = session.execute(
        select(Hardware.fingerprint, Hardware.name, Hardware.arch, Hardware.spec)
    ).all()
    return {
        fingerprint: HardwareLabel(
            fingerprint=fingerprint, name=name, arch=arch, compute_units=spec.get("compute_units")
        )
        for fingerprint, name, arch, spec in rows
    }


def problems_per_op(session: Session) -> dict[str, int]:
    """Count the problems the fleet has seen, per op."""
    rows = session.execute(select(Problem.op, func.count()).group_by(Problem.op)).all()
    return {op: count for op, count in rows}


def coverage(session: Session, labels: dict[str, HardwareLabel]) -> list[CoverageCell]:
    """Return, per hardware and op, the distinct problems probed and the runs."""
    rows = session.execute(
        select(
            ProbeRunRow.hardware_id,
            Problem.op,
            func.count(func.distinct(ProbeRunRow.problem_id)),
            func.count(),
        )
        .join(Problem, Problem.hash == ProbeRunRow.problem_id)
        .group_by(ProbeRunRow.hardware_id, Problem.op)
        .order_by(ProbeRunRow.hardware_id, Problem.op)
    ).all()
    return [
        CoverageCell(hardware=labels[hw], op=op, problems=problems, runs=runs)
        for hw, op, problems, runs in rows
    ]


def speedups(session: Session, labels: dict[str, HardwareLabel]) -> list[SpeedupRow]:
    """Return best-over-vendor-default speedups per hardware and op, from the aggregates.

    A candidate's latency on a problem is the geometric mean of its valid medians; a
    problem counts where vendor-default has one.
    """
    log_us = CandidateStats.sum_log_median / CandidateStats.valid_measurements
    per_candidate = (
        select(
            CandidateStats.hardware_id,
            CandidateStats.problem_id,
            CandidateRow.backend,
            log_us.label("log_us"),
        )
        .join(CandidateRow, CandidateRow.id == CandidateStats.candidate_id)
        .where(CandidateStats.valid_measurements > 0)
        .subquery()
    )
    per_problem = (
        select(
            per_candidate.c.hardware_id,
            per_candidate.c.problem_id,
            (
                func.min(per_candidate.c.log_us).filter(per_candidate.c.backend == "vendor-default")
                - func.min(per_candidate.c.log_us)
            ).label("gain"),
        )
        .group_by(per_candidate.c.hardware_id, per_candidate.c.problem_id)
        .subquery()
    )
    rows = session.execute(
        select(
            per_problem.c.hardware_id,
            Problem.op,
            func.count(),
            func.avg(per_problem.c.gain),
            func.max(per_problem.c.gain),
            func.count().filter(per_problem.c.gain >= math.log(IMPROVED)),
        )
        .join(Problem, Problem.hash == per_problem.c.problem_id)
        .where(per_problem.c.gain.is_not(None))
        .group_by(per_problem.c.hardware_id, Problem.op)
        .order_by(per_problem.c.hardware_id, Problem.op)
    ).all()
    return [
        SpeedupRow(
            hardware=labels[hw],
            op=op,
            problems=problems,
            geomean_speedup=math.exp(mean_gain),
            max_speedup=math.exp(max_gain),
            improved=improved,
        )
        for hw, op, problems, mean_gain, max_gain, improved in rows
    ]


def prior_savings(session: Session, labels: dict[str, HardwareLabel]) -> list[PriorSavingsRow]:
    """Compare the probe budget of runs steered by priors with full probes of the same problems."""
    steered = func.coalesce(cast(ProbeRunRow.priors["used"].astext, Boolean), False)
    top1 = cast(ProbeRunRow.priors["winner_rank"].astext, Integer) == 0
    per_problem = (
        select(
            ProbeRunRow.hardware_id,
            ProbeRunRow.problem_id,
            func.count().filter(steered).label("steered_runs"),
            func.count().filter(~steered).label("full_runs"),
            func.avg(ProbeRunRow.budget_ms).filter(steered).label("steered_ms"),
            func.avg(ProbeRunRow.budget_ms).filter(~steered).label("full_ms"),
            func.count().filter(steered & top1).label("top1"),
            func.count()
            .filter(steered & ProbeRunRow.priors["winner_rank"].astext.is_not(None))
            .label("ranked"),
        )
        .group_by(ProbeRunRow.hardware_id, ProbeRunRow.problem_id)
        .subquery()
    )
    p = per_problem.c
    both = (p.steered_runs > 0) & (p.full_runs > 0)
    rows = session.execute(
        select(
            p.hardware_id,
            Problem.op,
            func.sum(p.steered_runs),
            func.sum(p.full_runs),
            func.sum(p.steered_runs * p.steered_ms) / func.nullif(func.sum(p.steered_runs), 0),
            func.sum(p.full_runs * p.full_ms) / func.nullif(func.sum(p.full_runs), 0),
            func.sum(p.steered_runs * (p.full_ms - p.steered_ms)).filter(both),
            cast(func.sum(p.top1), Float) / func.nullif(func.sum(p.ranked), 0),
        )
        .join(Problem, Problem.hash == p.problem_id)
        .group_by(p.hardware_id, Problem.op)
        .having(func.sum(p.steered_runs) > 0)
        .order_by(p.hardware_id, Problem.op)
    ).all()
    return [
        PriorSavingsRow(
            hardware=labels[hw],
            op=op,
            steered_runs=steered_runs,
            full_runs=full_runs,
            steered_mean_ms=_float(steered_ms),
            full_mean_ms=_float(full_ms),
            saved_ms=_float(saved),
            top1_hits=_float(hits),
        )
        for hw, op, steered_runs, full_runs, steered_ms, full_ms, saved, hits in rows
    ]


def rates(session: Session, *, since: datetime, bucket: timedelta) -> list[RateBucket]:
    """Count runs, steered runs and measurements received per bucket since `since`."""
    start = func.date_bin(literal(bucket), ProbeRunRow.received_at, literal(since))
    steered = func.coalesce(cast(ProbeRunRow.priors["used"].astext, Boolean), False)
    measurements = (
        select(func.count())
        .where(MeasurementRow.run_id == ProbeRunRow.run_id)
        .correlate(ProbeRunRow)
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            start.label("start"),
            func.count(),
            func.count().filter(steered),
            func.sum(measurements),
        )
        .where(ProbeRunRow.received_at >= since)
        .group_by(start)
        .order_by(start)
    ).all()
    return [
        RateBucket(start=at, runs=runs, steered_runs=steered_runs, measurements=int(m or 0))
        for at, runs, steered_runs, m in rows
    ]


def active_model(session: Session) -> ActiveModel | None:
    """Return the active model with the held-out reports it was registered with, or None."""
    row = session.execute(
        select(
            ModelVersion.version,
            ModelVersion.ops,
            ModelVersion.activated_at,
            ModelVersion.data_counts,
            ModelVersion.metrics,
        ).where(ModelVersion.active)
    ).one_or_none()
    if row is None:
        return None
    version, ops, activated_at, data_counts, metrics = row
    return ActiveModel(
        version=version,
        ops=ops,
        activated_at=activated_at,
        data_counts=data_counts,
        reports=metrics.get("reports", []),
    )


def jobs_by_state(session: Session) -> dict[str, int]:
    """Count training jobs per state."""
    rows = session.execute(
        select(TrainingJob.state, func.count()).group_by(TrainingJob.state)
    ).all()
    return {state: count for state, count in rows}


def last_job_seconds(session: Session) -> dict[str, float]:
    """Return how long the latest finished job of each final state ran, in seconds."""
    latest = (
        select(
            TrainingJob.state,
            func.extract("epoch", TrainingJob.finished_at - TrainingJob.started_at).label("s"),
            func.row_number()
            .over(partition_by=TrainingJob.state, order_by=TrainingJob.finished_at.desc())
            .label("n"),
        )
        .where(TrainingJob.finished_at.is_not(None), TrainingJob.started_at.is_not(None))
        .subquery()
    )
    rows = session.execute(select(latest.c.state, latest.c.s).where(latest.c.n == 1)).all()
    return {state: float(seconds) for state, seconds in rows}


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def oldest_queued_seconds(session: Session) -> float | None:
    """Return how long the oldest queued training job has waited, or None when none waits."""
    age = session.execute(
        select(func.extract("epoch", func.now() - func.min(TrainingJob.requested_at))).where(
            TrainingJob.state == "queued"
        )
    ).scalar_one_or_none()
    return None if age is None else float(age)
