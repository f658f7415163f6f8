"""Aggregate updates that touch no index: every ingest batch's upsert is a HOT update.

Each batch adds to one `candidate_stats` row per (hardware, problem, candidate) it measured.
An update can stay in its heap page without new index entries (a HOT update, which the
table's fillfactor of 70 leaves room for) only if no indexed column changes, and columns in
an index's expression or predicate count. Two indexes blocked every such update:

- `ix_candidate_stats_rank` ordered a pair by `sum_log_median / valid_measurements`, which
  every update changes;
- `ix_candidate_stats_problem` held only rows `WHERE valid_measurements > 0`.

So each upsert wrote a new entry in all three indexes. Now the observed top of a pair comes
off the primary key's (hardware_id, problem_id) prefix and is sorted there (0.1 ms for a
pair of 36 candidates, 2.8 ms for 11,000; priors answers are cached), and the index of the
hardware that measured a problem holds every row. Measured: `BENCHMARKS.md`, "Aggregate
updates that touch no index".

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 21:50:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP INDEX ix_candidate_stats_rank")
    op.execute("DROP INDEX ix_candidate_stats_problem")
    op.execute(
        "CREATE INDEX ix_candidate_stats_problem ON candidate_stats (problem_id, hardware_id)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_candidate_stats_problem")
    op.execute(
        "CREATE INDEX ix_candidate_stats_problem ON candidate_stats (problem_id, hardware_id) "
        "WHERE valid_measurements > 0"
    )
    op.execute(
        "CREATE INDEX ix_candidate_stats_rank ON candidate_stats "
        "(hardware_id, problem_id, (sum_log_median / valid_measurements), candidate_id) "
        "WHERE valid_measurements > 0"
    )
