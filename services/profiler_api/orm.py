"""The database schema as SQLAlchemy 2 typed models; Alembic migrations mirror it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Json = dict[str, Any]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {Json: JSONB, datetime: DateTime(timezone=True)}


def _id(*foreign: str, primary_key: bool = False) -> Any:
    """Return a hex-id column; byte-order collation keeps its index and sorts cheap."""
    return mapped_column(
        String(64, collation="C"), *map(ForeignKey, foreign), primary_key=primary_key
    )


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class Organisation(Base):
    __tablename__ = "organisations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = _now()


class Token(Base):
    """A bearer token; only its SHA-256 is stored."""

    __tablename__ = "tokens"
    __table_args__ = (CheckConstraint("role IN ('agent', 'admin', 'operator')", name="role"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    org_id: Mapped[int] = mapped_column(
        ForeignKey("organisations.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = _now()
    revoked_at: Mapped[datetime | None]


class Hardware(Base):
    """A device by its spec; the fingerprint excludes software versions."""

    __tablename__ = "hardware"

    fingerprint: Mapped[str] = _id(primary_key=True)
    vendor: Mapped[str] = mapped_column(String(16))
    arch: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(128))
    spec: Mapped[Json]
    first_seen_at: Mapped[datetime] = _now()


class Problem(Base):
    __tablename__ = "problems"

    hash: Mapped[str] = _id(primary_key=True)
    canonical: Mapped[str] = mapped_column(Text, index=True)
    op: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    dims: Mapped[Json]
    key: Mapped[Json]
    first_seen_at: Mapped[datetime] = _now()


class CandidateRow(Base):
    __tablename__ = "candidates"

    id: Mapped[str] = _id(primary_key=True)
    backend: Mapped[str] = mapped_column(String(64))
    params: Mapped[Json]


class ProbeRunRow(Base):
    """One problem probed once on one host; the client's run id makes ingest idempotent."""

    __tablename__ = "probe_runs"
    __table_args__ = (Index("ix_probe_runs_hardware_problem", "hardware_id", "problem_id"),)

    run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("organisations.id"), index=True)
    host_id: Mapped[str] = mapped_column(String(128))
    hardware_id: Mapped[str] = _id("hardware.fingerprint")
    problem_id: Mapped[str] = _id("problems.hash")
    winner_id: Mapped[str | None] = _id()
    budget_ms: Mapped[float] = mapped_column(Double)
    compile_ms: Mapped[float] = mapped_column(Double)
    telemetry: Mapped[Json | None]
    priors: Mapped[Json]
    software: Mapped[Json]  # the host's software versions and its measured spec fields
    rationale: Mapped[str | None] = mapped_column(Text)
    agent_version: Mapped[str | None] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    received_at: Mapped[datetime] = _now()


class MeasurementRow(Base):
    """One candidate's timing within a probe run. Latencies in microseconds.

    No foreign keys, on purpose: this is the bulk table, and a per-row RI trigger cost
    more than the COPY itself. Ingest writes the run and candidate rows first, in the
    same transaction, so the references hold by construction.

    Partitioned by day of `received_at` (migration 0004), which equals its run's
    `received_at` (both are the ingest transaction's `now()`): a lookup by run names it too,
    so that only one day's partition is searched. Retention drops whole days.
    """

    __tablename__ = "measurements"
    __table_args__ = {"postgresql_partition_by": "RANGE (received_at)"}

    run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    ordinal: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    candidate_id: Mapped[str] = _id()
    median_us: Mapped[float | None] = mapped_column(Double)
    p10_us: Mapped[float | None] = mapped_column(Double)
    p90_us: Mapped[float | None] = mapped_column(Double)
    std_us: Mapped[float | None] = mapped_column(Double)
    samples: Mapped[int] = mapped_column(Integer)
    outliers_rejected: Mapped[int] = mapped_column(Integer)
    valid: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    compile_ms: Mapped[float | None] = mapped_column(Double)
    received_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True, server_default=func.now()
    )


