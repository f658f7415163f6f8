"""Fleet warm start: one request for the observed winners of a program's problems.

A host that meets a problem for the first time asks the service, once per model, for
what the fleet measured on the same hardware. The answers become cache entries (source
"fleet") that the runtime admits like any other: validated and timed head to head on
this host, never trusted blind. A fleet tunes a (GPU model, problem) once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from agents.cache import CacheEntry
from agents.errors import AgentError
from client import ClientError, ServiceClient
from tps.candidate import VENDOR_DEFAULT
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior

log = logging.getLogger("agents.runtime")


class FleetError(AgentError):
    """The service could not answer a warm start (the runtime then runs the defaults)."""


class FleetPriors:
    """Ask the service for observed priors of many problems at once."""

    def __init__(
        self, *, client: httpx.Client, token: str | None, timeout_s: float = 5.0, margin: float
    ) -> None:
        self.service = ServiceClient(client, token=token)
        self.timeout_s = timeout_s
        self.margin = margin

    def fetch(self, hardware: HardwareSpec, problems: Sequence[ProblemKey]) -> list[Prior]:
        """Return the service's priors for `problems` on `hardware`, in their order."""
        try:
            return self.service.priors(hardware, problems, limit=8, timeout=self.timeout_s)
        except ClientError as exc:
            raise FleetError(f"priors batch failed: {exc}") from exc

    def entries(
        self, hardware: HardwareSpec, problems: Sequence[ProblemKey], priors: Sequence[Prior]
    ) -> list[CacheEntry]:
        """Turn observed priors into cache entries: the fleet's fastest, if it beat the default.

        A fleet winner within the margin of the default's fleet median is a near tie: the
        entry then names the default, so no host spends admission time on it.
        """
        entries = []
        for prior, problem in zip(priors, problems, strict=True):
            if prior.source != "observed" or not prior.candidates:
                continue
            ranked = sorted(prior.candidates, key=lambda c: c.rank)
            best = ranked[0]
            default = next((c for c in ranked if c.candidate_id == VENDOR_DEFAULT.id), None)
            winner = best.candidate
            if default is not None and best.median_us and default.median_us:
                if best.median_us > default.median_us * (1 - self.margin):
                    winner = VENDOR_DEFAULT
            entries.append(
                CacheEntry(
                    problem=problem,
                    hardware_fingerprint=hardware.fingerprint(),
                    software_key=hardware.software_key(),
                    winner=winner,
                    median_us=best.median_us,
                    default_us=default.median_us if default is not None else None,
                    source="fleet",
                    torch_version=hardware.torch_version,
                    blas_version=hardware.blas_version,
                )
            )
        return entries
