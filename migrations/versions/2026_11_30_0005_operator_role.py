"""Tokens may have the operator role: fleet-wide work, created only from the CLI.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 21:40:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = "role IN ('agent', 'admin')"
AFTER = "role IN ('agent', 'admin', 'operator')"


def upgrade() -> None:
    op.drop_constraint(op.f("ck_tokens_role"), "tokens", type_="check")
    op.create_check_constraint(op.f("ck_tokens_role"), "tokens", AFTER)
    op.create_index(op.f("ix_tokens_org_id"), "tokens", ["org_id"])


def downgrade() -> None:
    # An operator token has no role before this revision: it is revoked there.
    op.execute("UPDATE tokens SET revoked_at = now(), role = 'admin' WHERE role = 'operator'")
    op.drop_index(op.f("ix_tokens_org_id"), table_name="tokens")
    op.drop_constraint(op.f("ck_tokens_role"), "tokens", type_="check")
    op.create_check_constraint(op.f("ck_tokens_role"), "tokens", BEFORE)
