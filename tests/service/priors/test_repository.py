"""The observed-priors query: the fastest `limit` candidates, in order, with their rows."""

from __future__ import annotations

import math
import random
import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from services.profiler_api.orm import CandidateRow, CandidateStats, Hardware, Problem
from services.profiler_api.priors.repository import lookup_pair, observed_candidates
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


def _plan(session: Session, sql: str, params: dict[str, object]) -> str:
    from sqlalchemy import text

    return "\n".join(row[0] for row in session.execute(text(f"EXPLAIN {sql}"), params).all())


def test_the_top_candidates_come_off_one_index_range_of_the_pair(db_session: Session) -> None:
    from sqlalchemy import text
    from sqlalchemy.dialects import postgresql

    from services.profiler_api.priors.repository import OBSERVED_TOP, PAIR_LOOKUP

    hardware, problem = hardware_spec().fingerprint(), unique_problem().key_hash()
    for i in range(500):
        c = cublaslt(i, stages=7)
        db_session.add(CandidateRow(id=c.id, backend=c.backend, params=c.params))
        db_session.add(_stats(hardware, problem, c.id, us=10.0 + i, valid=1 + i % 3))
    db_session.flush()
    db_session.execute(text("ANALYZE candidate_stats"))
    db_session.execute(text("SET LOCAL enable_seqscan = off"))  # a tiny table here
    bound = OBSERVED_TOP.params(hardware_id=hardware, problem_id=problem, limit=8)
    sql = bound.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    # GET's one round trip, with the same top inside it.
    lookup = {"hardware_id": hardware, "problem": problem, "limit": 8}
    for plan in (_plan(db_session, str(sql), {}), _plan(db_session, PAIR_LOOKUP.text, lookup)):
        # One range of the pair off an index (the primary key's prefix, or the problem
        # index's): neither the table nor the problem's other hardware is read.
        conditions = [line for line in plan.splitlines() if "Index Cond" in line]
        assert any(
            f"(hardware_id)::text = '{hardware}'" in line
            and "(problem_id)::text = " in line  # the hash given, or the one looked up
            for line in conditions
        ), plan
        assert "Seq Scan" not in plan, plan


def test_one_round_trip_finds_the_hardware_the_problem_and_the_same_top(
    db_session: Session,
) -> None:
    spec = hardware_spec(name=f"NVIDIA H200 {uuid.uuid4().hex[:8]}")  # a row of its own
    hardware, key = spec.fingerprint(), unique_problem()
    problem = key.key_hash()
    db_session.add(
        Hardware(
            fingerprint=hardware,
            vendor=spec.vendor,
            arch=spec.arch,
            name=spec.name,
            spec=spec.model_dump(mode="json"),
        )
    )
    db_session.add(
        Problem(
            hash=problem,
            canonical=key.canonical(),
            op=key.op,
            dtype=key.dtype,
            dims=key.model_dump(mode="json")["dims"],
            key=key.model_dump(mode="json"),
        )
    )
    for i in range(20):
        c = cublaslt(i, stages=3)
        db_session.add(CandidateRow(id=c.id, backend=c.backend, params=c.params))
        db_session.add(_stats(hardware, problem, c.id, us=100.0 - i, valid=1 + i % 2))
    db_session.flush()

    top = observed_candidates(db_session, hardware_id=hardware, problem_id=problem, limit=5)
    by_hash = lookup_pair(db_session, hardware_id=hardware, problem=problem, limit=5)
    by_canonical = lookup_pair(db_session, hardware_id=hardware, problem=key.canonical(), limit=5)
    for found in (by_hash, by_canonical):
        assert found.spec == spec.model_dump(mode="json")
        assert found.problems == [(problem, key.canonical(), key.model_dump(mode="json"))]
        assert found.observed == top
    assert len(top) == 5 and [o.candidate_id for o in top] == [
        cublaslt(i, stages=3).id for i in (19, 18, 17, 16, 15)
    ]

    unknown_hardware = lookup_pair(db_session, hardware_id="f" * 16, problem=problem, limit=5)
    assert unknown_hardware.spec is None and unknown_hardware.observed == []
    unknown_problem = lookup_pair(db_session, hardware_id=hardware, problem="0" * 16, limit=5)
    assert unknown_problem.spec is not None
    assert unknown_problem.problems == [] and unknown_problem.observed == []
