"""Model registry and training jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 12:30:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONB = postgresql.JSONB(astext_type=sa.Text())


def upgrade() -> None:
    op.create_table(
        "model_versions",
        sa.Column("version", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ops", JSONB, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("active", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("data_counts", JSONB, nullable=False),
        sa.Column("params", JSONB, nullable=False),
        sa.Column("metrics", JSONB, nullable=False),
        sa.Column("artifact", sa.LargeBinary(), nullable=False),
        sa.Column("artifact_sha256", sa.String(length=64), nullable=False),
        sa.Column("artifact_bytes", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('candidate', 'active', 'retired', 'rejected')",
            name=op.f("ck_model_versions_status"),
        ),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_model_versions")),
    )
    # At most one active model: a second `active = true` row violates this index.
    op.create_index(
        "uq_model_versions_active",
        "model_versions",
        ["active"],
        unique=True,
        postgresql_where=sa.text("active"),
    )
    op.create_table(
        "training_jobs",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested_by", sa.BigInteger(), nullable=False),
        sa.Column("params", JSONB, nullable=False),
        sa.Column("metrics", JSONB, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("model_version", sa.Integer(), nullable=True),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column(
            "requested_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'succeeded', 'failed', 'rejected')",
            name=op.f("ck_training_jobs_state"),
        ),
        sa.ForeignKeyConstraint(
            ["model_version"],
            ["model_versions.version"],
            name=op.f("fk_training_jobs_model_version_model_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["requested_by"],
            ["organisations.id"],
            name=op.f("fk_training_jobs_requested_by_organisations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_jobs")),
    )
    # The worker's claim query scans only the queued jobs, oldest first.
    op.create_index(
        "ix_training_jobs_queued",
        "training_jobs",
        ["requested_at"],
        unique=False,
        postgresql_where=sa.text("state = 'queued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_training_jobs_queued", table_name="training_jobs")
    op.drop_table("training_jobs")
    op.drop_index("uq_model_versions_active", table_name="model_versions")
    op.drop_table("model_versions")
