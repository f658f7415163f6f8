"""The `observed` source of priors: what the fleet measured on this very hardware."""

from __future__ import annotations

import math

from sqlalchemy.orm import Session

from services.profiler_api.priors import repository
from services.profiler_api.priors.query import PriorQuery
from tps.candidate import Candidate
from tps.schemas import Prior, PriorCandidate


def observed_confidence(*, valid_measurements: int, sum_log: float, sum_sq_log: float) -> float:
    """Return a 0..1 confidence: grows with observations, shrinks with run-to-run spread."""
    n = valid_measurements
    mean = sum_log / n
    spread = math.sqrt(max(0.0, sum_sq_log / n - mean * mean))  # std of log latency
    return round(n / (n + 1) / (1.0 + 10.0 * spread), 4)


class ObservedPriors:
    """Rank by what the fleet measured: geometric mean of the valid medians, fastest first."""

    name = "observed"

    def rank(self, session: Session, query: PriorQuery) -> Prior:
        observed = repository.observed_candidates(
            session,
            hardware_id=query.hardware_fingerprint,
            problem_id=query.problem_hash,
            limit=query.limit,
        )
        if not observed:
            return query.empty(
                f"no valid observations of {query.problem.canonical()} on {query.hardware.name}"
            )
        return observed_prior(
            hardware_fingerprint=query.hardware_fingerprint,
            problem_hash=query.problem_hash,
            canonical=query.problem.canonical(),
            observed=observed,
        )


def observed_prior(
    *,
    hardware_fingerprint: str,
    problem_hash: str,
    canonical: str,
    observed: list[repository.ObservedCandidate],
) -> Prior:
    """Return the prior of these observed candidates (at least one), in their order."""
    candidates = []
    for rank, row in enumerate(observed):
        median = math.exp(row.sum_log_median / row.valid_measurements)
        candidates.append(
            PriorCandidate(
                candidate_id=row.candidate_id,
                candidate=Candidate(backend=row.backend, params=row.params),
                rank=rank,
                predicted_us=round(median, 4),
                median_us=round(median, 4),
                samples=row.samples,
                runs=row.runs,
                source="observed",
                confidence=observed_confidence(
                    valid_measurements=row.valid_measurements,
                    sum_log=row.sum_log_median,
                    sum_sq_log=row.sum_sq_log_median,
                ),
            )
        )
    return Prior(
        hardware_fingerprint=hardware_fingerprint,
        problem_hash=problem_hash,
        canonical=canonical,
        source="observed",
        candidates=candidates,
    )
