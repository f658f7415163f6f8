"""Wire schemas shared by the agent and the service (API v1)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

MAX_BATCH_RUNS = 1000
MAX_MEASUREMENTS_PER_RUN = 20000


# Constraints, not Python validators: they run inside pydantic-core, which matters at
# tens of thousands of measurements per second. NaN and infinity are refused.
Latency = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Telemetry(Strict):
    """A device telemetry snapshot; a field is null where the source cannot read it."""

    source: str | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    mem_bw_util_pct: float | None = None
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    thermal_safe: bool = False
    delayed_ms: NonNegative = 0.0


class Measurement(Strict):
    """One candidate on one problem on one host. Latencies are in microseconds."""

    candidate: Candidate
    median_us: Latency | None = None
    p10_us: Latency | None = None
    p90_us: Latency | None = None
    std_us: NonNegative | None = None
    samples: int = Field(default=0, ge=0)
    outliers_rejected: int = Field(default=0, ge=0)
    valid: bool = True
    error: str | None = Field(default=None, max_length=2000)
    compile_ms: NonNegative | None = None

    @model_validator(mode="after")
    def _valid_needs_latency(self) -> Measurement:
        if self.valid and self.error is None and self.median_us is None:
            raise ValueError("a valid measurement needs median_us")
        return self


class PriorUse(Strict):
    """Whether a probe was steered by priors, and how well they did."""

    used: bool = False
    source: str | None = None
    candidate_ids: list[str] = Field(default_factory=list)
    winner_rank: int | None = Field(default=None, ge=0)


class ProbeRun(Strict):
    """One problem probed once on one host."""

    run_id: UUID
    host_id: str = Field(min_length=8, max_length=128, pattern=r"^[0-9a-f]+$")
    hardware: HardwareSpec
    problem: ProblemKey
    measurements: list[Measurement] = Field(min_length=1, max_length=MAX_MEASUREMENTS_PER_RUN)
    winner_id: str | None = None
    budget_ms: NonNegative = 0.0
    compile_ms: NonNegative = 0.0
    telemetry: Telemetry | None = None
    priors: PriorUse = Field(default_factory=PriorUse)
    rationale: str | None = Field(default=None, max_length=4000)
    agent_version: str | None = Field(default=None, max_length=64)
    source: str = Field(default="agent", max_length=64)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @model_validator(mode="after")
    def _winner_is_measured(self) -> ProbeRun:
        if self.winner_id is not None:
            ids = {m.candidate.id for m in self.measurements}
            if self.winner_id not in ids:
                raise ValueError(f"winner_id {self.winner_id!r} is not among the measurements")
        return self


class ProbeRunBatch(Strict):
    """A batch pushed by an agent: all or nothing."""

    runs: list[ProbeRun] = Field(min_length=1, max_length=MAX_BATCH_RUNS)


class IngestResult(Strict):
    accepted: int
    duplicates: int
    measurements: int
    duplicate_run_ids: list[UUID] = Field(default_factory=list)


PriorSource = Literal["observed", "model", "family", "nearest"]


class PriorRequest(Strict):
    """Ask for ranked candidates for a problem on a piece of hardware."""

    hardware: HardwareSpec
    problem: ProblemKey
    limit: int = Field(default=8, ge=1, le=256)


class PriorCandidate(Strict):
    candidate_id: str
    candidate: Candidate
    rank: int
    predicted_us: float | None = None
    median_us: float | None = None
    samples: int = 0
    runs: int = 0
    source: PriorSource
    # The probability that this candidate is within 3% of the best (calibrated out of fold).
    confidence: float = Field(ge=0.0, le=1.0)


class Prior(Strict):
    """A ranked candidate list for (hardware, problem)."""

    hardware_fingerprint: str
    problem_hash: str
    canonical: str
    source: PriorSource | None = None
    candidates: list[PriorCandidate] = Field(default_factory=list)
    reason: str | None = None
    # Why the candidates are in their order, when it is not the order of predicted_us.
    rationale: str | None = None
