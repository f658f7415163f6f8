"""Read a stored probe run back, as the ProbeRun its agent sent."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from services.profiler_api.auth.service import Principal
from services.profiler_api.errors import Gone, NotFound
from services.profiler_api.ingest.plan import org_run_id
from services.profiler_api.orm import CandidateRow, Hardware, MeasurementRow, ProbeRunRow, Problem
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Measurement, PriorUse, ProbeRun, Telemetry


def load_run(session: Session, run_id: uuid.UUID, *, principal: Principal) -> ProbeRun:
    """Return run `run_id`; raw runs belong to their organisation (operators see all)."""
    row = _find(session, run_id)
    if row is not None and not principal.fleet_wide and row[0].org_id != principal.org_id:
        row = _find(session, org_run_id(principal.org_id, run_id))  # stored under its alias
    if row is None or (not principal.fleet_wide and row[0].org_id != principal.org_id):
        raise NotFound(
            f"run_id: no probe run {run_id} visible to organisation {principal.org_name}"
        )
    run, spec, key = row
    stored_id = run.run_id
    measured = session.execute(
        select(MeasurementRow, CandidateRow.backend, CandidateRow.params)
        .join(CandidateRow, CandidateRow.id == MeasurementRow.candidate_id)
        .where(MeasurementRow.run_id == stored_id, MeasurementRow.received_at == run.received_at)
        .order_by(MeasurementRow.ordinal)
    ).all()
    if not measured:
        raise Gone(
            f"run_id: the measurements of probe run {run_id} (received {run.received_at:%Y-%m-%d})"
            " were dropped by the retention of raw measurements; its aggregates remain"
        )
    return ProbeRun(
        run_id=run_id,
        host_id=run.host_id,
        hardware=HardwareSpec.model_validate({**spec, **run.software}),
        problem=ProblemKey.model_validate(key),
        measurements=[
            Measurement(
                candidate=Candidate(backend=backend, params=params),
                median_us=m.median_us,
                p10_us=m.p10_us,
                p90_us=m.p90_us,
                std_us=m.std_us,
                samples=m.samples,
                outliers_rejected=m.outliers_rejected,
                valid=m.valid,
                error=m.error,
                compile_ms=m.compile_ms,
            )
            for m, backend, params in measured
        ],
        winner_id=run.winner_id,
        budget_ms=run.budget_ms,
        compile_ms=run.compile_ms,
        telemetry=Telemetry.model_validate(run.telemetry) if run.telemetry else None,
        priors=PriorUse.model_validate(run.priors),
        rationale=run.rationale,
        agent_version=run.agent_version,
        source=run.source,
        created_at=run.created_at,
    )


def _find(
    session: Session, run_id: uuid.UUID
) -> Row[ProbeRunRow, dict[str, Any], dict[str, Any]] | None:
    return session.execute(
        select(ProbeRunRow, Hardware.spec, Problem.key)
        .join(Hardware, Hardware.fingerprint == ProbeRunRow.hardware_id)
        .join(Problem, Problem.hash == ProbeRunRow.problem_id)
        .where(ProbeRunRow.run_id == run_id)
    ).first()
