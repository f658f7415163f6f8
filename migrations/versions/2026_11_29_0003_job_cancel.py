"""Training jobs can be cancelled while queued.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 15:10:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = "state IN ('queued', 'running', 'succeeded', 'failed', 'rejected')"
AFTER = "state IN ('queued', 'running', 'succeeded', 'failed', 'rejected', 'cancelled')"


def upgrade() -> None:
    op.drop_constraint(op.f("ck_training_jobs_state"), "training_jobs", type_="check")
    op.create_check_constraint(op.f("ck_training_jobs_state"), "training_jobs", AFTER)


def downgrade() -> None:
    # A cancelled job has no state before this revision: it reads as failed there.
    op.execute(
        "UPDATE training_jobs SET state = 'failed', error = 'cancelled' WHERE state = 'cancelled'"
    )
    op.drop_constraint(op.f("ck_training_jobs_state"), "training_jobs", type_="check")
    op.create_check_constraint(op.f("ck_training_jobs_state"), "training_jobs", BEFORE)
