"""Wire schemas shared by the agent and the service (API v1)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tps.bounds import NO_NUL, Count, Flag, Label, NotText, Timestamp, preview
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

MAX_BATCH_RUNS = 1000
MAX_MEASUREMENTS_PER_RUN = 20000
MAX_ERROR_CHARS = 2000
MAX_PRIOR_IDS = 256
# The candidates a host may offer with a prior request: what its providers plan for one problem.
MAX_OFFERED = 1024
# Upper bounds of plausible values: a microsecond latency of 10^12 is eleven days.
MAX_US = 1e12
MAX_MS = 1e9


# Constraints, not Python validators: they run inside pydantic-core, which matters at
# tens of thousands of measurements per second. NaN and infinity are refused.
Latency = Annotated[float, Field(gt=0, le=MAX_US, allow_inf_nan=False, strict=True)]
NonNegative = Annotated[float, Field(ge=0, le=MAX_US, allow_inf_nan=False, strict=True)]
Millis = Annotated[float, Field(ge=0, le=MAX_MS, allow_inf_nan=False, strict=True)]
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False, strict=True)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Telemetry(Strict):
    """A device telemetry snapshot; a field is null where the source cannot read it."""

    source: Label | None = None
    temperature_c: float | None = Field(
        default=None, ge=-100, le=300, allow_inf_nan=False, strict=True
    )
    utilization_pct: Percent | None = None
    mem_bw_util_pct: Percent | None = None
    sm_clock_mhz: float | None = Field(
        default=None, ge=0, le=100_000, allow_inf_nan=False, strict=True
    )
    power_w: float | None = Field(default=None, ge=0, le=100_000, allow_inf_nan=False, strict=True)
    throttle_reasons: list[Label] = Field(default_factory=list, max_length=32)
    thermal_safe: Flag = False
    delayed_ms: Millis = 0.0


# "valid and no error" needs a median: published so that schema-valid data is accepted.
_MEASUREMENT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"required": ["valid"], "properties": {"valid": {"const": False}}},
        {"required": ["error"], "properties": {"error": {"type": "string"}}},
        {"required": ["median_us"], "properties": {"median_us": {"type": "number"}}},
    ]
}


class Measurement(Strict):
    """One candidate on one problem on one host. Latencies are in microseconds."""

    model_config = ConfigDict(json_schema_extra=_MEASUREMENT_SCHEMA)

    candidate: Candidate
    median_us: Latency | None = None
    p10_us: Latency | None = None
    p90_us: Latency | None = None
    std_us: NonNegative | None = None
    samples: Count = 0
    outliers_rejected: Count = 0
    valid: Flag = True
    error: str | None = Field(default=None, max_length=MAX_ERROR_CHARS, pattern=NO_NUL)
    compile_ms: Millis | None = None

    @model_validator(mode="after")
    def _valid_needs_latency(self) -> Measurement:
        if self.valid and self.error is None and self.median_us is None:
            raise ValueError("a valid measurement needs median_us")
        return self


class PriorUse(Strict):
    """Whether a probe was steered by priors, and how well they did."""

    used: Flag = False
    source: Label | None = None
    candidate_ids: list[Label] = Field(default_factory=list, max_length=MAX_PRIOR_IDS)
    winner_rank: Annotated[int, Field(ge=0, le=MAX_MEASUREMENTS_PER_RUN), NotText] | None = None


class ProbeRun(Strict):
    """One problem probed once on one host."""

    run_id: UUID
    host_id: str = Field(min_length=8, max_length=128, pattern=r"^[0-9a-f]+$")
    hardware: HardwareSpec
    problem: ProblemKey
    measurements: list[Measurement] = Field(min_length=1, max_length=MAX_MEASUREMENTS_PER_RUN)
    winner_id: Label | None = None
    budget_ms: Millis = 0.0
    compile_ms: Millis = 0.0
    telemetry: Telemetry | None = None
    priors: PriorUse = Field(default_factory=PriorUse)
    rationale: str | None = Field(default=None, max_length=4000, pattern=NO_NUL)
    agent_version: Label | None = None
    source: Label = "agent"
    created_at: Timestamp = Field(default_factory=lambda: datetime.now(UTC))

    @model_validator(mode="after")
    def _winner_is_measured(self) -> ProbeRun:
        if self.winner_id is not None:
            ids = {m.candidate.id for m in self.measurements}
            if self.winner_id not in ids:
                raise ValueError(
                    f"winner_id {preview(self.winner_id)} is not among the measurements"
                )
        return self


class ProbeRunBatch(Strict):
    """A batch pushed by an agent: all or nothing."""

    runs: list[ProbeRun] = Field(min_length=1, max_length=MAX_BATCH_RUNS)


class IngestedRun(Strict):
    """The ids under which a run's hardware and problem are stored, as later queries name them."""

    run_id: UUID
    hardware_id: str = Field(description="the hardware fingerprint: GET /v1/priors?hardware_id=")
    problem_hash: str = Field(description="the problem's hash: GET /v1/priors?problem=")


