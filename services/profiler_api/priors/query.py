"""What a prior is asked for, and the protocol every backend of priors answers it by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session

from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior

# The bounds of `GET /v1/priors`'s parameters: the router's and the cached path's.
HARDWARE_ID_MAX = 64
PROBLEM_MAX = 512
LIMIT_MAX = 256
DEFAULT_LIMIT = 8


def ids_key(hardware_id: str, problem: str, limit: int) -> tuple[str, str, str, int]:
    """Return the cache key of a question asked by ids (`GET /v1/priors`)."""
    return ("ids", hardware_id, problem, limit)


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


class PriorBackend(Protocol):
    """Rank candidates for a query; an empty prior (with a reason) means 'nothing to say'.

    `name` is the source's name in TPS_PRIOR_SOURCES.
    """

    @property
    def name(self) -> str: ...

    def rank(self, session: Session, query: PriorQuery) -> Prior: ...
