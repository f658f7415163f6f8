"""Warm start: ask the service which candidates to try first, and record how that went."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from agents.daemon.errors import PriorsError
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior, PriorRequest, PriorUse, ProbeRun

log = logging.getLogger(__name__)

PRIORS_PATH = "/v1/priors"


class PriorsClient:
    """Fetch priors with a short deadline: a slow answer is worth less than a full probe."""

    def __init__(
        self, *, client: httpx.Client, token: str | None, timeout_s: float, top_k: int
    ) -> None:
        self.client = client
        self.token = token
        self.timeout_s = timeout_s
        self.top_k = top_k

    def fetch(self, hardware: HardwareSpec, problem: ProblemKey) -> Prior:
        """Return the service's prior for (hardware, problem); raise PriorsError on any failure."""
        request = PriorRequest(hardware=hardware, problem=problem, limit=self.top_k)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = self.client.post(
                PRIORS_PATH,
                content=request.model_dump_json(),
                headers={**headers, "Content-Type": "application/json"},
                timeout=self.timeout_s,
            )
        except httpx.TimeoutException as exc:
            raise PriorsError(f"no priors within {self.timeout_s * 1000:.0f} ms") from exc
        except httpx.HTTPError as exc:
            raise PriorsError(f"cannot reach the service for priors: {exc!r}") from exc
        if not response.is_success:
            raise PriorsError(f"priors request answered {response.status_code}")
        try:
            return Prior.model_validate_json(response.content)
        except ValueError as exc:
            raise PriorsError("priors answer does not parse") from exc


def shortlist(prior: Prior, *, top_k: int) -> list[Candidate]:
    """Return the prior's top `top_k` candidates in rank order."""
    ranked = sorted(prior.candidates, key=lambda c: c.rank)
    return [c.candidate for c in ranked[:top_k]]


def only_with_default(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Return `candidates` plus vendor-default, which a tuned choice must always beat."""
    if any(c.id == VENDOR_DEFAULT.id for c in candidates):
        return list(candidates)
    return [*candidates, VENDOR_DEFAULT]


def prior_use(prior: Prior, tried: Sequence[Candidate], run: ProbeRun) -> PriorUse:
    """Describe how the priors steered `run`: which were tried and where the winner ranked."""
    ids = [c.id for c in tried]
    winner_rank = ids.index(run.winner_id) if run.winner_id in ids else None
    return PriorUse(used=True, source=prior.source, candidate_ids=ids, winner_rank=winner_rank)