class IngestResult(Strict):
    accepted: int
    duplicates: int
    measurements: int
    duplicate_run_ids: list[UUID] = Field(default_factory=list)
    runs: list[IngestedRun] = Field(
        default_factory=list, description="every run of the batch, accepted or duplicate"
    )


PriorSource = Literal["observed", "model", "family", "nearest"]


class PriorRequest(Strict):
    """Ask for ranked candidates for a problem on a piece of hardware.

    `offered`: the candidates this host can run for the problem (what its providers plan,
    cuBLASLt's heuristic list among them). The answer then ranks only these: a shape the
    fleet never measured gets the model's order of the host's own list, not other shapes'
    winners that the host may not be able to run.
    """

    hardware: HardwareSpec
    problem: ProblemKey
    limit: Annotated[int, NotText] = Field(default=8, ge=1, le=256)
    offered: list[Candidate] | None = Field(default=None, min_length=1, max_length=MAX_OFFERED)

    @model_validator(mode="after")
    def _offered_once(self) -> PriorRequest:
        if self.offered is not None:
            seen: set[str] = set()
            for candidate in self.offered:
                if candidate.id in seen:
                    raise ValueError(f"offered: candidate {preview(candidate.id)} is listed twice")
                seen.add(candidate.id)
        return self


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


class PriorBatchRequest(Strict):
    """Ask for the priors of many problems on one piece of hardware (a model's warm start)."""

    hardware: HardwareSpec
    problems: list[ProblemKey] = Field(min_length=1, max_length=256)
    limit: int = Field(default=8, ge=1, le=64)


class PriorBatch(Strict):
    """One prior per problem asked, in the order asked."""

    priors: list[Prior]


class ErrorItem(BaseModel):
    """One bad field: where it is (dotted, as the client spells it), what is wrong."""

    loc: str
    msg: str
    type: str


class ErrorBody(BaseModel):
    """The body of every error answer, whatever its status."""

    detail: str = Field(description="what went wrong, naming the field or limit")
    errors: list[ErrorItem] | None = Field(
        default=None, description="each bad field, for a 422 (at most 20)"
    )


class RetrainAccepted(BaseModel):
    """A queued training job and where to follow it."""

    job_id: UUID
    state: str
    status_url: str


class Job(BaseModel):
    """A training job: its state and, once it ran, its metrics and model version."""

    id: UUID
    state: str
    params: dict[str, Any]
    metrics: dict[str, Any] | None
    error: str | None
    model_version: int | None
    worker: str | None
    requested_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ModelVersion(BaseModel):
    """A registered model, without its artifact."""

    version: int
    ops: list[str]
    status: str
    active: bool
    data_counts: dict[str, Any]
    params: dict[str, Any]
    metrics: dict[str, Any]
    artifact_sha256: str
    artifact_bytes: int
    job_id: UUID | None
    created_at: datetime
    activated_at: datetime | None


class IssuedToken(BaseModel):
    """A new token; the service keeps only its hash, so this is the only time it is shown."""

    org: str
    role: str
    token: str


class TokenInfo(BaseModel):
    """A token as listed: never the token itself, nor its hash."""

    id: int
    org: str
    role: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


class HardwareEntry(BaseModel):
    """A piece of hardware the fleet has pushed runs from."""

    fingerprint: str
    spec: HardwareSpec
    runs: int
    problems: int
    first_seen_at: datetime


class FleetStats(BaseModel):
    """What the service stores, in all and for the caller's organisation."""

    runs: int
    measurements: int
    hardware: int
    problems: int
    candidates: int
    organisations: int
    org_runs: int
