"""SQL of priors: the observed aggregates and the keys they are filed under."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Double, Integer, Select, String, TextClause, bindparam, func, select, text
from sqlalchemy.orm import Session

from services.profiler_api.orm import CandidateRow, CandidateStats, Hardware
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


@dataclass(frozen=True)
class PairLookup:
    """What one round trip knows of a GET /v1/priors: the hardware, the problems, the top."""

    spec: dict[str, Any] | None  # None: no hardware of this fingerprint
    problems: list[tuple[str, str, dict[str, Any]]]  # (hash, canonical, key), at most 2
    observed: list[ObservedCandidate]  # of the one problem matched, fastest first


def observed_candidates(
    session: Session, *, hardware_id: str, problem_id: str, limit: int
) -> list[ObservedCandidate]:
    """Return the candidates with valid observations, fastest geometric-mean median first."""
    params = {"hardware_id": hardware_id, "problem_id": problem_id, "limit": limit}
    return [ObservedCandidate(*row) for row in session.execute(OBSERVED_TOP, params).all()]


def observers(
    session: Session, *, problem_id: str, vendor: str, arch: str, exclude: str, limit: int
) -> list[tuple[str, dict[str, Any]]]:
    """Return (fingerprint, spec) of `vendor`'s hardware, other than `exclude`, that has valid
    observations of the problem: at most `limit`, those of architecture `arch` first, then by
    fingerprint."""
    stats = CandidateStats
    measured = (
        select(stats.hardware_id)
        .where(
            stats.problem_id == problem_id,
            stats.valid_measurements > 0,
            stats.hardware_id != exclude,
        )
        .distinct()
        .subquery()
    )
    rows = session.execute(
        select(Hardware.fingerprint, Hardware.spec)
        .join(measured, measured.c.hardware_id == Hardware.fingerprint)
        .where(Hardware.vendor == vendor)
        .order_by((Hardware.arch == arch).desc(), Hardware.fingerprint)
        .limit(limit)
    ).all()
    return [(fingerprint, spec) for fingerprint, spec in rows]


def lookup_pair(session: Session, *, hardware_id: str, problem: str, limit: int) -> PairLookup:
    """Return the hardware's spec, the problems of this hash or canonical key, and the top.

    One statement: a cache miss of GET /v1/priors costs one round trip, not three. The top
    `limit` observed candidates come only when exactly one problem matches.
    """
    rows = session.execute(
        PAIR_LOOKUP, {"hardware_id": hardware_id, "problem": problem, "limit": limit}
    ).all()
    # Whole JSON documents come as text, read once here rather than once per row.
    spec = json.loads(rows[0].spec) if rows and rows[0].spec is not None else None
    problems: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for row in rows:  # a problem's row repeats for each of its top candidates: read it once
        if row.hash and row.hash not in problems:
            problems[row.hash] = (row.hash, row.canonical, json.loads(row.key))
    observed = [
        ObservedCandidate(
            row.candidate_id,
            row.backend,
            row.params,
            row.runs,
            row.valid_measurements,
            row.samples,
            row.sum_log_median,
            row.sum_sq_log_median,
        )
        for row in rows
        if row.candidate_id is not None and len(problems) == 1
    ]
    return PairLookup(spec=spec, problems=list(problems.values()), observed=observed)


def _observed_top() -> Select[Any]:
    """Return the query of `observed_candidates`, with bound parameters."""
    stats = CandidateStats
    # The pair's rows come off the primary key's (hardware_id, problem_id) prefix and the
    # top `limit` are sorted out of them (0.1 ms for 36 candidates, 2.8 ms for the 11,000 of
    # a full Kernel Tuner space): no index holds the mean, so ingest's updates of the sums
    # touch no index (migration 0007). Then only those are joined to their candidate rows.
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
            stats.hardware_id == bindparam("hardware_id", type_=String),
            stats.problem_id == bindparam("problem_id", type_=String),
            stats.valid_measurements > 0,
        )
        .order_by(mean_log, stats.candidate_id)
        .limit(bindparam("limit", type_=Integer))
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


# Built once: building the statement cost more than running it (0.7 ms a miss).
OBSERVED_TOP = _observed_top()

# The top is the very statement above, per matched problem (LATERAL); a missing hardware
# or problem still gives one row.
PAIR_LOOKUP: TextClause = text(
    """
    SELECT h.spec::text AS spec, p.hash, p.canonical, p.key::text AS key,
           top.candidate_id, c.backend, c.params, top.runs, top.valid_measurements,
           top.samples, top.sum_log_median, top.sum_sq_log_median
    FROM (SELECT 1) AS one
    LEFT JOIN hardware AS h ON h.fingerprint = :hardware_id
    LEFT JOIN LATERAL (
        SELECT problems.hash, problems.canonical, problems.key FROM problems
        WHERE problems.hash = :problem OR problems.canonical = :problem
        LIMIT 2
    ) AS p ON true
    LEFT JOIN LATERAL (
        SELECT s.candidate_id, s.runs, s.valid_measurements, s.samples, s.sum_log_median,
               s.sum_sq_log_median, s.sum_log_median / s.valid_measurements AS mean_log
        FROM candidate_stats AS s
        WHERE s.hardware_id = :hardware_id AND s.problem_id = p.hash
          AND s.valid_measurements > 0
        ORDER BY s.sum_log_median / s.valid_measurements, s.candidate_id
        LIMIT :limit
    ) AS top ON true
    LEFT JOIN candidates AS c ON c.id = top.candidate_id
    ORDER BY p.hash, top.mean_log, top.candidate_id
    """
)


def announce_pairs(conn: psycopg.Connection[Any], pairs: Iterable[Pair]) -> None:
    """Tell every replica, on commit, that the priors of these pairs changed."""
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, encode_pairs(pairs)))


def announce_everything(session: Session) -> None:
    """Tell every replica, on commit, that every prior may have changed (a model switch)."""
    session.execute(select(func.pg_notify(CHANNEL, EVERYTHING)))
