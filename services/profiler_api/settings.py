"""The service's settings, read once from TPS_* environment variables."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024
AUTO_ANSWER_PROCESSES = 2
AUTO_ANSWER_MIN_CPUS = 8
MAX_ANSWER_PROCESSES = 64


class Settings(BaseSettings):
    """Everything one service replica needs to know; env prefix `TPS_`."""

    model_config = SettingsConfigDict(env_prefix="TPS_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of Postgres; unset, `tps serve` starts an embedded one",
    )
    read_database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of a read replica that serves priors; unset: database_url",
    )
    max_body_bytes: int = Field(default=32 * MIB, gt=0, description="after decompression")
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="a body still arriving after this is refused (408)"
    )
    max_header_bytes: int = Field(
        default=64 * 1024, ge=1024, description="request line and headers together (else 431)"
    )
    db_pool_size: int = Field(default=8, gt=0)
    db_max_overflow: int = Field(default=8, ge=0)
    db_pool_timeout_s: float = Field(
        default=10.0, gt=0, description="wait for a free connection, then answer 503"
    )
    token_cache_ttl_s: float = Field(
        default=300.0, ge=0, description="how long a replica trusts a token it looked up"
    )
    rate_limit_per_s: float = Field(
        default=1000.0, ge=0, description="requests a second per token and replica (0: no limit)"
    )
    rate_limit_burst: int = Field(default=2000, ge=1)
    max_queued_jobs_per_org: int = Field(default=4, ge=1, description="queued retrains (429)")
    # Observed first: real measurements on this exact hardware beat any prediction. A compiled
    # product (inductor's) new to this hardware: the most similar hardware's measurements.
    prior_sources: list[str] = Field(
        default_factory=lambda: ["observed", "compiled", "model", "family"]
    )
    priors_cache_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "how long a replica keeps a priors answer; 0 disables; unset: 60 s reading the "
            "primary (every change is announced on commit), 5 s reading a replica (its lag)"
        ),
    )
    priors_cache_size: int = Field(default=100_000, ge=0, description="answers kept per replica")
    # The worker processes of one replica compute a model answer once among them when they
    # share a folder; unset, the folder their metrics share when they are several.
    answers_dir: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="a folder where this replica's worker processes share model answers",
    )
    measurement_retention_days: int | None = Field(
        default=None,
        gt=0,
        description="drop raw measurements older than this (whole days); aggregates stay",
    )
    partition_maintenance_s: float = Field(
        default=3600.0, gt=0, description="how often a replica creates and drops day partitions"
    )
    model_check_interval_s: float = Field(
        default=1.0, ge=0, description="how often a replica asks which model is active"
    )
    training_worker: bool = Field(
        default=True, description="run a training worker thread in each service process"
    )
    training_poll_s: float = Field(default=1.0, gt=0, description="queue poll interval")
    training_threads: int = Field(default=2, gt=0, description="LightGBM threads of a job")
    training_stale_s: float = Field(
        default=3600.0, gt=0, description="a running job older than this is claimed again"
    )
    # An ingest-only deployment on the cores that answer priors: a higher niceness lets the
    # priors processes run first while a burst is stored (0 leaves the process as started).
    cpu_nice: int = Field(
        default=0, ge=0, le=19, description="raise this process's CPU niceness to at least this"
    )
    # Batches are validated in processes of their own, so that the interpreter which answers
    # priors never waits on a parse; 0 validates on a worker thread of the API process.
    ingest_parse_processes: int = Field(
        default=1, ge=0, le=64, description="ingest's validating processes, per API process"
    )
    # Their CPU niceness: where the cores are busy, the API processes answer priors first.
    ingest_parse_nice: int = Field(
        default=10, ge=0, le=19, description="CPU niceness of ingest's validating processes"
    )
    # Model answers may be computed in processes that hold a copy of the active model, so that
    # their CPU work never shares the interpreter with the event loop, and a new GPU's
    # questions, which come together, are answered side by side; 0 computes them on a worker
    # thread. `auto`: AUTO_ANSWER_PROCESSES where the replica may use at least
    # AUTO_ANSWER_MIN_CPUS CPUs, else 0 (on a 2-core box the processes made the model p99
    # worse; on 16 cores, 2 of them made it better: BENCHMARKS.md).
    model_answer_processes: (
        Annotated[int, Field(ge=0, le=MAX_ANSWER_PROCESSES)] | Literal["auto"]
    ) = Field(default="auto", description="processes computing model answers, per API process")
    # Ingest allocates many small objects; fewer young-generation collections keep it fast.
    gc_threshold: int = Field(default=50_000, gt=0)

    def answer_processes(self, cpus: int | None = None) -> int:
        """Return the model-answering processes per API process that `model_answer_processes`
        asks for, with `auto` resolved against `cpus` (default: the CPUs this process may use,
        its affinity and a container's CPU quota counted, as joblib counts them).
        """
        if self.model_answer_processes != "auto":
            return int(self.model_answer_processes)
        if cpus is None:
            import joblib

            cpus = int(joblib.cpu_count())
        return AUTO_ANSWER_PROCESSES if cpus >= AUTO_ANSWER_MIN_CPUS else 0

    def priors_cache_ttl_s(self) -> float:
        """The answer cache's time limit: set, or what the read database allows.

        Every write that changes an answer is announced to each replica on commit, so reading
        the primary an answer may be kept a minute (answers built from other pairs, such as
        the nearest GPU's, may lag that long). A read replica may answer from before a change
        it has not replayed yet, after the announcement dropped the old answer: kept 5 s.
        """
        if self.priors_cache_s is not None:
            return self.priors_cache_s
        return 5.0 if self.read_database_url else 60.0
