"""What a prior is asked for, and the protocol every backend of priors answers it by."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from tps.candidate import VENDOR_DEFAULT, Candidate
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
    """What a caller asks for: a problem on a piece of hardware, and how many candidates;
    with `offered`, ranked among those candidates only (what the host can run)."""

    hardware: HardwareSpec
    hardware_fingerprint: str
    problem: ProblemKey
    problem_hash: str
    limit: int = 8
    offered: tuple[Candidate, ...] | None = None
    # A digest of the offered candidates' ids (in any order): part of every answer's key.
    offered_key: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.offered is not None and self.offered_key is None:
            ids = sorted(c.id for c in self.offered)
            digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
            object.__setattr__(self, "offered_key", digest)

    @classmethod
    def of(
        cls,
        hardware: HardwareSpec,
        problem: ProblemKey,
        *,
        limit: int = 8,
        offered: Sequence[Candidate] | None = None,
    ) -> PriorQuery:
        return cls(
            hardware=hardware,
            hardware_fingerprint=hardware.fingerprint(),
            problem=problem,
            problem_hash=problem.key_hash(),
            limit=limit,
            offered=tuple(offered) if offered is not None else None,
        )

    def among_offered(self, prior: Prior) -> Prior:
        """Return `prior` with only the offered candidates (and the vendor default, which
        every host runs), ranked again from 0 (all of them without an offer); empty, with
        the reason, where it keeps none."""
        if self.offered is None or not prior.candidates:
            return prior
        ids = {c.id for c in self.offered} | {VENDOR_DEFAULT.id}
        kept = [c for c in prior.candidates if c.candidate_id in ids]
        if len(kept) == len(prior.candidates):
            return prior
        if not kept:
            return self.empty(
                f"none of its {len(prior.candidates)} candidates is among the "
                f"{len(self.offered)} offered"
            )
        ranked = [c.model_copy(update={"rank": i}) for i, c in enumerate(kept)]
        return prior.model_copy(update={"candidates": ranked})

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