class CandidateStats(Base):
    """Observed aggregate of one candidate on one problem on one hardware; priors read it.

    Latency sums are over log(median) of valid measurements, so exp(sum / valid_measurements) is the
    geometric mean of the valid medians: robust to one slow run, and additive at ingest.
    Like measurements, no foreign keys (ingest writes the parents first); fillfactor 70
    (set in the migration) leaves room for HOT updates, and no index holds a column that
    ingest updates (migration 0007).
    """

    __tablename__ = "candidate_stats"
    __table_args__ = (
        # The hardware that measured a problem (the `compiled` source of priors). Every row,
        # and only columns that never change: an ingest's update of the sums then touches no
        # index (a HOT update); a partial index's predicate would count as a changed column.
        # Priors read a pair's top off the primary key's (hardware_id, problem_id) prefix.
        Index("ix_candidate_stats_problem", "problem_id", "hardware_id"),
    )

    hardware_id: Mapped[str] = _id(primary_key=True)
    problem_id: Mapped[str] = _id(primary_key=True)
    candidate_id: Mapped[str] = _id(primary_key=True)
    runs: Mapped[int] = mapped_column(Integer)
    valid_measurements: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(BigInteger)
    sum_log_median: Mapped[float] = mapped_column(Double)
    sum_sq_log_median: Mapped[float] = mapped_column(Double)
    min_median_us: Mapped[float | None] = mapped_column(Double)
    max_median_us: Mapped[float | None] = mapped_column(Double)
    first_seen_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]


class FleetCounter(Base):
    """Runs and measurements stored, counted at ingest: what /v1/stats reads in constant time.

    Per organisation and slot: a batch adds to the slot of its database backend, so that
    concurrent batches rarely wait on the same row. Organisation 0 holds the negative count
    of the measurements that retention dropped. No foreign key: organisation 0 is no row.
    """

    __tablename__ = "fleet_counters"

    org_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    slot: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    runs: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    measurements: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


# -- model registry and training jobs (migration 0002) -------------------------------------
# One model is active at a time, across every op: an artifact holds a model per op
# (models.bundle.ModelBundle), so activating a version switches them all together. A partial
# unique index on `active` makes a second active row impossible, whatever the replicas do.

JOB_STATES = ("queued", "running", "succeeded", "failed", "rejected", "cancelled")


class ModelVersion(Base):
    """A trained artifact with what it was trained on and how it scored on held-out data."""

    __tablename__ = "model_versions"
    __table_args__ = (
        CheckConstraint("status IN ('candidate', 'active', 'retired', 'rejected')", name="status"),
        Index("uq_model_versions_active", "active", unique=True, postgresql_where=text("active")),
    )

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ops: Mapped[list[str]] = mapped_column(JSONB)
    status: Mapped[str] = mapped_column(String(16))
    active: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    data_counts: Mapped[Json]
    params: Mapped[Json]
    metrics: Mapped[Json]
    artifact: Mapped[bytes] = mapped_column(LargeBinary)
    artifact_sha256: Mapped[str] = mapped_column(String(64))
    artifact_bytes: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    activated_at: Mapped[datetime | None]


class TrainingJob(Base):
    """One retrain request, from queued to succeeded, rejected (by the gate) or failed."""

    __tablename__ = "training_jobs"
    __table_args__ = (
        CheckConstraint(f"state IN {JOB_STATES}", name="state"),
        Index("ix_training_jobs_queued", "requested_at", postgresql_where=text("state = 'queued'")),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    requested_by: Mapped[int] = mapped_column(ForeignKey("organisations.id"))
    params: Mapped[Json]
    metrics: Mapped[Json | None]
    error: Mapped[str | None] = mapped_column(Text)
    model_version: Mapped[int | None] = mapped_column(ForeignKey("model_versions.version"))
    worker: Mapped[str | None] = mapped_column(String(128))
    requested_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
