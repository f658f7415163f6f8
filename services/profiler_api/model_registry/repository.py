"""SQL of the model registry: versions, their artifacts, and which one is active."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from services.profiler_api.orm import ModelVersion
from services.profiler_api.priors.repository import announce_everything

# Serialises activations across replicas: the partial unique index would refuse a race,
# the lock makes the loser wait instead of failing.
ACTIVATION_LOCK = 0x7470_735F_6D6F_64  # "tps_mod"

SUMMARY_COLUMNS = (
    ModelVersion.version,
    ModelVersion.ops,
    ModelVersion.status,
    ModelVersion.active,
    ModelVersion.data_counts,
    ModelVersion.params,
    ModelVersion.metrics,
    ModelVersion.artifact_sha256,
    ModelVersion.artifact_bytes,
    ModelVersion.job_id,
    ModelVersion.created_at,
    ModelVersion.activated_at,
)


def active_version(session: Session) -> int | None:
    """Return the active model's version, or None (one index lookup)."""
    return session.execute(
        select(ModelVersion.version).where(ModelVersion.active)
    ).scalar_one_or_none()


def artifact_of(session: Session, version: int) -> tuple[bytes, str] | None:
    """Return (artifact, sha256) of a version, or None."""
    row = session.execute(
        select(ModelVersion.artifact, ModelVersion.artifact_sha256).where(
            ModelVersion.version == version
        )
    ).one_or_none()
    return (bytes(row[0]), row[1]) if row else None


def add_version(
    session: Session,
    *,
    ops: list[str],
    data_counts: dict[str, Any],
    params: dict[str, Any],
    metrics: dict[str, Any],
    artifact: bytes,
    sha256: str,
    job_id: uuid.UUID | None,
) -> int:
    """Store a trained artifact as a new, inactive version and return its number."""
    row = ModelVersion(
        ops=ops,
        status="candidate",
        active=False,
        data_counts=data_counts,
        params=params,
        metrics=metrics,
        artifact=artifact,
        artifact_sha256=sha256,
        artifact_bytes=len(artifact),
        job_id=job_id,
    )
    session.add(row)
    session.flush()
    return row.version


def activate(session: Session, version: int) -> bool:
    """Make `version` the only active model; return False when there is no such version."""
    session.execute(select(func.pg_advisory_xact_lock(ACTIVATION_LOCK)))
    exists = session.execute(
        select(ModelVersion.version).where(ModelVersion.version == version).with_for_update()
    ).scalar_one_or_none()
    if exists is None:
        return False
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.active, ModelVersion.version != version)
        .values(active=False, status="retired")
    )
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.version == version)
        .values(active=True, status="active", activated_at=func.now())
    )
    announce_everything(session)
    return True


def list_versions(session: Session, *, limit: int, offset: int) -> list[dict[str, Any]]:
    """Return versions newest first, without their artifacts."""
    rows = session.execute(
        select(*SUMMARY_COLUMNS).order_by(ModelVersion.version.desc()).limit(limit).offset(offset)
    ).all()
    return [row._asdict() for row in rows]


def get_version(session: Session, version: int) -> dict[str, Any] | None:
    """Return one version without its artifact, or None."""
    row = session.execute(
        select(*SUMMARY_COLUMNS).where(ModelVersion.version == version)
    ).one_or_none()
    return row._asdict() if row else None
