"""The observed-priors query: the fastest `limit` candidates, in order, with their rows."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from services.profiler_api.orm import CandidateRow, CandidateStats
from services.profiler_api.priors.repository import observed_candidates
from tests.factories import cublaslt, hardware_spec, unique_problem


def _stats(
    hardware_id: str, problem_id: str, candidate_id: str, *, us: float, valid: int
) -> CandidateStats:
    now = datetime.now(UTC)
    return CandidateStats(
        hardware_id=hardware_id,
        problem_id=problem_id,
        candidate_id=candidate_id,
        runs=valid + 1,
        valid_measurements=valid,
        samples=10 * valid,
        sum_log_median=valid * math.log(us),
        sum_sq_log_median=valid * math.log(us) ** 2,
        first_seen_at=now,
        last_seen_at=now,
    )


def test_observed_candidates_are_the_fastest_by_geometric_mean(db_session: Session) -> None:
    hardware, problem = hardware_spec().fingerprint(), unique_problem().key_hash()
    other_problem = unique_problem().key_hash()
    rng = random.Random(3)
    candidates = [cublaslt(i, stages=i % 5) for i in range(300)]
    latency = {c.id: rng.uniform(10.0, 1000.0) for c in candidates}
    latency[candidates[1].id] = latency[candidates[2].id] = 1.0  # a tie: broken by id
    for i, c in enumerate(candidates):
        db_session.add(CandidateRow(id=c.id, backend=c.backend, params=c.params))
        db_session.add(_stats(hardware, problem, c.id, us=latency[c.id], valid=1 + i % 3))
        # Faster, but on another problem; and measured, but never valid.
        db_session.add(_stats(hardware, other_problem, c.id, us=0.5, valid=1))
    failed = cublaslt(1000)
    db_session.add(CandidateRow(id=failed.id, backend=failed.backend, params=failed.params))
    db_session.add(_stats(hardware, problem, failed.id, us=0.1, valid=0))
    db_session.flush()

    observed = observed_candidates(db_session, hardware_id=hardware, problem_id=problem, limit=8)

    expected = sorted(latency, key=lambda cid: (math.log(latency[cid]), cid))[:8]
    assert [o.candidate_id for o in observed] == expected
    by_id = {c.id: c for c in candidates}
    assert all(o.params == by_id[o.candidate_id].params for o in observed)
    assert all(o.backend == "cublaslt" and o.valid_measurements > 0 for o in observed)


def test_the_top_candidates_come_off_the_rank_index_without_a_sort(db_session: Session) -> None:
    from sqlalchemy import text
    from sqlalchemy.dialects import postgresql

    from services.profiler_api.priors.repository import observed_statement

    hardware, problem = hardware_spec().fingerprint(), unique_problem().key_hash()
    for i in range(500):
        c = cublaslt(i, stages=7)
        db_session.add(CandidateRow(id=c.id, backend=c.backend, params=c.params))
        db_session.add(_stats(hardware, problem, c.id, us=10.0 + i, valid=1 + i % 3))
    db_session.flush()
    db_session.execute(text("ANALYZE candidate_stats"))
    db_session.execute(text("SET LOCAL enable_seqscan = off"))  # a tiny table here
    statement = observed_statement(hardware_id=hardware, problem_id=problem, limit=8)
    sql = statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    plan = "\n".join(row[0] for row in db_session.execute(text(f"EXPLAIN {sql}")).all())
    assert "ix_candidate_stats_rank" in plan, plan
    # The only sort left orders the 8 rows picked, after the LIMIT.
    limit_at = plan.index("Limit")
    assert "Sort" not in plan[limit_at:], plan
