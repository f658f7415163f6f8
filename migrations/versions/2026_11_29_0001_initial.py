"""Initial schema: organisations, tokens, hardware, problems, candidates, runs, aggregates.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:25:43.937508+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "candidate_stats",
        sa.Column("hardware_id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("problem_id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("candidate_id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("valid_measurements", sa.Integer(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("sum_log_median", sa.Double(), nullable=False),
        sa.Column("sum_sq_log_median", sa.Double(), nullable=False),
        sa.Column("min_median_us", sa.Double(), nullable=True),
        sa.Column("max_median_us", sa.Double(), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "hardware_id", "problem_id", "candidate_id", name=op.f("pk_candidate_stats")
        ),
    )
    # Room on each page for HOT updates: ingest updates these rows in place.
    op.execute("ALTER TABLE candidate_stats SET (fillfactor = 70)")
    op.create_table(
        "candidates",
        sa.Column("id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("backend", sa.String(length=64), nullable=False),
        sa.Column("params", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
    )
    op.create_table(
        "hardware",
        sa.Column("fingerprint", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("vendor", sa.String(length=16), nullable=False),
        sa.Column("arch", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("spec", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("fingerprint", name=op.f("pk_hardware")),
    )
    op.create_table(
        "measurements",
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("ordinal", sa.SmallInteger(), nullable=False),
        sa.Column("candidate_id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("median_us", sa.Double(), nullable=True),
        sa.Column("p10_us", sa.Double(), nullable=True),
        sa.Column("p90_us", sa.Double(), nullable=True),
        sa.Column("std_us", sa.Double(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("outliers_rejected", sa.Integer(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("compile_ms", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "ordinal", name=op.f("pk_measurements")),
    )
    op.create_table(
        "organisations",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_organisations")),
        sa.UniqueConstraint("name", name=op.f("uq_organisations_name")),
    )
    op.create_table(
        "problems",
        sa.Column("hash", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("canonical", sa.Text(), nullable=False),
        sa.Column("op", sa.String(length=64), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("dims", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("key", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_problems")),
    )
    op.create_index(op.f("ix_problems_canonical"), "problems", ["canonical"], unique=False)
    op.create_table(
        "probe_runs",
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.String(length=128), nullable=False),
        sa.Column("hardware_id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("problem_id", sa.String(length=64, collation="C"), nullable=False),
        sa.Column("winner_id", sa.String(length=64, collation="C"), nullable=True),
        sa.Column("budget_ms", sa.Double(), nullable=False),
        sa.Column("compile_ms", sa.Double(), nullable=False),
        sa.Column("telemetry", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("priors", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("software", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=True),
        sa.Column("agent_version", sa.String(length=64), nullable=True),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["hardware_id"],
            ["hardware.fingerprint"],
            name=op.f("fk_probe_runs_hardware_id_hardware"),
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organisations.id"], name=op.f("fk_probe_runs_org_id_organisations")
        ),
        sa.ForeignKeyConstraint(
            ["problem_id"], ["problems.hash"], name=op.f("fk_probe_runs_problem_id_problems")
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_probe_runs")),
    )
    op.create_index(
        "ix_probe_runs_hardware_problem", "probe_runs", ["hardware_id", "problem_id"], unique=False
    )
    op.create_index(op.f("ix_probe_runs_org_id"), "probe_runs", ["org_id"], unique=False)
    op.create_table(
        "tokens",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("org_id", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("role IN ('agent', 'admin')", name=op.f("ck_tokens_role")),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organisations.id"],
            name=op.f("fk_tokens_org_id_organisations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_tokens_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("tokens")
    op.drop_index(op.f("ix_probe_runs_org_id"), table_name="probe_runs")
    op.drop_index("ix_probe_runs_hardware_problem", table_name="probe_runs")
    op.drop_table("probe_runs")
    op.drop_index(op.f("ix_problems_canonical"), table_name="problems")
    op.drop_table("problems")
    op.drop_table("organisations")
    op.drop_table("measurements")
    op.drop_table("hardware")
    op.drop_table("candidates")
    op.drop_table("candidate_stats")
