"""Warm start: ask the service which candidates to try first, and record how that went."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from agents.daemon.errors import PriorsError
from client import ClientError, ServiceClient, ServiceTimeout
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior, PriorUse, ProbeRun

log = logging.getLogger(__name__)


class PriorsClient:
    """Fetch priors with a short deadline: a slow answer is worth less than a full probe."""

    def __init__(
        self, *, client: httpx.Client, token: str | None, timeout_s: float, top_k: int
    ) -> None:
        self.service = ServiceClient(client, token=token)
        self.timeout_s = timeout_s
        self.top_k = top_k

    def fetch(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        *,
        offered: Sequence[Candidate] | None = None,
    ) -> Prior:
        """Return the service's prior for (hardware, problem), among `offered` where given;
        raise PriorsError on any failure."""
        try:
            return self.service.prior(
                hardware, problem, limit=self.top_k, timeout=self.timeout_s, offered=offered
            )
        except ServiceTimeout as exc:
            raise PriorsError(f"no priors within {self.timeout_s * 1000:.0f} ms") from exc
        except ClientError as exc:
            raise PriorsError(f"priors request failed: {exc}") from exc


def shortlist(prior: Prior, *, top_k: int) -> list[Candidate]:
    """Return the prior's top `top_k` candidates in rank order."""
    ranked = sorted(prior.candidates, key=lambda c: c.rank)
    return [c.candidate for c in ranked[:top_k]]


def prior_use(prior: Prior, tried: Sequence[Candidate], run: ProbeRun) -> PriorUse:
    """Describe how the priors steered `run`: which were tried and where the winner ranked."""
    ids = [c.id for c in tried]
    winner_rank = ids.index(run.winner_id) if run.winner_id in ids else None
    return PriorUse(used=True, source=prior.source, candidate_ids=ids, winner_rank=winner_rank)
