"""SQL of priors: the observed aggregates and the keys they are filed under."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Double, Select, func, select
from sqlalchemy.orm import Session

from services.profiler_api.orm import CandidateRow, CandidateStats, Hardware, Problem
from services.profiler_api.priors.cache import CHANNEL, EVERYTHING, Pair, encode_pairs


@dataclass(frozen=True)
class ObservedCandidate:
    candidate_id: str
    backend: str
    params: dict[str, Any]
    runs: int
    valid_measurements: int
    samples: int
    sum_log_median: float
    sum_sq_log_median: float


def hardware_spec(session: Session, fingerprint: str) -> dict[str, Any] | None:
    """Return the stored spec of a hardware fingerprint, or None."""
    return session.execute(
        select(Hardware.spec).where(Hardware.fingerprint == fingerprint)
    ).scalar_one_or_none()


def problems_matching(
    session: Session, *, hash_or_canonical: str
) -> list[tuple[str, dict[str, Any]]]:
    """Return (hash, key) of the problems with this hash or canonical string."""
    rows = session.execute(
        select(Problem.hash, Problem.key)
        .where((Problem.hash == hash_or_canonical) | (Problem.canonical == hash_or_canonical))
        .limit(2)
    ).all()
    return [(row[0], row[1]) for row in rows]


def observed_candidates(
    session: Session, *, hardware_id: str, problem_id: str, limit: int
) -> list[ObservedCandidate]:
    """Return the candidates with valid observations, fastest geometric-mean median first."""
    statement = observed_statement(hardware_id=hardware_id, problem_id=problem_id, limit=limit)
    return [ObservedCandidate(*row) for row in session.execute(statement).all()]


def observed_statement(*, hardware_id: str, problem_id: str, limit: int) -> Select[Any]:
    """Return the query of `observed_candidates`."""
    stats = CandidateStats
    # The very expression of ix_candidate_stats_rank, so that the top `limit` come off the
    # index in order instead of sorting every candidate of the pair (11 000 on a full Kernel
    # Tuner space). Then only those are joined to their candidate rows.
    # (`/` as SQLAlchemy writes it would cast the count to numeric: another expression.)
    mean_log = (stats.sum_log_median.op("/", return_type=Double)(stats.valid_measurements)).label(
        "mean_log"
    )
    top = (
        select(
            stats.candidate_id,
            stats.runs,
            stats.valid_measurements,
            stats.samples,
            stats.sum_log_median,
            stats.sum_sq_log_median,
            mean_log,
        )
        .where(
            stats.hardware_id == hardware_id,
            stats.problem_id == problem_id,
            stats.valid_measurements > 0,
        )
        .order_by(mean_log, stats.candidate_id)
        .limit(limit)
        .subquery()
    )
    return (
        select(
            top.c.candidate_id,
            CandidateRow.backend,
            CandidateRow.params,
            top.c.runs,
            top.c.valid_measurements,
            top.c.samples,
            top.c.sum_log_median,
            top.c.sum_sq_log_median,
        )
        .join(CandidateRow, CandidateRow.id == top.c.candidate_id)
        .order_by(top.c.mean_log, top.c.candidate_id)
    )


def announce_pairs(conn: psycopg.Connection[Any], pairs: Iterable[Pair]) -> None:
    """Tell every replica, on commit, that the priors of these pairs changed."""
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, encode_pairs(pairs)))


def announce_everything(session: Session) -> None:
    """Tell every replica, on commit, that every prior may have changed (a model switch)."""
    session.execute(select(func.pg_notify(CHANNEL, EVERYTHING)))
