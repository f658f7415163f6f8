"""Where priors come from: sources behind one small protocol, chosen by name.

The observed aggregates are the first source. A model-based ranker (issue 5) registers
itself with `register_prior_source("model", factory)` and is named in
`TPS_PRIOR_SOURCES`; the endpoint does not change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session

from services.profiler_api.priors import repository
from services.profiler_api.settings import Settings
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior, PriorCandidate


@dataclass(frozen=True)
class PriorQuery:
    """What a caller asks for: a problem on a piece of hardware, and how many candidates."""

    hardware: HardwareSpec
    hardware_fingerprint: str
    problem: ProblemKey
    problem_hash: str
    limit: int = 8

    @classmethod
    def of(cls, hardware: HardwareSpec, problem: ProblemKey, *, limit: int = 8) -> PriorQuery:
        return cls(
            hardware=hardware,
            hardware_fingerprint=hardware.fingerprint(),
            problem=problem,
            problem_hash=problem.key_hash(),
            limit=limit,
        )

    def empty(self, reason: str) -> Prior:
        """Return a prior with no candidates and the reason why."""
        return Prior(
            hardware_fingerprint=self.hardware_fingerprint,
            problem_hash=self.problem_hash,
            canonical=self.problem.canonical(),
            reason=reason,
        )


class PriorSource(Protocol):
    """Rank candidates for a query; an empty prior (with a reason) means 'nothing to say'."""

    name: str

    def rank(self, session: Session, query: PriorQuery) -> Prior: ...


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
        prior = query.empty("")
        return prior.model_copy(
            update={"source": "observed", "candidates": candidates, "reason": None}
        )


PriorSourceFactory = Callable[[Settings], PriorSource]

PRIOR_SOURCES: dict[str, PriorSourceFactory] = {"observed": lambda _settings: ObservedPriors()}


def register_prior_source(name: str, factory: PriorSourceFactory) -> None:
    """Make a prior source available to `TPS_PRIOR_SOURCES` under `name`."""
    PRIOR_SOURCES[name] = factory


def build_prior_sources(settings: Settings) -> list[PriorSource]:
    """Instantiate the sources named in the settings, in order of preference."""
    unknown = [name for name in settings.prior_sources if name not in PRIOR_SOURCES]
    if unknown:
        raise ValueError(f"unknown prior sources {unknown}; known: {sorted(PRIOR_SOURCES)}")
    return [PRIOR_SOURCES[name](settings) for name in settings.prior_sources]
