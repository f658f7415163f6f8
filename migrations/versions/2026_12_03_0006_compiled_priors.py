"""The hardware that measured a problem, off an index: the `compiled` source of priors.

- `ix_candidate_stats_problem`: the aggregates by (problem, hardware), where valid, so that a
  compiled product new to a GPU model finds the hardware that measured it without reading
  every aggregate. `candidate_stats` is distributed by `problem_id` under Citus: the index
  leads with it, and the question is one shard's.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 19:30:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_candidate_stats_problem ON candidate_stats (problem_id, hardware_id) "
        "WHERE valid_measurements > 0"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_candidate_stats_problem")
