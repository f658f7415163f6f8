"""Ingest storage inside a rolled-back transaction: the aggregates and their arithmetic."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from services.profiler_api.auth.repository import upsert_organisation
from services.profiler_api.ingest.parsing import parse_batch
from services.profiler_api.ingest.plan import IngestPlan
from services.profiler_api.ingest.service import store
from services.profiler_api.orm import CandidateStats, MeasurementRow, ProbeRunRow
from services.profiler_api.priors.observed import ObservedPriors, observed_confidence
from services.profiler_api.priors.query import PriorQuery
from tests.factories import (
    batch_body,
    cublaslt,
    hardware_spec,
    measurement,
    probe_run,
    unique_problem,
)
from tps.candidate import VENDOR_DEFAULT
from tps.schemas import Measurement


def _store(session: Session, runs: list) -> None:
    org_id = upsert_organisation(session, "test-org")
    plan = IngestPlan.from_batch(parse_batch(batch_body(runs)), org_id=org_id)
    store(session, plan)


def test_aggregates_add_up_across_batches(db_session: Session) -> None:
    hardware, problem = hardware_spec(), unique_problem()
    candidate = cublaslt(3)
    medians = [10.0, 20.0, 40.0]
    for median in medians:
        _store(
            db_session,
            [probe_run(hardware=hardware, problem=problem, latencies=[(candidate, median)])],
        )
    stats = db_session.execute(
        select(CandidateStats).where(CandidateStats.candidate_id == candidate.id)
    ).scalar_one()
    assert (stats.runs, stats.valid_measurements, stats.samples) == (3, 3, 60)
    assert math.isclose(math.exp(stats.sum_log_median / 3), 20.0)
    assert (stats.min_median_us, stats.max_median_us) == (10.0, 40.0)


def test_invalid_measurements_count_as_runs_but_not_latency(db_session: Session) -> None:
    problem = unique_problem()
    run = probe_run(
        problem=problem,
        measurements=[
            measurement(VENDOR_DEFAULT, 30.0),
            measurement(cublaslt(9), 5.0, valid=False, error="nan in output"),
        ],
    )
    _store(db_session, [run])
    stats = db_session.execute(
        select(CandidateStats).where(
            CandidateStats.problem_id == problem.key_hash(),
            CandidateStats.candidate_id == cublaslt(9).id,
        )
    ).scalar_one()
    assert (stats.runs, stats.valid_measurements, stats.min_median_us) == (1, 0, None)
    prior = ObservedPriors().rank(db_session, PriorQuery.of(run.hardware, problem))
    assert [c.candidate_id for c in prior.candidates] == [VENDOR_DEFAULT.id]


def test_a_candidate_measured_twice_in_a_run_counts_one_run(db_session: Session) -> None:
    problem, candidate = unique_problem(), cublaslt(4)
    run = probe_run(
        problem=problem,
        measurements=[
            measurement(candidate, 10.0),
            measurement(candidate, 40.0, samples=7),
            Measurement(candidate=candidate, error="timed out after 3 of 20 samples"),
        ],
    )
    _store(db_session, [run])
    stats = db_session.execute(
        select(CandidateStats).where(
            CandidateStats.problem_id == problem.key_hash(),
            CandidateStats.candidate_id == candidate.id,
        )
    ).scalar_one()
    # Only the two measurements with a median count towards latency.
    assert (stats.runs, stats.valid_measurements, stats.samples) == (1, 2, 27)
    assert math.isclose(stats.sum_log_median, math.log(10.0) + math.log(40.0))
    assert math.isclose(stats.sum_sq_log_median, math.log(10.0) ** 2 + math.log(40.0) ** 2)
    assert (stats.min_median_us, stats.max_median_us) == (10.0, 40.0)
    assert stats.first_seen_at == stats.last_seen_at == run.created_at


def test_resent_runs_add_nothing_to_the_aggregates(db_session: Session) -> None:
    problem = unique_problem()
    first, second = probe_run(problem=problem), probe_run(problem=problem)
    _store(db_session, [first])
    _store(db_session, [first, second])
    runs = db_session.execute(
        select(CandidateStats.runs).where(CandidateStats.problem_id == problem.key_hash())
    ).scalars()
    assert set(runs) == {2}


def _updates(session: Session) -> tuple[int, int]:
    """This transaction's updates of candidate_stats rows so far: all, and HOT ones."""
    row = session.execute(
        text(
            "SELECT pg_stat_get_xact_tuples_updated('candidate_stats'::regclass), "
            "pg_stat_get_xact_tuples_hot_updated('candidate_stats'::regclass)"
        )
    ).one()
    return int(row[0]), int(row[1])


def test_adding_to_the_aggregates_updates_no_index(db_session: Session) -> None:
    hardware, problem = hardware_spec(), unique_problem()
    latencies = [(cublaslt(i), 10.0 + i) for i in range(20)]
    _store(db_session, [probe_run(hardware=hardware, problem=problem, latencies=latencies)])
    updated, hot = _updates(db_session)

    _store(db_session, [probe_run(hardware=hardware, problem=problem, latencies=latencies)])

    after_updated, after_hot = _updates(db_session)
    assert after_updated - updated == len(latencies)  # every aggregate row was added to
    # A HOT update writes no index entry: no index holds a column that ingest changes.
    assert after_hot - hot == len(latencies)
    stats = db_session.execute(
        select(CandidateStats.runs).where(CandidateStats.problem_id == problem.key_hash())
    ).scalars()
    assert set(stats) == {2}


def test_rolled_back_transaction_leaves_nothing(db_session: Session) -> None:
    run = probe_run()
    _store(db_session, [run])
    db_session.rollback()
    count = db_session.execute(
        select(func.count()).select_from(ProbeRunRow).where(ProbeRunRow.run_id == run.run_id)
    ).scalar_one()
    assert count == 0
    assert (
        db_session.execute(
            select(func.count())
            .select_from(MeasurementRow)
            .where(MeasurementRow.run_id == run.run_id)
        ).scalar_one()
        == 0
    )


@pytest.mark.parametrize(
    "n, logs, expected",
    [(1, [math.log(10.0)], 0.5), (9, [math.log(10.0)] * 9, 0.9)],
)
def test_confidence_grows_with_observations(n: int, logs: list[float], expected: float) -> None:
    confidence = observed_confidence(
        valid_measurements=n, sum_log=sum(logs), sum_sq_log=sum(x * x for x in logs)
    )
    assert math.isclose(confidence, expected, rel_tol=1e-3)


def test_confidence_shrinks_with_spread() -> None:
    steady = [math.log(10.0)] * 4
    noisy = [math.log(v) for v in (5.0, 10.0, 20.0, 10.0)]
    assert observed_confidence(
        valid_measurements=4, sum_log=sum(noisy), sum_sq_log=sum(x * x for x in noisy)
    ) < observed_confidence(
        valid_measurements=4, sum_log=sum(steady), sum_sq_log=sum(x * x for x in steady)
    )
