"""Ingest: store a validated batch of probe runs, all or nothing."""

from __future__ import annotations

import time

from sqlalchemy.orm import Session

from services.profiler_api.fleet.repository import count_ingested
from services.profiler_api.ingest import repository
from services.profiler_api.ingest.parsing import ParsedBatch
from services.profiler_api.ingest.plan import IngestPlan, org_run_id
from services.profiler_api.metrics import ServiceMetrics
from services.profiler_api.priors.repository import announce_pairs
from tps.schemas import IngestedRun, IngestResult


def store(session: Session, plan: IngestPlan) -> IngestResult:
    """Write a planned batch in the session's transaction; the caller commits."""
    conn = repository.raw_connection(session)
    repository.upsert_hardware(conn, sorted(plan.hardware.values()))
    repository.upsert_problems(conn, sorted(plan.problems.values()))
    repository.upsert_candidates(conn, sorted(plan.candidates.values()))
    accepted = repository.insert_runs(conn, plan.run_rows())
    if accepted:
        repository.copy_measurements(conn, plan.measurement_rows(accepted))
    measurements = plan.measurement_count(accepted)
    stored = set(accepted)
    missed = [run_id for run_id in plan.runs if run_id not in accepted]
    foreign = repository.runs_of_other_orgs(conn, missed, org_id=plan.org_id) if missed else []
    if foreign:
        aliased = plan.aliased(foreign)
        accepted_aliases = repository.insert_runs(conn, aliased.run_rows())
        if accepted_aliases:
            repository.copy_measurements(conn, aliased.measurement_rows(accepted_aliases))
            measurements += aliased.measurement_count(accepted_aliases)
            stored |= accepted_aliases
            accepted |= {
                run_id for run_id in foreign if org_run_id(plan.org_id, run_id) in accepted_aliases
            }
    if stored:
        repository.add_stats(conn, stored)
        announce_pairs(conn, (plan.runs[run_id].row[3:5] for run_id in accepted))
    duplicates = [run_id for run_id in plan.runs if run_id not in accepted] + plan.repeated
    if accepted:
        # Last, so that the counter row is locked for the shortest time before the commit.
        count_ingested(conn, org_id=plan.org_id, runs=len(accepted), measurements=measurements)
    return IngestResult(
        accepted=len(accepted),
        duplicates=len(duplicates),
        measurements=measurements,
        duplicate_run_ids=duplicates,
        runs=[
            IngestedRun(
                run_id=run_id, hardware_id=planned.hardware_id, problem_hash=planned.problem_hash
            )
            for run_id, planned in plan.runs.items()
        ],
    )


def store_parsed(session: Session, parsed: ParsedBatch, *, metrics: ServiceMetrics) -> IngestResult:
    """Store a batch planned by `ParsePool.plan` and commit it."""
    started = time.perf_counter()
    result = store(session, parsed.plan)
    # Commit here rather than in the session dependency: concurrent batches wait on this
    # batch's aggregate rows, and the way back through the event loop takes several GIL
    # hand-offs.
    session.commit()
    metrics.ingest_phase.labels("parse").observe(parsed.parse_s)
    metrics.ingest_phase.labels("write").observe(time.perf_counter() - started)
    return result
