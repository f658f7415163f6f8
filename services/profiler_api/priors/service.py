"""Answer a prior query from the first source that has candidates."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy.orm import Session

from services.profiler_api.errors import NotFound, Unprocessable
from services.profiler_api.priors import repository
from services.profiler_api.priors.sources import PriorQuery, PriorSource
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior

_HASH = re.compile(r"^[0-9a-f]{16}$")


class PriorService:
    """Ask each source in turn; the first non-empty answer wins."""

    def __init__(self, sources: Sequence[PriorSource]) -> None:
        self.sources = list(sources)

    def prior(
        self, session: Session, query: PriorQuery, *, only: frozenset[str] | None = None
    ) -> Prior:
        """Return ranked candidates for `query`, or an empty prior with every source's reason.

        With `only`, ask just the sources of those names (a warm start wants measurements).
        """
        reasons = []
        for source in self.sources:
            if only is not None and source.name not in only:
                continue
            prior = source.rank(session, query)
            if prior.candidates:
                return prior
            reasons.append(f"{source.name}: {prior.reason}")
        return query.empty("; ".join(reasons) or "no prior sources configured")

    def prior_by_ids(
        self, session: Session, *, hardware_id: str, problem: str, limit: int
    ) -> Prior:
        """Return the prior for a known hardware fingerprint and a problem hash or canonical key."""
        spec = repository.hardware_spec(session, hardware_id)
        if spec is None:
            raise NotFound(
                f"hardware_id: no hardware with fingerprint {hardware_id!r}; "
                "POST /v1/priors with the full spec instead"
            )
        hardware = HardwareSpec.model_validate(spec)
        matches = repository.problems_matching(session, hash_or_canonical=problem)
        if len(matches) > 1:
            raise Unprocessable(f"problem: {problem!r} names several problems; pass its hash")
        if not matches:
            return Prior(
                hardware_fingerprint=hardware_id,
                problem_hash=problem if _HASH.match(problem) else "",
                canonical="" if _HASH.match(problem) else problem,
                reason=f"problem: no observations of {problem!r} on any hardware",
            )
        problem_hash, key = matches[0]
        query = PriorQuery(
            hardware=hardware,
            hardware_fingerprint=hardware_id,
            problem=ProblemKey.model_validate(key),
            problem_hash=problem_hash,
            limit=limit,
        )
        return self.prior(session, query)
